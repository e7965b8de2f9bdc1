"""Walk the whole URLconf: every endpoint refuses anonymous users, except an explicit allowlist."""

from __future__ import annotations

import re

import pytest
from django.urls import URLPattern, URLResolver, get_resolver

from portal.urls import PUBLIC_URL_NAMES


def _walk(patterns, prefix=""):
    for p in patterns:
        if isinstance(p, URLResolver):
            yield from _walk(p.url_patterns, prefix + str(p.pattern))
        elif isinstance(p, URLPattern):
            yield prefix + str(p.pattern), p.name


def _concrete(route: str) -> str:
    """Turn a route (path or regex) into a URL that matches it, with 1 for every parameter."""
    route = route.replace("^", "").replace("$", "").replace("\\Z", "").replace("\\.", ".")
    route = re.sub(r"<(?:\w+:)?(\w+)>", "1", route)
    route = re.sub(r"\(\?P<format>[^)]*\)", "", route)  # drop optional .json suffixes
    route = re.sub(r"\(\?P<\w+>[^)]*\)", "1", route)
    route = route.replace("/?", "/").replace("?", "")
    return "/" + route.lstrip("/")


ALL_ROUTES = sorted(set(_walk(get_resolver().url_patterns)), key=lambda r: (r[0], r[1] or ""))
# Django's admin has its own login (tested below); static files are public by nature.
ROUTES = [(r, n) for r, n in ALL_ROUTES
          if n not in PUBLIC_URL_NAMES and not r.startswith("admin/") and "static" not in r]


def test_the_walk_finds_the_api():
    names = {n for _, n in ROUTES}
    assert len(ROUTES) > 20
    assert {"job-list", "job-detail", "job-cancel", "me", "policy", "quota-list", "flavor-list"} <= names


@pytest.mark.parametrize(("route", "name"), ROUTES)
@pytest.mark.django_db
def test_anonymous_is_refused_everywhere_but_the_allowlist(client, route, name):
    url = _concrete(route)
    for method in ("get", "post"):
        response = getattr(client, method)(url)
        assert response.status_code in (401, 403, 404, 405) or (
            response.status_code == 302 and "/login/" in response["Location"]
        ), f"{method.upper()} {url} ({name}) answered {response.status_code} to an anonymous user"
        assert response.status_code != 200


@pytest.mark.django_db
def test_admin_requires_login(client):
    response = client.get("/admin/")
    assert response.status_code == 302 and "login" in response["Location"]


@pytest.mark.django_db
def test_public_endpoints_answer_anonymously(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    assert client.get("/login/").status_code == 200
    schema = client.get("/api/schema/")
    assert schema.status_code == 200 and b"/api/v1/jobs" in schema.content
    assert client.get("/api/docs/").status_code == 200
    assert client.get("/metrics").status_code == 200
