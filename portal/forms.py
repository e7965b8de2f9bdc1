"""HTML forms -> the API's payloads, so a page and the API validate the same input with the same serializer."""

from __future__ import annotations

from django.contrib import messages
from django.shortcuts import render

from portal.errors import Forbidden, NotFound, PortalError, ValidationFailed
from portal.money import CreditsError, parse_credits


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


def credit_fields(payload: dict, serializer_class, names, *, positive: str | None = None) -> dict[str, list[str]]:
    """Pages take amounts in credits, the API's serializers in integer mcr: convert ``names`` of ``payload``
    in place, within the bounds the serializer's own field sets (so a page cannot accept what the API would
    refuse), and return the errors, worded in credits, of those that do not convert (they are left out of
    the payload). ``positive``: the message for a negative amount when the page takes its sign elsewhere
    (e.g. credit or debit) although the API's field is signed."""
    fields = serializer_class().fields
    errors: dict[str, list[str]] = {}
    for name in names:
        if name not in payload or payload[name] is None:
            continue
        field = fields[name]
        lowest = 0 if positive is not None else getattr(field, "min_value", None)
        try:
            payload[name] = parse_credits(payload[name], min_mcr=lowest, max_mcr=getattr(field, "max_value", None),
                                          negative_message=positive)
        except CreditsError as exc:
            del payload[name]
            errors[name] = [str(exc)]
    return errors


def parse_labels(text: str) -> dict | None:
    """``key=value`` pairs separated by commas (or new lines) as a dict; None when one is not a pair."""
    out = {}
    for part in (p.strip() for p in text.replace("\n", ",").split(",")):
        if not part:
            continue
        if "=" not in part:
            return None
        k, v = (x.strip() for x in part.split("=", 1))
        if not k:
            return None
        out[k] = v
    return out


def labels_into(post, name: str, payload: dict, errors: dict) -> None:
    """The form field ``name`` (``key=value, ...``) as a label mapping in ``payload``, or a form error."""
    labels = parse_labels(post.get(name, ""))
    if labels is None:
        errors[name] = ["Write labels as key=value, separated by commas."]
    else:
        payload[name] = labels


def service_errors(exc: PortalError) -> dict[str, list[str]]:
    """A service's refusal as form errors: its field errors, plus its message when it says more than the
    generic "Invalid input." (NotFound and Forbidden are not form errors: they stay a 404 and a 403)."""
    if isinstance(exc, NotFound | Forbidden):
        raise exc
    out = {k: [i["message"] for i in v] for k, v in exc.fields.items()} if exc.fields else {}
    if not exc.fields or exc.message != ValidationFailed.message:
        out.setdefault("non_field_errors", []).append(exc.message)
    return out


def refusal_text(exc: PortalError) -> str:
    """A service's refusal in one line, for a page's flash message: its message, then its field errors."""
    detail = "; ".join(i["message"] for items in exc.fields.values() for i in items)
    return f"{exc.message} {detail}".strip()


def act_and_flash(request, action, success: str = "") -> bool:
    """A page's one-click POST (delete, restore, cancel): run ``action`` (a service call) and say how it went
    as a flash message, ``success`` or the service's refusal. Returns whether it was applied."""
    try:
        action()
    except PortalError as exc:
        messages.error(request, exc.message)
        return False
    if success:
        messages.success(request, success)
    return True


def submit_form(serializer_class, payload: dict, apply, errors: dict | None = None) -> dict[str, list[str]]:
    """Validate ``payload`` with the API's serializer, then ``apply(validated_data)`` (a service call).
    Returns the field errors ({} when it was applied); nothing is applied when any error is known. A field
    the page already refused (``errors``) keeps the page's message alone: the serializer would only add that
    it is missing."""
    errors = dict(errors or {})
    s = serializer_class(data=payload)
    if not s.is_valid():
        for k, v in s.errors.items():
            if k not in errors:
                errors[k] = [str(e) for e in v]
    if errors:
        return errors
    try:
        apply(s.validated_data)
    except PortalError as exc:
        return service_errors(exc)
    return {}


def render_form(request, template: str, context: dict, errors: dict):
    """The page with its form's errors: a 400 when there are any, so a failed POST is not a success."""
    return render(request, template, {**context, "errors": errors}, status=400 if errors else 200)
