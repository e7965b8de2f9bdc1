"""Log-in throttling that slows guessing and still lets the owner in: OWASP's device cookies over django-axes.

django-axes is the one counter: every failure (a password on the log-in form or the admin, an API token) is
recorded in its ``AccessAttempt`` table and judged against ``AXES_FAILURE_LIMIT`` failures within
``AXES_COOLOFF_TIME``. This module decides *which* count a failure lands in and refuses sign-ins *before*
the password is looked at:

* **A browser without a valid device cookie for the account** (an unknown device) counts its failures
  against the account name and against its address. Once either is over the limit, every password from an
  unknown device, right or wrong, is refused with 429 and ``Retry-After`` until the cool-off ends, so a
  guesser cannot go on until they hit the password, nor sweep many accounts from one address.
* **A browser holding a valid device cookie** (issued on every successful sign-in: signed with the
  ``SECRET_KEY``, naming the account it was issued for, expiring after ``LOGIN_DEVICE_COOKIE_AGE``) counts
  its failures against that cookie alone and is refused only when that cookie is over the limit. The owner
  of a locked account keeps signing in from a browser that signed in before; a stolen or guessing device
  locks itself. A forged, expired or other account's cookie is an unknown device.
* **API tokens** keep their rule: the token is verified first, so a right one always passes, and wrong ones
  are counted per key id and per address and answered 429 past the limit (``token_attempt_failed``). A
  token's key id is not secret, so a lock that refused the right token would let a stranger lock the owner
  out; its 256 random bits need no lock against guessing.

Unknown account names are counted and refused exactly like real ones, so nothing tells whether an account
exists. A success forgets the failures of the count it was judged by (the device's, or the account's from
unknown devices), never the address's. Every lockout is written to the audit log once per cool-off.
See docs/operations.md, "Log-in throttling".
"""

from __future__ import annotations

import logging
import math
import secrets
import time
from dataclasses import dataclass
from datetime import datetime

from axes.backends import AxesStandaloneBackend
from axes.handlers.proxy import AxesProxyHandler
from axes.models import AccessAttempt
from django.conf import settings
from django.contrib.auth.signals import user_logged_in, user_login_failed
from django.core import signing
from django.core.exceptions import PermissionDenied
from django.db.models import Max, Sum
from django.dispatch import receiver
from django.http import JsonResponse
from django.shortcuts import render
from django.utils import timezone

from portal.errors import error_body
from portal.models import AuditEntry

log = logging.getLogger(__name__)

# A colon is not allowed in a Django user name, so a device's count never meets an account's or a token's.
DEVICE_PREFIX = "device:"
_SALT = "portal.lockout.device"

clock = time.time  # the device cookie's clock, in seconds; tests replace it


@dataclass(frozen=True)
class Lock:
    """A count over the limit: sign-in is paused for ``retry_after`` more seconds."""

    retry_after: int

    @property
    def minutes(self) -> int:
        return max(1, math.ceil(self.retry_after / 60))


# ------------------------------------------------------------------------------------------ device cookies

def device_cookie_name() -> str:
    return settings.LOGIN_DEVICE_COOKIE_NAME


def issue_device_cookie(username: str, *, now: float) -> str:
    """A new device cookie's value for a browser that has just signed in as ``username``."""
    expires = int(now + settings.LOGIN_DEVICE_COOKIE_AGE.total_seconds())
    payload = {"u": username, "d": secrets.token_urlsafe(16), "x": expires}
    return signing.Signer(salt=_SALT).sign_object(payload, compress=False)


def device_of(value: str | None, username: str, *, now: float) -> str | None:
    """The device id of a valid cookie issued for ``username``; None for a missing, forged, expired or other
    account's cookie (all of which are an unknown device)."""
    if not value:
        return None
    try:
        payload = signing.Signer(salt=_SALT).unsign_object(value)
    except (signing.BadSignature, ValueError):
        return None
    if not isinstance(payload, dict) or payload.get("u") != username:
        return None
    device, expires = payload.get("d"), payload.get("x")
    if not isinstance(device, str) or not device or not isinstance(expires, int) or expires <= now:
        return None
    return device


# ------------------------------------------------------------------------------------------ counts

def _lock(filters: list[dict], *, now: datetime) -> Lock | None:
    """The lock of the first count over the limit, counted as axes counts (failures whose latest attempt is
    within the cool-off), lasting until the cool-off after the latest failure of the longest lock."""
    cooloff = settings.AXES_COOLOFF_TIME
    ends = []
    for filter_kwargs in filters:
        counted = AccessAttempt.objects.filter(attempt_time__gte=now - cooloff, **filter_kwargs).aggregate(
            failures=Sum("failures_since_start"), last=Max("attempt_time"))
        if (counted["failures"] or 0) >= settings.AXES_FAILURE_LIMIT:
            ends.append(counted["last"] + cooloff)
    if not ends:
        return None
    return Lock(retry_after=max(1, math.ceil((max(ends) - now).total_seconds())))


def _filters(key: str, ip_address: str | None) -> list[dict]:
    """What a key is judged by: a trusted device by its own failures alone; an account name from an unknown
    device, or a token's key id, by its own and by its address's."""
    if key.startswith(DEVICE_PREFIX) or not ip_address:
        return [{"username": key}]
    return [{"username": key}, {"ip_address": ip_address}]


