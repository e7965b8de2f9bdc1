"""HTML forms -> the API's payloads, so a page and the API validate the same input with the same serializer."""

from __future__ import annotations


def form_payload(post, fields, *, integers=(), nullable=(), checkboxes=()) -> dict:
    """The submitted form as the JSON body the API would get.

    Values stay strings, so the serializer parses and reports them exactly as the API would; the exceptions
    say what JSON would carry instead: ``integers`` become ints when they parse (the jobs serializer refuses
    numbers sent as strings), a blank ``nullable`` field is null, an unticked checkbox is false. Any other
    blank field is left out, so the serializer applies its default or says it is required."""
    payload: dict = {}
    for name in fields:
        if name in checkboxes:
            payload[name] = name in post
            continue
        raw = post.get(name, "").strip()
        if raw == "":
            if name in nullable:
                payload[name] = None
            continue
        if name in integers:
            try:
                payload[name] = int(raw)
                continue
            except ValueError:
                pass
        payload[name] = raw
    return payload
