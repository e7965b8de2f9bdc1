"""Brute-force protection for the log-in form, the admin log-in and API tokens (django-axes).

The credential is verified first, always: a right one succeeds whatever anybody else did, so nobody can lock
an owner out by failing with their account name, their token's key id (which is not secret) or from their
address. Failed attempts are counted per account name (or token key id) and, separately, per client IP
address (whether the account exists or not, so a lockout says nothing about which names exist). After
``AXES_FAILURE_LIMIT`` failures either one is locked for ``AXES_COOLOFF_TIME``: a wrong attempt is then
answered 429 with ``Retry-After`` instead of 401 (the same information, one bit: not this credential). A
success resets its own account's count, not the address's. Every lockout is written to the audit log once
per cool-off. See docs/operations.md.
"""

from __future__ import annotations

import logging

from axes.backends import AxesStandaloneBackend
from django.conf import settings
from django.contrib.auth.signals import user_logged_in
from django.dispatch import receiver
from django.http import JsonResponse
from django.shortcuts import render
from django.utils import timezone

from portal.errors import error_body
from portal.models import AuditEntry

log = logging.getLogger(__name__)

MESSAGE = "Too many failed attempts. Try again later."


def _minutes() -> int:
    return int(settings.AXES_COOLOFF_TIME.total_seconds() // 60)


def lockout_response(request, original_response=None, credentials=None):
    """The same answer for an existing and an unknown account: 429, the one error shape on the API, the
    log-in page with a neutral message elsewhere."""
    message = f"{MESSAGE} Wrong attempts are refused for {_minutes()} minutes."
    if request.path.startswith("/api/"):
        response = JsonResponse(error_body("throttled", message), status=429)
    else:
        response = render(request, "portal/login.html", {"lockout_message": message, "form": None}, status=429)
    response["Retry-After"] = str(int(settings.AXES_COOLOFF_TIME.total_seconds()))
    return response


def _audit_lockout(*, username: str | None, ip_address: str | None, path: str) -> None:
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


class VerifyFirstAxesBackend(AxesStandaloneBackend):
    """Axes' backend without its check before authentication.

    Axes' own backend refuses a locked account or address before the password is looked at, so a stranger's
    failures refuse the owner's right password. This one lets every attempt reach the real backends: a right
    password logs in; a wrong one sends ``user_login_failed``, which axes counts, and once the account or the
    address is over the limit axes flags the request and ``AxesMiddleware`` answers with
    ``lockout_response`` (429). It stays a subclass so axes' configuration check still finds a backend."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        return None


@receiver(user_logged_in, dispatch_uid="portal-reset-own-failures")
def _reset_own_failures(sender, request=None, user=None, **kwargs):
    """A success forgets its own account's failures only: resetting the address's too (axes'
    ``AXES_RESET_ON_SUCCESS``) would let anyone with one account wash out the failures of a guesser on the
    same address."""
    from axes.models import AccessAttempt

    if user is not None:
        AccessAttempt.objects.filter(username=user.get_username()).delete()


def token_attempt_failed(request, key_id: str) -> None:
    """Count a wrong API token against its key id (the token's 'account') and the client's address. Over
    the limit, axes flags the request and the middleware turns the 401 into the lockout's 429."""
    from django.contrib.auth.signals import user_login_failed

    django_request = getattr(request, "_request", request)
    user_login_failed.send(sender=__name__, credentials={"username": key_id}, request=django_request)