def _login_key(request, username: str) -> str:
    device = device_of(request.COOKIES.get(device_cookie_name()), username, now=clock())
    return DEVICE_PREFIX + device if device else username


def counted_key(request, credentials: dict | None = None) -> str | None:
    """``AXES_USERNAME_CALLABLE``: the count a failure lands in (the device's for a trusted browser, else the
    account name or the token's key id)."""
    return getattr(request, "portal_login_key", None) or (credentials or {}).get("username")


def lockout_parameters(request_or_attempt, credentials: dict | None = None) -> list[str]:
    """``AXES_LOCKOUT_PARAMETERS``: which counts axes judges a failure by, the same as ``_filters``."""
    key = (getattr(request_or_attempt, "portal_login_key", None) or getattr(request_or_attempt, "username", None)
           or (credentials or {}).get("username") or "")
    return ["username"] if key.startswith(DEVICE_PREFIX) else ["username", "ip_address"]


def login_lock(request, username: str) -> Lock | None:
    """Whether a password sign-in as ``username`` from this browser and address is paused. Remembers on the
    request which count its failure would land in."""
    AxesProxyHandler.update_request(request)
    request.portal_login_key = _login_key(request, username)
    return _lock(_filters(request.portal_login_key, request.axes_ip_address), now=timezone.now())


class LoginThrottleBackend(AxesStandaloneBackend):
    """The first authentication backend: refuses a paused sign-in before any password is checked, and
    otherwise lets the real backends answer (a wrong password sends ``user_login_failed``, which axes counts
    in the key ``login_lock`` chose; past the limit axes flags the request and ``AxesMiddleware`` answers with
    ``lockout_response``). It stays a subclass of axes' backend so axes' configuration check finds one.

    Raising ``PermissionDenied`` stops Django's ``authenticate`` and sends ``user_login_failed``; with the
    request already flagged (and ``AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT`` off) axes records no
    failure for it, so a refused attempt neither counts nor stretches the lock, and sends ``user_locked_out``
    for the audit."""

    def authenticate(self, request, username=None, password=None, **kwargs):
        if request is None or username is None:
            return None  # single sign-on and other credentials: not a password sign-in
        lock = login_lock(request, str(username))
        if lock is not None:
            request.portal_lock = lock
            request.axes_locked_out = True
            raise PermissionDenied("sign-in is paused")
        return None


# ------------------------------------------------------------------------------------------ answers

def _lock_of(request, credentials) -> Lock:
    lock = getattr(request, "portal_lock", None)
    if lock is None:  # axes flagged the limit-th failure itself: judge the count it just wrote
        key = counted_key(request, credentials) or ""
        # now, not the request's start: axes stamps a failure when it writes it (auto_now_add)
        lock = _lock(_filters(key, getattr(request, "axes_ip_address", None)), now=timezone.now())
    return lock or Lock(retry_after=int(settings.AXES_COOLOFF_TIME.total_seconds()))


def lockout_response(request, original_response=None, credentials=None):
    """429 with ``Retry-After`` (the seconds left), the same for an existing and an unknown account: the one
    error shape on the API, the log-in page saying plainly that sign-in is paused and for how long."""
    lock = _lock_of(request, credentials)
    if request.path.startswith("/api/"):
        message = f"Too many failed attempts. Wrong tokens are refused for {lock.minutes} more minutes."
        response = JsonResponse(error_body("throttled", message), status=429)
    else:
        message = (f"Sign-in is paused for {lock.minutes} minutes after too many failed attempts, whatever "
                   "the password. A browser that has signed in to this account before can still sign in.")
        response = render(request, "portal/login.html", {"lockout_message": message, "lockout": lock},
                          status=429)
    response["Retry-After"] = str(lock.retry_after)
    return response


class DeviceCookieMiddleware:
    """Hands a browser that has just signed in its device cookie (host-only, HttpOnly, Secure behind TLS)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        value = getattr(request, "portal_new_device", None)
        if value and response.status_code < 400:
            response.set_cookie(device_cookie_name(), value,
                                max_age=int(settings.LOGIN_DEVICE_COOKIE_AGE.total_seconds()),
                                httponly=True, secure=settings.SESSION_COOKIE_SECURE, samesite="Lax")
        return response


# ------------------------------------------------------------------------------------------ signals

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


@receiver(user_logged_in, dispatch_uid="portal-reset-own-failures")
def _on_logged_in(sender, request=None, user=None, **kwargs):
    """A success forgets the failures of the count it was judged by only: a trusted device's own, or the
    account's from unknown devices. Never the address's (anyone with one account would wash out a guesser's
    failures on others from the same address), and a trusted device's success leaves the account's lock for
    unknown devices in place (the owner signing in says nothing about the guesses from elsewhere). The
    browser gets a new device cookie."""
    if user is None:
        return
    key = getattr(request, "portal_login_key", None) or user.get_username()
    AccessAttempt.objects.filter(username=key).delete()
    if request is not None:
        request.portal_new_device = issue_device_cookie(user.get_username(), now=clock())


def token_attempt_failed(request, key_id: str) -> None:
    """Count a wrong API token against its key id (the token's 'account') and the client's address. Over
    the limit, axes flags the request and the middleware turns the 401 into the lockout's 429."""
    django_request = getattr(request, "_request", request)
    user_login_failed.send(sender=__name__, credentials={"username": key_id}, request=django_request)
