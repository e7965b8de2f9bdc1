"""The one place errors become HTTP responses under /api/: ``PortalError`` (each names its status) and
DRF's own exceptions, all in the one JSON error shape (``portal.errors.error_body``)."""

from __future__ import annotations

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler

from portal.db import is_lock_conflict
from portal.errors import PortalError, error_body


def _field_errors(detail) -> dict:
    """Flatten DRF's nested ErrorDetail structure into {field: [{code, message}]} (dotted paths)."""
    out: dict[str, list[dict]] = {}

    def walk(prefix: str, value):
        if isinstance(value, dict):
            for k, v in value.items():
                walk(f"{prefix}.{k}" if prefix else str(k), v)
        elif isinstance(value, list):
            if value and all(isinstance(v, exceptions.ErrorDetail | str) for v in value):
                for v in value:
                    out.setdefault(prefix or "non_field_errors", []).append(
                        {"code": getattr(v, "code", "invalid"), "message": str(v)}
                    )
            else:
                for i, v in enumerate(value):
                    if v:
                        walk(f"{prefix}.{i}" if prefix else str(i), v)
        elif value:
            out.setdefault(prefix or "non_field_errors", []).append(
                {"code": getattr(value, "code", "invalid"), "message": str(value)}
            )

    walk("", detail)
    return out


_DRF_CODES = {
    exceptions.NotAuthenticated: "not_authenticated",
    exceptions.AuthenticationFailed: "authentication_failed",
    exceptions.PermissionDenied: "permission_denied",
    exceptions.NotFound: "not_found",
    exceptions.MethodNotAllowed: "method_not_allowed",
    exceptions.NotAcceptable: "not_acceptable",
    exceptions.UnsupportedMediaType: "unsupported_media_type",
    exceptions.Throttled: "throttled",
    exceptions.ParseError: "malformed_request",
}


def exception_handler(exc, context):
    if is_lock_conflict(exc):  # retried already (portal.db.retry_on_conflict) and still losing: ask the client
        response = Response(error_body("busy", "The database is busy with conflicting changes; retry shortly."),
                            status=status.HTTP_503_SERVICE_UNAVAILABLE)
        response["Retry-After"] = "1"
        return response
    if isinstance(exc, PortalError):
        return Response(error_body(exc.code, exc.message, exc.fields, exc.detail), status=exc.http_status)
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    response = drf_handler(exc, context)
    if response is None:
        return None
    if isinstance(exc, exceptions.ValidationError):
        response.data = error_body("validation_error", "Invalid input.", _field_errors(exc.detail))
        return response
    code = next((c for cls, c in _DRF_CODES.items() if isinstance(exc, cls)), "error")
    detail = exc.detail if isinstance(exc.detail, str) else str(exc.detail)
    response.data = error_body(code, str(detail))
    return response
