"""Brute-force protection for the log-in form, the admin log-in and API tokens (django-axes).

Failed attempts are counted per account name and, separately, per client IP address (whether the account
exists or not, so a lockout says nothing about which names exist). After ``AXES_FAILURE_LIMIT`` failures
either one is locked for ``AXES_COOLOFF_TIME``; a success resets the count. Every lockout is written to the
audit log once per cool-off. See docs/operations.md.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.dispatch import receiver
from django.http import JsonResponse
from django.shortcuts import render
from django.utils import timezone

log = logging.getLogger(__name__)

MESSAGE = "Too many failed attempts. Try again later."


def _minutes() -> int:
    return int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)


def lockout_response(request, original_response=None, credentials=None):
    """The same answer for an existing and an unknown account: 429, the one error shape on the API, the
    log-in page with a neutral message elsewhere."""
    from portal.errors import error_body

    message = f"{MESSAGE} Attempts are blocked for {_minutes()} minutes."
    if request.path.startswith("/api/"):
        response = JsonResponse(error_body("throttled", message), status=429)
    else:
        response = render(request, "portal/login.html", {"lockout_message": message, "form": None}, status=429)
    response["Retry-After"] = str(int(settings.AXES_COOLOFF_TIME.total_seconds()))
    return response


def _audit_lockout(*, username: str | None, ip_address: str | None, path: str) -> None:
    from portal.models import AuditEntry

    since = timezone.now() - settings.AXES_COOLOFF_TIME
    key = (username or "")[:64]
    if AuditEntry.objects.filter(action="auth.lockout", object_type="auth.login", object_id=key,
                                 at__gte=since, new__ip_address=ip_address).exists():
        return  # one entry per lockout, not one per refused attempt during it
    AuditEntry.objects.create(action="auth.lockout", object_type="auth.login", object_id=key,
                              new={"username": username, "ip_address": ip_address, "path": path[:200]},
                              comment=f"locked out after {settings.AXES_FAILURE_LIMIT} failed attempts")


try:
    from axes.signals import user_locked_out

    @receiver(user_locked_out, dispatch_uid="portal-audit-lockout")
    def _on_locked_out(sender, request=None, username=None, ip_address=None, **kwargs):
        log.warning("login lockout: username=%r ip=%s", username, ip_address)
        _audit_lockout(username=username, ip_address=ip_address, path=getattr(request, "path", "") or "")
except ImportError:  # pragma: no cover - axes is a main dependency
    pass


def token_attempt_allowed(request, key_id: str) -> bool:
    """Whether this client may try an API token now (the token's key id is its 'account')."""
    from axes.handlers.proxy import AxesProxyHandler

    django_request = getattr(request, "_request", request)
    AxesProxyHandler.update_request(django_request)
    return AxesProxyHandler.is_allowed(django_request, {"username": key_id})


def token_attempt_failed(request, key_id: str) -> None:
    from django.contrib.auth.signals import user_login_failed

    django_request = getattr(request, "_request", request)
    user_login_failed.send(sender=__name__, credentials={"username": key_id}, request=django_request)
