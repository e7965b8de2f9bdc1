"""Refuse hostile input at the door with the one JSON error shape, before any view or database sees it."""

from __future__ import annotations

import re
from urllib.parse import urlsplit

from django.conf import settings
from django.core.exceptions import RequestDataTooBig
from django.http import HttpResponseNotFound, JsonResponse

from portal import session_hosts
from portal.errors import error_body

FORM_TYPES = ("application/x-www-form-urlencoded", "multipart/form-data")
NUL = "\x00"


def _too_large() -> JsonResponse:
    return JsonResponse(error_body(
        "request_too_large",
        f"The request body is larger than {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes."), status=400)


def _nul(where: str) -> JsonResponse:
    # PostgreSQL cannot store NUL in text, and no name, slug, key or value of the portal needs one: refusing it
    # here spares every view a psycopg DataError (a 500).
    return JsonResponse(error_body("malformed_request", "NUL characters are not allowed.",
                                   fields={where: [{"code": "null_characters_not_allowed",
                                                    "message": "NUL characters are not allowed."}]}), status=400)


class HostileInputMiddleware:
    """NUL characters in the path, the query string, a header or a form field; a body over
    DATA_UPLOAD_MAX_MEMORY_SIZE. JSON bodies are checked by ``portal.api.JSONParser``."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            length = 0
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if limit is not None and length > limit:
            return _too_large()
        if NUL in request.path_info:
            return _nul("path")
        for key, values in request.GET.lists():
            if NUL in key or any(NUL in v for v in values):
                return _nul(key.replace(NUL, "") or "query")
        for key, value in request.META.items():
            if key.startswith("HTTP_") and isinstance(value, str) and NUL in value:
                return _nul(key[5:].replace("_", "-").title())
        if request.method == "POST" and request.content_type in FORM_TYPES:
            try:
                fields = request.POST.lists()
            except RequestDataTooBig:
                return _too_large()
            for key, values in fields:
                if NUL in key or any(NUL in v for v in values):
                    return _nul(key.replace(NUL, "") or "form")
        return self.get_response(request)


ROUTE_PORTAL_PATH = re.compile(r"^/s/(?P<id>[0-9]{1,18})/_portal/")


class SessionHosts:
    """A request on a session's host (``s<id>.<SESSION_DOMAIN>``) reaches the portal for that route's own
    ``/s/<id>/_portal/`` paths alone (the connect code's exchange, which sets the route's cookie on that host):
    no page, form or API of the portal answers on a session's origin, where an app's scripts run."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        host = request.META.get("HTTP_HOST", "")
        domain = settings.SESSION_DOMAIN
        if session_hosts.on_session_domain(host, domain):
            match = ROUTE_PORTAL_PATH.match(request.path_info)
            if match is None or session_hosts.job_of_host(host, domain) != int(match["id"]):
                return HttpResponseNotFound("No such session.\n", content_type="text/plain")
        elif ROUTE_PORTAL_PATH.match(request.path_info):
            # the route's cookie belongs on the route's host: set on the portal's, it would serve nothing
            return HttpResponseNotFound("No such session.\n", content_type="text/plain")
        return self.get_response(request)


# No page of the portal loads anything from another origin (no CDN: labs are often air-gapped) or runs inline
# code, so the policy can be strict: an injected <script> or inline handler does not run, and a page cannot
# be framed. The API docs are the one exception: Redoc starts from an inline script and both UIs set inline
# styles, so those two pages allow inline code, still from this origin only.
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; font-src 'self'; "
       "connect-src 'self'; object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'")
CSP_API_DOCS = ("default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; "
                "img-src 'self' data:; font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; "
                "object-src 'none'; base-uri 'self'; form-action 'self'; frame-ancestors 'none'")
API_DOCS = ("/api/docs/", "/api/redoc/")
JOB_PAGE = re.compile(r"^/jobs/\d+/$")


class ContentSecurityPolicyMiddleware:
    """One constant header (django-csp's nonces and per-view decorators have nothing to do here)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        response = self.get_response(request)
        policy = CSP_API_DOCS if request.path.startswith(API_DOCS) else CSP
        # Form answers that redirect elsewhere, which form-action governs: Log out to single sign-on's
        # end-session, and, on a job's page alone (where its Connect form is), a session's Connect to its route
        # (a host under SESSION_DOMAIN, docs/sessions.md): every other page keeps its forms on this origin.
        sessions = _sessions_origin() if JOB_PAGE.match(request.path) else ""
        origins = " ".join(o for o in (_logout_origin(), sessions) if o)
        if origins:
            policy = policy.replace("form-action 'self'", f"form-action 'self' {origins}")
        response.setdefault("Content-Security-Policy", policy)
        return response


def _sessions_origin() -> str:
    scheme = "https" if settings.SESSION_COOKIE_SECURE else "http"
    port = f":{settings.SESSION_PORT}" if settings.SESSION_PORT else ""
    return f"{scheme}://*.{settings.SESSION_DOMAIN}{port}"


def _logout_origin() -> str:
    """The identity provider's origin when logging out goes on to its end-session endpoint, else ''."""
    if not (settings.SSO_ENABLED and settings.OIDC_OP_LOGOUT_ENDPOINT):
        return ""
    url = urlsplit(settings.OIDC_OP_LOGOUT_ENDPOINT)
    return f"{url.scheme}://{url.netloc}" if url.scheme in ("http", "https") and url.netloc else ""


PROBES = {"/healthz": "healthz", "/readyz": "readyz"}


class ProbeMiddleware:
    """Answer the health probes before anything validates the Host header: a kubelet or load balancer
    probes by address (Host: 10.1.2.3:8000), which ALLOWED_HOSTS rightly does not list."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        name = PROBES.get(request.path_info)
        if name is not None and request.method in ("GET", "HEAD"):
            # not at module level: LOGGING names this module's filter, so it is imported before the app
            # registry is ready, and the views import models
            from portal import views

            return getattr(views, name)(request)
        return self.get_response(request)


class ClientErrorsWithoutTraceback:
    """Logging filter: a 4xx answer logged by Django (``django.request``, ``django.security``) keeps its one
    line but drops the traceback; the user's page says why the request was refused, and a 403 or 404 is not
    a fault of the portal. 5xx records keep theirs."""

    def filter(self, record) -> bool:
        status = getattr(record, "status_code", None)
        if record.name.startswith("django.") and isinstance(status, int) and 400 <= status < 500:
            record.exc_info = None
            record.exc_text = None
        return True
