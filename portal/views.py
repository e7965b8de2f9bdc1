"""The portal's own pages that are not an app's: health probes and the error pages (the API lives in
``portal/api/``)."""

from __future__ import annotations

import time

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.cache import cache
from django.core.exceptions import RequestDataTooBig
from django.db import connection
from django.http import JsonResponse
from django.shortcuts import redirect, render
from django.views import defaults
from django.views.decorators.http import require_http_methods, require_POST

from portal import metrics
from portal.api.serializers import TokenCreateSerializer
from portal.celery import app as celery_app
from portal.errors import error_body
from portal.forms import form_payload
from portal.models import ApiToken
from portal.tenancy import CHANGE, VIEW, member


def healthz(request):
    """Liveness, for Kubernetes liveness probes and container health checks (no auth): the process answers.

    It checks no dependency on purpose: restarting a web process cannot bring a database or Redis back, and
    a liveness probe that failed with them would restart every replica in a loop during their outage."""
    return JsonResponse({"status": "ok"})


def _check_database() -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT 1")


def _check_cache() -> None:
    cache.set("readyz", "1", 10)
    if cache.get("readyz") != "1":
        raise RuntimeError("the cache did not return what was stored")


def _check_broker() -> None:
    with celery_app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0.1, interval_max=0.1, timeout=2)


READINESS_CHECKS = {"database": _check_database, "cache": _check_cache, "broker": _check_broker}
# Without these the portal cannot answer at all, or answers but never admits a job again (a worker or beat
# that died leaves the last cycle's record to go stale); without the others it runs degraded (see
# docs/operations.md, failure modes): submissions are still accepted, and pods follow once they are back.
CRITICAL = {"database", "scheduler"}


def readyz(request):
    """Readiness (no auth): the state of every dependency and when the last admission cycle completed. 503
    with a reason when the database is unreachable or the scheduler has stalled (CYCLE_STALE_AFTER_S); 200
    "degraded" when only the cache or the broker is, because submissions, cancels and every page still work
    then.

    ``?exclude=NAME`` (repeatable, as the Kubernetes API server's own ``/readyz`` takes it) still runs and
    reports that check but never answers 503 for it (a failing one is "degraded"): a web replica's readiness
    probe excludes the scheduler, because taking every replica out of the load balancer while the worker is
    down would hide the pages, and the banner that says the scheduler stalled, from everyone."""
    excluded = set(request.GET.getlist("exclude"))
    if unknown := excluded - {*READINESS_CHECKS, "scheduler"}:
        return JsonResponse(error_body("validation_error", f"exclude: no check named {', '.join(sorted(unknown))}; "
                                       f"the checks are {', '.join([*READINESS_CHECKS, 'scheduler'])}."),
                            status=400)
    checks: dict[str, str] = {}
    for name, check in READINESS_CHECKS.items():
        try:
            check()
            checks[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - reported, never raised
            checks[name] = f"error: {type(exc).__name__}"
    body: dict = {"checks": checks}
    try:
        state = metrics.scheduler_state(now=time.time())
        body["scheduler"] = state.summary
        checks["scheduler"] = (f"error: {state.summary}, stalled past {state.stale_after_s:.0f} s"
                               if state.stalled else "ok")
    except Exception as exc:  # noqa: BLE001 - the database check above says why
        checks["scheduler"] = f"error: {type(exc).__name__}"
    failed = {n for n, v in checks.items() if v != "ok"}
    fatal = (failed - excluded) & CRITICAL
    if excluded:
        body["excluded"] = sorted(excluded)
    body["status"] = "error" if fatal else ("degraded" if failed else "ok")  # an excluded failure: degraded
    if fatal:
        body["reason"] = "; ".join(f"{n}: {checks[n].removeprefix('error: ')}" for n in sorted(fatal))
    return JsonResponse(body, status=503 if body["status"] == "error" else 200)


# Error pages: under /api/ the one JSON error shape (a client parsing JSON must never get an HTML page, e.g.
# for a body Django refuses as too large before any view runs); elsewhere Django's own pages.
def _api_or(request, default, status_: int, code: str, message: str, exception=None):
    if request.path.startswith("/api/"):
        return JsonResponse(error_body(code, message), status=status_)
    return default(request, exception) if exception is not None else default(request)


def bad_request(request, exception=None):
    if isinstance(exception, RequestDataTooBig):
        return _api_or(request, defaults.bad_request, 400, "request_too_large", "The request body is too large.",
                       exception)
    return _api_or(request, defaults.bad_request, 400, "malformed_request", "The request could not be read.",
                   exception)


def permission_denied(request, exception=None):
    return _api_or(request, defaults.permission_denied, 403, "permission_denied",
                   "You do not have permission to do this.", exception)


def page_not_found(request, exception=None):
    return _api_or(request, defaults.page_not_found, 404, "not_found", "Not found.", exception)


def server_error(request):
    return _api_or(request, defaults.server_error, 500, "server_error", "Internal error; it has been logged.")


# ------------------------------------------------------------------------------------------ API tokens page
TOKEN_FIELDS = ("name", "ttl_days")
NEW_TOKEN_KEY = "new_api_token"


@login_required
@require_http_methods(["GET", "POST"])
def tokens(request):
    """Your API tokens: create one (name, lifetime; the secret is shown once, on this answer only), see when
    each was last used, revoke it. The same serializer as POST /api/v1/tokens."""
    member(request.user)
    errors: dict = {}
    created = secret = None
    values = request.POST if request.method == "POST" else {}
    if request.method == "POST":
        serializer = TokenCreateSerializer(data=form_payload(request.POST, TOKEN_FIELDS, integers=("ttl_days",)))
        if serializer.is_valid():
            token, secret = ApiToken.issue(user=request.user, **serializer.validated_data)
            # Post/redirect/get: reloading the page must not create a second token. The secret waits in the
            # session for the one page that shows it, and leaves it there.
            request.session[NEW_TOKEN_KEY] = {"id": token.pk, "secret": secret}
            return redirect("tokens")
        errors = {k: [str(e) for e in v] for k, v in serializer.errors.items()}
    else:
        new = request.session.pop(NEW_TOKEN_KEY, None)
        if new:
            created = ApiToken.objects.restrict(request.user, VIEW).filter(pk=new["id"]).first()
            secret = new["secret"] if created else None
    return render(request, "portal/tokens.html", {
        "tokens": ApiToken.objects.restrict(request.user, VIEW).order_by("-created_at", "-id"),
        "created": created, "secret": secret, "errors": errors, "values": values,
        "default_ttl": settings.API_TOKEN_TTL_DAYS,
    }, status=400 if errors else 200)


@login_required
@require_POST
def token_revoke(request, pk: int):
    token = ApiToken.objects.get_or_404(request.user, CHANGE, pk=pk)
    token.revoke()
    messages.success(request, f"Token {token.name!r} is revoked; requests that use it now fail.")
    return redirect("tokens")
