"""A session's or service's route, seen from the portal (docs/sessions.md): Connect on the job's page, the
route's code exchange, and the forward-auth endpoint the ingress controller (or the demo's session proxy) asks
before every request.

Every refusal to connect is a 404, to anyone but those who may reach it: a session's route is not even
acknowledged. The route's own paths answer on the route's host alone (``portal.middleware.SessionHosts``)."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST

from portal.errors import NotFound, PortalError
from portal.session_hosts import cookie_values
from scheduling.services import sessions

NOT_FOUND = "No such session."


@login_required
@require_POST
def connect(request, pk: int):
    """Connect: a one-time code, and off to the route's host, which trades it for its cookie."""
    job = sessions.reachable(request.user, pk)
    if job is None:
        raise NotFound(NOT_FOUND)
    try:
        return HttpResponseRedirect(sessions.connect_start(user=request.user, job=job))
    except PortalError as exc:  # not running (yet, or any more): said on the job's page
        messages.error(request, exc.message)
        return redirect("dashboard:job", pk=pk)


@never_cache
@require_GET
def exchange(request, pk: int):
    """``/s/<id>/_portal/connect?code=...`` on the route's host: spend the code, set the route's cookie
    (HttpOnly, host-only, ``__Host-`` behind TLS), and go to the app. The code leaves the address bar with the
    redirect."""
    token = sessions.connect_exchange(job_id=pk, code=request.GET.get("code", ""))
    if token is None:
        return HttpResponse("This connect link was used or has expired: press Connect on the job's page again.\n",
                            status=404, content_type="text/plain")
    response = HttpResponseRedirect(sessions.route_path(pk))
    response.set_cookie(sessions.cookie_name(), token, max_age=int(sessions.TOKEN_TTL.total_seconds()),
                        path="/", httponly=True, secure=settings.SESSION_COOKIE_SECURE, samesite="Lax")
    return response


@never_cache
@csrf_exempt  # asked by the ingress controller or the proxy, never by a form; it changes nothing but last-seen
def forward_auth(request, pk: int):
    """200 (with ``X-Portal-User``; and ``X-Portal-Upstream`` where the simulated pod answers) or a refusal:
    404 without a credential or for a session this caller may not reach. The credentials are the route's
    cookie and a service key (``Authorization: Bearer gps_...``), as the ingress controller or the proxy pass
    them on with the request's ``Origin``. ``?mode=nginx``: nginx's ``auth_request`` accepts only 401 and 403
    as refusals, so a 404 is answered 401 there (nginx then sends the browser to the job's page, which is
    itself a 404 to anyone else)."""
    scheme, _, key = request.headers.get("Authorization", "").partition(" ")
    decision = sessions.authorize(
        job_id=pk, tokens=cookie_values(request.headers.get("Cookie", ""), sessions.cookie_name()),
        key=key.strip() if scheme.lower() == "bearer" else None, origin=request.headers.get("Origin"))
    status = decision.status
    if request.GET.get("mode") == "nginx":
        status = 401 if status in (401, 404) else status
    elif status == 401:  # no credential or another's: one answer, which says nothing of the job
        status = 404
    response = HttpResponse(status=status)
    if status == 200:
        response["X-Portal-User"] = decision.user.get_username()
        upstream = sessions.upstream_of(decision.job)
        if upstream:
            response["X-Portal-Upstream"] = upstream
    return response
