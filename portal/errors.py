"""The portal's errors and the one JSON error shape of the API.

    {"error": {"code": "validation_error", "message": "...", "fields": {"gpus": [{"code": "...",
     "message": "..."}]}}}

Services raise ``PortalError`` subclasses; each names its HTTP status, and ``portal.api.errors`` turns them
(and DRF's own exceptions) into responses. ``NotFound`` and ``Forbidden`` are also Django's ``Http404`` and
``PermissionDenied``, so a page that lets them through answers the same 404 or 403 page as the API its JSON.
This module imports nothing of DRF's views: models import the tenancy gate, which raises these.
"""

from __future__ import annotations

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404
from rest_framework import status


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


class NotFound(PortalError, Http404):
    code = "not_found"
    http_status = status.HTTP_404_NOT_FOUND
    message = "Not found."


class Forbidden(PortalError, DjangoPermissionDenied):
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


class LimitReached(PortalError):
    """A per-user limit refuses more (too many jobs waiting): like the submit throttle a 429, but without
    Retry-After, since only the user's own jobs starting or being cancelled make room, not time alone."""

    code = "limit_reached"
    http_status = status.HTTP_429_TOO_MANY_REQUESTS
    message = "A per-user limit refuses this."


def error_body(code: str, message: str, fields: dict | None = None, detail: dict | None = None) -> dict:
    body: dict = {"code": code, "message": message}
    if fields:
        body["fields"] = fields
    if detail:
        body["detail"] = detail
    return {"error": body}
