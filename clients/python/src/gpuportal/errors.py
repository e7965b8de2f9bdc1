"""Typed errors. Every error the portal answers has one JSON shape::

    {"error": {"code": "validation_error", "message": "...",
               "fields": {"gpus": [{"code": "max_value", "message": "..."}]}, "detail": {...}}}

and becomes one of the exceptions below, chosen by HTTP status, carrying ``code``, ``message``, ``fields``
and ``detail`` as the portal sent them. Catch ``PortalError`` for all of them.
"""

from __future__ import annotations

from typing import Any


class PortalError(Exception):
    """Base of every error this client raises about the portal or a job."""

    def __init__(self, message: str, *, code: str = "error", status: int | None = None,
                 fields: dict[str, list[dict[str, str]]] | None = None, detail: dict | None = None,
                 body: Any = None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status
        self.fields = fields or {}
        self.detail = detail or {}
        self.body = body

    def __str__(self) -> str:
        text = f"{self.code}: {self.message}"
        for name, problems in self.fields.items():
            for p in problems:
                text += f"\n  {name}: {p.get('message', '')} ({p.get('code', 'invalid')})"
        return text


class ValidationError(PortalError):
    """400: the request was refused as it is (``fields`` maps each bad field, as a dotted path such as
    ``jobs.3.gpus``, to its problems); nothing was created."""


class AuthenticationError(PortalError):
    """401: no token, or an invalid, expired or revoked one."""


class PermissionDenied(PortalError):
    """403: authenticated, but not allowed (for example not a member of any department)."""


class NotFound(PortalError):
    """404: no such object, or one of another department (the portal does not tell them apart)."""


class Conflict(PortalError):
    """409: the object's state does not allow this (``invalid_state``: cancelling a finished job;
    ``logs_unavailable``: no pod yet)."""


class IdempotencyKeyReused(PortalError):
    """422: this Idempotency-Key was already used with a different body."""


class RateLimited(PortalError):
    """429 that the client did not (or could no longer) wait out: ``retry_after`` seconds, or None when
    waiting would not help (a batch larger than the whole submit rate)."""

    def __init__(self, message: str, *, retry_after: float | None = None, **kwargs):
        super().__init__(message, **kwargs)
        self.retry_after = retry_after


class ServerError(PortalError):
    """5xx: the portal failed, or stayed busy after every retry."""


class PortalUnreachable(PortalError):
    """The portal could not be reached (connection refused, DNS, TLS, timeouts) after every retry."""


class JobError(PortalError):
    """A job ended, or a wait for it ended, without success. ``job`` is the job as last read."""

    def __init__(self, message: str, *, job: dict, **kwargs):
        kwargs.setdefault("code", (job.get("reason") or {}).get("code") or job.get("state") or "error")
        super().__init__(message, **kwargs)
        self.job = job


class JobFailed(JobError):
    """The job failed (``job["reason"]`` says why, ``job["exit_code"]`` when the container exited)."""


class JobCancelled(JobError):
    """The job was cancelled (by its owner, an admin, or an approval that was rejected)."""


class WaitTimeout(JobError, TimeoutError):
    """``wait(timeout=...)`` ran out before the job finished; the job goes on."""


BY_STATUS: dict[int, type[PortalError]] = {
    400: ValidationError,
    401: AuthenticationError,
    403: PermissionDenied,
    404: NotFound,
    409: Conflict,
    422: IdempotencyKeyReused,
    429: RateLimited,
}


def from_response(status: int, body: Any, *, retry_after: float | None = None) -> PortalError:
    """The typed error for an HTTP error answer (``body``: the decoded JSON, or text when it was not JSON)."""
    err = body.get("error") if isinstance(body, dict) else None
    if isinstance(err, dict):
        code = str(err.get("code") or "error")
        message = str(err.get("message") or f"HTTP {status}")
        fields = err.get("fields") if isinstance(err.get("fields"), dict) else {}
        detail = err.get("detail") if isinstance(err.get("detail"), dict) else {}
    else:  # not the portal's shape: a proxy's page, a load balancer's 502
        code = "http_error"
        text = body if isinstance(body, str) else ""
        message = f"HTTP {status}" + (f": {text.strip()[:200]}" if text.strip() else "")
        fields, detail = {}, {}
    cls = BY_STATUS.get(status) or (ServerError if status >= 500 else PortalError)
    kwargs = dict(code=code, status=status, fields=fields, detail=detail, body=body)
    if cls is RateLimited:
        return RateLimited(message, retry_after=retry_after, **kwargs)
    return cls(message, **kwargs)
