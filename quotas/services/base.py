"""A one-field validation error, the shape every budget use case refuses bad input with."""

from __future__ import annotations

from portal.errors import ValidationFailed


def field_error(field: str, message: str, code: str = "invalid") -> ValidationFailed:
    return ValidationFailed(fields={field: [{"code": code, "message": message}]})
