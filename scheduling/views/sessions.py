"""A session's or service's route, seen from the portal (docs/sessions.md): Connect on the job's page, the
route's code exchange, and the forward-auth endpoint the ingress controller (or the demo's session proxy) asks
before every request.

Every refusal to connect is a 404, to anyone but the owner: a session's route is not even acknowledged."""

from __future__ import annotations

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import HttpResponse, HttpResponseRedirect
from django.shortcuts import redirect
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_GET, require_POST
from rest_framework.exceptions import AuthenticationFailed

from portal.auth import BearerTokenAuthentication
from portal.errors import NotFound, PortalError
from scheduling.models import CONNECT, Job
from scheduling.services import sessions

NOT_FOUND = "No such session."


@login_required
@require_POST
def connect(request, pk: int):
    """The owner's Connect: a one-time code, and off to the route, which trades it for its cookie."""
    job = Job.objects.restrict(request.user, CONNECT).filter(pk=pk).first()
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
    """``/s/<id>/_portal/connect?code=...``: spend the code, set the route's cookie (HttpOnly, only sent under
    ``/s/<id>/``), and go to the app. The code leaves the address bar with the redirect."""
    token = sessions.connect_exchange(job_id=pk, code=request.GET.get("code", ""))
    if token is None:
        return HttpResponse("This connect link was used or has expired: press Connect on the job's page again.\n",
                            status=404, content_type="text/plain")
    response = HttpResponseRedirect(sessions.route_path(pk))
    response.set_cookie(sessions.cookie_name(pk), token, max_age=int(sessions.TOKEN_TTL.total_seconds()),
                        path=sessions.route_path(pk), httponly=True, secure=settings.SESSION_COOKIE_SECURE,
                        samesite="Lax")
    return response


@never_cache
@csrf_exempt  # asked by the ingress controller or the proxy, never by a form; it changes nothing but last-seen
def forward_auth(request, pk: int):
    """200 (with ``X-Portal-User``; and ``X-Portal-Upstream`` where the simulated pod answers) or a refusal:
    401 without a credential, 404 for a session this caller may not reach. ``?mode=nginx``: nginx's
    ``auth_request`` accepts only 401 and 403 as refusals, so a 404 is answered 401 there (nginx then sends
    the browser to the job's page, which is itself a 404 to anyone else)."""
    user = request.user if request.user.is_authenticated else None
    if user is None:
        try:
            found = BearerTokenAuthentication().authenticate(request)
        except AuthenticationFailed:
            found = None
        user = found[0] if found else None
    decision = sessions.authorize(job_id=pk, token=request.COOKIES.get(sessions.cookie_name(pk)), user=user)
    status = decision.status
    if status == 404 and request.GET.get("mode") == "nginx":
        status = 401
    response = HttpResponse(status=status)
    if status == 200:
        response["X-Portal-User"] = decision.user.get_username()
        upstream = sessions.upstream_of(decision.job)
        if upstream:
            response["X-Portal-Upstream"] = upstream
    return response
