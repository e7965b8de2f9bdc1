"""Shared API plumbing: pagination, the JSON parser, the Idempotency-Key header."""

from __future__ import annotations

from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.pagination import PageNumberPagination

# Deeper than any job, batch or budget body can be; a deeper document is refused before it is walked.
MAX_JSON_DEPTH = 32
IDEMPOTENCY_KEY_MAX = 200


class Pagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, plus what it lets through to a 500: a document nested so deep that decoding it
    overflows the stack (RecursionError), and NUL characters in keys or strings (PostgreSQL cannot store
    them). Both are a 400 ``malformed_request`` like any other unparsable body."""

    def parse(self, stream, media_type=None, parser_context=None):
        try:
            data = super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels.") from None
        _check(data)
        return data


def _check(data) -> None:
    """Iteratively (a recursive walk would overflow on exactly the documents it must refuse)."""
    todo = [(data, 1)]
    while todo:
        value, depth = todo.pop()
        if depth > MAX_JSON_DEPTH:
            raise ParseError(f"JSON parse error - nested deeper than {MAX_JSON_DEPTH} levels.")
        if isinstance(value, str):
            if "\x00" in value:
                raise ParseError("JSON parse error - NUL characters are not allowed.")
        elif isinstance(value, dict):
            for k, v in value.items():
                if "\x00" in k:
                    raise ParseError("JSON parse error - NUL characters are not allowed.")
                todo.append((v, depth + 1))
        elif isinstance(value, list):
            todo.extend((v, depth + 1) for v in value)


def idempotency_key(request) -> str | None:
    """The request's Idempotency-Key header: None when absent, else at most IDEMPOTENCY_KEY_MAX printable
    characters (a 400 with the header as the field otherwise)."""
    # Imported here: DRF imports this module (the parser setting) while portal.errors is still loading.
    from portal.errors import ValidationFailed

    key = request.headers.get("Idempotency-Key") or None
    if key is None:
        return None
    if len(key) > IDEMPOTENCY_KEY_MAX:
        raise ValidationFailed(fields={"Idempotency-Key": [
            {"code": "too_long", "message": f"At most {IDEMPOTENCY_KEY_MAX} characters."}]})
    if not key.isprintable():
        raise ValidationFailed(fields={"Idempotency-Key": [
            {"code": "invalid", "message": "Only printable characters."}]})
    return key
