"""One JSON error shape for the whole API, mapped to HTTP in this one place.

    {"error": {"code": "validation_error", "message": "...", "fields": {"gpus": [{"code": "...",
     "message": "..."}]}}}

Services raise ``PortalError`` subclasses (no HTTP knowledge); DRF's own exceptions are mapped too.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import exceptions, status
from rest_framework.response import Response
from rest_framework.views import exception_handler as drf_handler


class PortalError(Exception):
    code = "error"
    http_status = status.HTTP_400_BAD_REQUEST
    message = "The request could not be processed."

    def __init__(self, message: str | None = None, *, fields: dict | None = None, detail: dict | None = None):
        super().__init__(message or self.message)
        self.message = message or self.message
        self.fields = fields or {}
        self.detail = detail or {}


class ValidationFailed(PortalError):
    code = "validation_error"
    message = "Invalid input."


class NotFound(PortalError):
    code = "not_found"
    http_status = status.HTTP_404_NOT_FOUND
    message = "Not found."


class Forbidden(PortalError):
    code = "permission_denied"
    http_status = status.HTTP_403_FORBIDDEN
    message = "You do not have permission to do this."


class Conflict(PortalError):
    code = "conflict"
    http_status = status.HTTP_409_CONFLICT


class InvalidTransition(Conflict):
    code = "invalid_state"
    message = "The job is not in a state that allows this."


class LogsUnavailable(PortalError):
    """The cluster cannot show the logs now (no pod yet, container not started, the node's kubelet silent)."""

    code = "logs_unavailable"
    http_status = status.HTTP_409_CONFLICT
    message = "The job's logs are unavailable right now."


class IdempotencyKeyReused(PortalError):
    code = "idempotency_key_reused"
    http_status = status.HTTP_422_UNPROCESSABLE_ENTITY
    message = "This Idempotency-Key was already used with a different request body."


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


def error_body(code: str, message: str, fields: dict | None = None, detail: dict | None = None) -> dict:
    body: dict = {"code": code, "message": message}
    if fields:
        body["fields"] = fields
    if detail:
        body["detail"] = detail
    return {"error": body}


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
    from portal.db import is_lock_conflict

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
