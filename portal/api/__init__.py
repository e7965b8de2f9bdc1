"""Shared API plumbing: pagination, the JSON parser, the Idempotency-Key header, the error statuses every
operation documents. The strict serializer base is in ``portal.api.serializers``."""

from __future__ import annotations

from rest_framework import parsers
from rest_framework.exceptions import ParseError
from rest_framework.pagination import PageNumberPagination

from portal.errors import ValidationFailed

# Deeper than any job, batch or budget body can be; a deeper document is refused before it is walked.
MAX_JSON_DEPTH = 32
# More keys in one object than any body has (a job has about 25 fields and at most 100 env variables; Django
# caps form fields at the same DATA_UPLOAD_MAX_NUMBER_FIELDS). Refused before any serializer looks at a key.
MAX_JSON_KEYS = 1000
IDEMPOTENCY_KEY_MAX = 200


class Pagination(PageNumberPagination):
    page_size = 50
    page_size_query_param = "page_size"
    max_page_size = 500


class JSONParser(parsers.JSONParser):
    """DRF's JSON parser, plus what it lets through to a 500: a document nested so deep that decoding it
    overflows the stack (RecursionError), and NUL characters in keys or strings (PostgreSQL cannot store
    them); and what would keep a worker busy validating it: an object with more than MAX_JSON_KEYS keys.
    All are a 400 ``malformed_request`` like any other unparsable body."""

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
            if len(value) > MAX_JSON_KEYS:
                raise ParseError(f"JSON parse error - an object has {len(value)} keys; at most {MAX_JSON_KEYS} "
                                 "are accepted.")
            for k, v in value.items():
                if "\x00" in k:
                    raise ParseError("JSON parse error - NUL characters are not allowed.")
                todo.append((v, depth + 1))
        elif isinstance(value, list):
            todo.extend((v, depth + 1) for v in value)


def idempotency_key(request) -> str | None:
    """The request's Idempotency-Key header: None when absent, else at most IDEMPOTENCY_KEY_MAX printable
    characters (a 400 with the header as the field otherwise)."""
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


ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {"error": {
        "type": "object",
        "required": ["code", "message"],
        "properties": {
            "code": {"type": "string", "example": "validation_error"},
            "message": {"type": "string"},
            "fields": {"type": "object", "additionalProperties": {"type": "array", "items": {
                "type": "object", "properties": {"code": {"type": "string"}, "message": {"type": "string"}}}}},
            "detail": {"type": "object"},
        },
    }},
}
ERROR_RESPONSES = {
    "400": "Invalid input (`validation_error` with `fields`, `malformed_request`, `request_too_large`).",
    "401": "Not authenticated, or a bad token.",
    "403": "Authenticated but not allowed (or CSRF missing for a session).",
    "404": "No such object, or another department's.",
    "405": "Method not allowed.",
    "409": "The object's state does not allow this.",
    "415": "Unsupported media type (send JSON).",
    "422": "Idempotency-Key reused with another body.",
    "429": "Throttled or locked out (see Retry-After), or a per-user limit reached (`limit_reached`, no "
           "Retry-After: too many jobs waiting).",
    "503": "The database is busy with conflicting changes; retry after Retry-After.",
}


def document_errors(result, generator, request, public):
    """drf-spectacular postprocessing hook: every operation may answer the one error shape with these
    statuses (portal/api/errors.py), so clients and schema-driven tests know them."""
    result.setdefault("components", {}).setdefault("schemas", {})["Error"] = ERROR_SCHEMA
    ref = {"$ref": "#/components/schemas/Error"}
    for path_item in result.get("paths", {}).values():
        for method, operation in path_item.items():
            if method not in ("get", "post", "put", "patch", "delete"):
                continue
            responses = operation.setdefault("responses", {})
            for status_code, description in ERROR_RESPONSES.items():
                responses.setdefault(status_code, {"description": description,
                                                   "content": {"application/json": {"schema": ref}}})
    return result
