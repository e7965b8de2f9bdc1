"""Sessions and services on the portal's side (docs/sessions.md): submission's rules (a test per bad input),
Connect and its one-time code, the forward-auth endpoint's answers for every kind of caller, the lifetime
warning and the idle-session stop."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from notifications.models import Event
from portal.models import ApiToken
from scheduling.models import Job, JobEvent, JobState, SessionGrant, SessionImage
from scheduling.services import sessions
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def jupyter(lab):
    return SessionImage.objects.create(name="jupyterlab", label="JupyterLab", image="quay.io/jupyter/base-notebook:2026",
                                       port=8888, readiness_path="/api/status", command=["start-notebook.py"])


def session_body(**kw):
    body = {"name": "nb", "kind": "session", "session_image": "jupyterlab", "flavor": "a100-80gb", "gpus": 1}
    body.update(kw)
    return body


def running(go, client, body) -> Job:
    r = client.post("/api/v1/jobs", body, format="json")
    assert r.status_code == 201, r.content
    go(run_cycle)
    go(sync_cluster)
    job = Job.objects.get(pk=r.json()["id"])
    assert job.state == JobState.RUNNING
    return job


def browser(user) -> Client:
    c = Client()
    c.force_login(user)
    return c


def on_route(job_id: int, **extra) -> Client:
    """A browser at the route's own host (the test client sends it in the Host header: no DNS needed)."""
    return Client(HTTP_HOST=f"s{job_id}.sessions.localhost:8001", **extra)


def service_body(**kw):
    return {"name": "llm", "kind": "service", "image": "ghcr.io/lab/serve:1", "port": 8000, "flavor": "a100-80gb",
            "gpus": 1, **kw}


def fields(r) -> dict:
    assert r.status_code == 400, r.content
    return {k: [e["code"] for e in v] for k, v in r.json()["error"]["fields"].items()}


# --------------------------------------------------------------------------- submission


def test_a_session_from_a_lab_image_takes_its_image_port_and_realtime(lab, client_for, jupyter):
    r = client_for(lab.alice).post("/api/v1/jobs", session_body(), format="json")
    assert r.status_code == 201, r.content
    body = r.json()
    assert (body["kind"], body["image"], body["port"], body["readiness_path"], body["tier"], body["command"]) == (
        "session", jupyter.image, 8888, "/api/status", "realtime", ["start-notebook.py"])
    assert body["url"] == f"http://s{body['id']}.sessions.localhost:8001/s/{body['id']}/"  # a host of its own


def test_a_service_runs_until_stopped_in_realtime_by_default(lab, client_for):
    r = client_for(lab.alice).post("/api/v1/jobs", {"name": "llm", "kind": "service", "image": "ghcr.io/lab/serve:1",
                                                    "port": 8000, "flavor": "a100-80gb", "gpus": 1}, format="json")
    assert r.status_code == 201, r.content
    assert (r.json()["tier"], r.json()["readiness_path"], r.json()["max_runtime_s"]) == ("realtime", "/", 86400)


@pytest.mark.parametrize(("body", "field", "code"), [
    (session_body(session_image="rstudio"), "session_image", "unknown_image"),
    (session_body(session_image="", image="ghcr.io/me/nb:1", port=0), "port", "min_value"),
    (session_body(session_image="", image="ghcr.io/me/nb:1", port=70000), "port", "max_value"),
    (session_body(session_image="", image="ghcr.io/me/nb:1"), "port", "required"),
    (session_body(max_runtime_s=13 * 3600), "max_runtime_s", "max_value"),
    (session_body(tier="elastic"), "tier", "invalid"),
    (session_body(port=9999), "port", "kind_mismatch"),
    (session_body(pods=2), "pods", "invalid"),
    (session_body(readiness_path="healthz"), "readiness_path", "invalid_path"),
    ({"name": "b", "image": "x/y:1", "command": ["a"], "flavor": "a100-80gb", "gpus": 1, "port": 80}, "port",
     "kind_mismatch"),
    ({"name": "s", "kind": "service", "session_image": "jupyterlab", "port": 80, "image": "x/y:1",
      "flavor": "a100-80gb", "gpus": 1}, "session_image", "kind_mismatch"),
    ({"name": "b", "image": "x/y:1", "flavor": "a100-80gb", "gpus": 1}, "command", "required"),
])
def test_bad_session_and_service_input_is_a_400(lab, client_for, jupyter, body, field, code):
    assert code in fields(client_for(lab.alice).post("/api/v1/jobs", body, format="json")).get(field, [])
    assert not Job.objects.exists()


def test_the_lab_maximum_lifetime_is_a_setting(lab, client_for, jupyter, settings):
    settings.SESSION_MAX_LIFETIME_S = 1800
    assert fields(client_for(lab.alice).post("/api/v1/jobs", session_body(max_runtime_s=3600), format="json")) == {
        "max_runtime_s": ["max_value"]}


def test_session_images_are_the_platform_admins(lab, client_for, jupyter):
    image = {"image": "ghcr.io/coder/code-server:4", "port": 8080, "readiness_path": "/healthz"}
    assert client_for(lab.alice).put("/api/v1/session-images/vscode", image, format="json").status_code == 403
    assert client_for(lab.root).put("/api/v1/session-images/vscode", image, format="json").status_code == 200
    assert fields(client_for(lab.root).put("/api/v1/session-images/vscode", {**image, "port": 0}, format="json")) == {
        "port": ["min_value"]}
    assert [i["name"] for i in client_for(lab.bob).get("/api/v1/session-images").json()] == ["jupyterlab", "vscode"]
    assert client_for(lab.root).delete("/api/v1/session-images/vscode").status_code == 204
    assert client_for(lab.root).delete("/api/v1/session-images/vscode").status_code == 404


# --------------------------------------------------------------------------- connecting


def test_the_owner_connects_with_a_one_time_code_and_a_cookie(lab, client_for, go, jupyter):
    job = running(go, client_for(lab.alice), session_body())
    assert job.ready  # the simulated pod runs: its readiness probe passes
    r = client_for(lab.alice).post(f"/api/v1/jobs/{job.pk}/connect")
    assert r.status_code == 200
    url = r.json()["url"]
    path, code = url.split(f"http://s{job.pk}.sessions.localhost:8001")[1].split("?code=")
    assert path == f"/s/{job.pk}/_portal/connect"
    route = on_route(job.pk)  # the browser at the route's host: the portal's cookies never go there
    answer = route.get(path, {"code": code})
    assert answer.status_code == 302 and answer["Location"] == f"/s/{job.pk}/"
    cookie = answer.cookies["portal_route"]
    assert cookie["httponly"] and cookie["path"] == "/" and cookie["samesite"] == "Lax" and not cookie["domain"]
    assert code not in cookie.value and cookie.value not in url
    assert route.get(path, {"code": code}).status_code == 404  # spent
    # the ingress or the proxy asks forward auth (on the portal's host) with the request's cookies
    asked = Client(HTTP_COOKIE=f"portal_route={cookie.value}").get(f"/sessions/{job.pk}/auth")
    assert asked.status_code == 200 and asked["X-Portal-User"] == "alice"
    grant = SessionGrant.objects.get(job=job)
    assert grant.token_hash and grant.token_hash != cookie.value and grant.last_seen_at is not None
    assert sessions.connected(job)


def test_behind_tls_the_routes_cookie_is_a_host_cookie_and_the_route_https(lab, client_for, go, jupyter, settings):
    settings.SESSION_COOKIE_SECURE, settings.SESSION_PORT = True, ""
    job = running(go, client_for(lab.alice), session_body())
    url = client_for(lab.alice).post(f"/api/v1/jobs/{job.pk}/connect").json()["url"]
    assert url.startswith(f"https://s{job.pk}.sessions.localhost/s/{job.pk}/_portal/connect?code=")
    answer = Client(HTTP_HOST=f"s{job.pk}.sessions.localhost").get(url.split("localhost")[1])
    cookie = answer.cookies["__Host-portal_route"]  # host-only, Secure, Path=/: no sibling host can plant one
    assert cookie["secure"] and cookie["path"] == "/" and not cookie["domain"]


def test_the_portals_cookies_are_host_cookies_and_prefixed_behind_tls():
    import subprocess
    import sys

    code = ("import django, os; os.environ['DJANGO_SETTINGS_MODULE']='portal.settings'; django.setup(); "
            "from django.conf import settings as s; print(s.SESSION_COOKIE_NAME, s.CSRF_COOKIE_NAME, "
            "s.SESSION_COOKIE_DOMAIN, s.CSRF_COOKIE_DOMAIN, s.SESSION_COOKIE_SECURE)")
    import os
    env = {k: v for k, v in os.environ.items() if k != "DJANGO_SETTINGS_MODULE"}
    plain = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    tls = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={**env, "SECURE_SSL": "true"})
    assert plain.stdout.split() == ["sessionid", "csrftoken", "None", "None", "False"]
    assert tls.stdout.split() == ["__Host-sessionid", "__Host-csrftoken", "None", "None", "True"]


@pytest.mark.parametrize(("host", "path"), [
    ("s{id}.sessions.localhost:8001", "/api/v1/me"),  # a session's page must not reach the portal's API ...
    ("s{id}.sessions.localhost:8001", "/login/"),  # ... nor its pages
    ("s{id}.sessions.localhost:8001", "/sessions/{id}/auth"),
    ("s999.sessions.localhost:8001", "/s/{id}/_portal/connect"),  # another route's host
    ("sessions.localhost:8001", "/s/{id}/_portal/connect"),
    ("testserver", "/s/{id}/_portal/connect"),  # the portal's own host: the cookie would land there
])
def test_a_routes_host_reaches_its_own_portal_paths_alone(lab, client_for, go, jupyter, host, path):
    job = running(go, client_for(lab.alice), session_body())
    url = sessions.connect_start(user=lab.alice, job=job)
    c = Client(HTTP_HOST=host.format(id=job.pk))
    c.force_login(lab.alice)
    r = c.get(path.format(id=job.pk), {"code": url.split("code=")[1]})
    assert r.status_code == 404, (host, path, r.status_code)
    assert SessionGrant.objects.get(job=job).exchanged_at is None


def test_a_connect_code_expires(lab, client_for, go, jupyter):
    job = running(go, client_for(lab.alice), session_body())
    url = sessions.connect_start(user=lab.alice, job=job, now=timezone.now() - timedelta(minutes=2))
    assert sessions.connect_exchange(job_id=job.pk, code=url.split("code=")[1]) is None


@pytest.mark.parametrize("who", ["amy", "vadmin", "bob", "root"])
def test_connecting_to_someone_elses_session_is_a_404(lab, client_for, go, jupyter, who):
    job = running(go, client_for(lab.alice), session_body())
    user = getattr(lab, who)
    assert client_for(user).post(f"/api/v1/jobs/{job.pk}/connect").status_code == 404
    assert browser(user).post(f"/jobs/{job.pk}/connect").status_code == 404
    assert not SessionGrant.objects.exists()


def test_the_portal_log_in_is_no_credential_at_a_route(lab, client_for, go, jupyter):
    job = running(go, client_for(lab.alice), session_body())
    # it never reaches a route's host; were it sent, it still opens nothing
    assert browser(lab.alice).get(f"/sessions/{job.pk}/auth").status_code == 404
    _, token = ApiToken.issue(user=lab.alice, name="cli")
    assert Client().get(f"/sessions/{job.pk}/auth", HTTP_AUTHORIZATION=f"Bearer {token}").status_code == 404


def test_a_cookie_of_one_session_opens_no_other(lab, client_for, go, jupyter):
    mine = running(go, client_for(lab.alice), session_body())
    theirs = running(go, client_for(lab.amy), session_body(name="nb2"))
    url = sessions.connect_start(user=lab.alice, job=mine)
    token = sessions.connect_exchange(job_id=mine.pk, code=url.split("code=")[1])
    c = Client()
    c.cookies["portal_route"] = token
    assert c.get(f"/sessions/{theirs.pk}/auth").status_code == 404
    assert Client().get(f"/sessions/{theirs.pk}/auth").status_code == 404  # no credential at all
    assert Client().get(f"/sessions/{theirs.pk}/auth", {"mode": "nginx"}).status_code == 401


def test_a_code_for_a_session_that_ended_opens_nothing(lab, client_for, go, jupyter):
    job = running(go, client_for(lab.alice), session_body())
    url = sessions.connect_start(user=lab.alice, job=job)
    token = sessions.connect_exchange(job_id=job.pk, code=url.split("code=")[1])
    client_for(lab.alice).post(f"/api/v1/jobs/{job.pk}/cancel", {}, format="json")
    c = Client()
    c.cookies["portal_route"] = token
    assert c.get(f"/sessions/{job.pk}/auth").status_code == 404
    assert client_for(lab.alice).post(f"/api/v1/jobs/{job.pk}/connect").status_code == 409


def key_for(client, job) -> str:
    r = client.post(f"/api/v1/jobs/{job.pk}/service-key")
    assert r.status_code == 201, r.content
    assert r.json()["key"].startswith("gps_") and r.json()["route"] == sessions.route_url(job.pk)
    return r.json()["key"]


def auth(job, key=None, **headers):
    if key:
        headers["HTTP_AUTHORIZATION"] = f"Bearer {key}"
    return Client().get(f"/sessions/{job.pk}/auth", **headers).status_code


def test_a_services_callers_use_a_key_good_for_that_service_alone(lab, client_for, go):
    job = running(go, client_for(lab.alice), service_body())
    other = running(go, client_for(lab.alice), service_body(name="llm2"))
    key = key_for(client_for(lab.amy), job)  # any member of its department
    assert auth(job, key) == 200
    assert auth(other, key) == 404  # another service of the same department: not with this key
    _, portal_token = ApiToken.issue(user=lab.amy, name="caller")
    assert auth(job, portal_token) == 404  # the portal's API tokens are not sent to an app's route
    assert auth(job, "gps_nope") == 404 and auth(job) == 404
    assert SessionGrant.objects.filter(job=job, user=lab.amy).count() == 1


@pytest.mark.parametrize("who", ["bob", "root", "stranger"])
def test_outside_its_department_nobody_reaches_a_service_platform_admins_included(lab, client_for, go, who):
    job = running(go, client_for(lab.alice), service_body())
    user = getattr(lab, who)
    assert client_for(user).post(f"/api/v1/jobs/{job.pk}/service-key").status_code == 404
    assert client_for(user).post(f"/api/v1/jobs/{job.pk}/connect").status_code == 404
    assert browser(user).post(f"/jobs/{job.pk}/connect").status_code == 404
    assert not SessionGrant.objects.exists()


def test_a_key_of_a_member_who_left_or_of_a_stopped_service_opens_nothing(lab, client_for, go):
    from portal.models import Membership

    job = running(go, client_for(lab.alice), service_body())
    key = key_for(client_for(lab.amy), job)
    Membership.objects.filter(user=lab.amy).delete()
    assert auth(job, key) == 404
    key = key_for(client_for(lab.alice), job)
    client_for(lab.alice).post(f"/api/v1/jobs/{job.pk}/cancel", {}, format="json")
    assert auth(job, key) == 404


def test_service_keys_are_for_running_services(lab, client_for, go, jupyter):
    nb = running(go, client_for(lab.alice), session_body())
    assert client_for(lab.alice).post(f"/api/v1/jobs/{nb.pk}/service-key").status_code == 409


def test_a_stale_route_cookie_beside_a_valid_key_refuses_nothing(lab, client_for, go):
    job = running(go, client_for(lab.alice), service_body())
    key = key_for(client_for(lab.alice), job)
    assert auth(job, key, HTTP_COOKIE="portal_route=stale-from-yesterday") == 200


def test_a_cookie_planted_beside_the_owners_own_refuses_nothing(lab, client_for, go, jupyter):
    job = running(go, client_for(lab.alice), session_body())
    url = sessions.connect_start(user=lab.alice, job=job)
    token = sessions.connect_exchange(job_id=job.pk, code=url.split("code=")[1])
    # a sibling host's page can set portal_route for the whole domain (without TLS): both are sent, both tried
    assert auth(job, HTTP_COOKIE=f"portal_route=planted; portal_route={token}") == 200
    assert auth(job, HTTP_COOKIE=f"portal_route={token}; portal_route=planted") == 200


def test_a_request_from_another_origin_gets_nothing_from_the_routes_cookie(lab, client_for, go, jupyter):
    job = running(go, client_for(lab.alice), session_body())
    url = sessions.connect_start(user=lab.alice, job=job)
    token = sessions.connect_exchange(job_id=job.pk, code=url.split("code=")[1])
    cookie = f"portal_route={token}"
    own = f"http://s{job.pk}.sessions.localhost:8001"
    assert auth(job, HTTP_COOKIE=cookie, HTTP_ORIGIN=own) == 200  # its own page's WebSocket, its own forms
    for origin in (f"http://s{job.pk + 1}.sessions.localhost:8001", "http://evil.example", "null",
                   "http://127.0.0.1:8000", f"https://s{job.pk}.sessions.localhost:8001"):
        assert auth(job, HTTP_COOKIE=cookie, HTTP_ORIGIN=origin) == 404, origin


def test_the_job_page_shows_the_route_and_connect_only_to_the_owner(lab, client_for, go, jupyter):
    job = running(go, client_for(lab.alice), session_body())
    page = browser(lab.alice).get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="connect"' in page and f"/s/{job.pk}/" in page and "yes: <code>/api/status</code>" in page
    other = browser(lab.amy).get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="connect"' not in other and "Only its owner connects" in other
    cluster = browser(lab.root).get("/cluster/").content.decode()
    assert f'data-session="{job.pk}"' in cluster
    assert 'id="sessions"' not in browser(lab.alice).get("/cluster/").content.decode()


# --------------------------------------------------------------------------- lifetime and idleness


def test_the_owner_is_warned_before_the_lifetime_ends(lab, client_for, go, jupyter, settings):
    settings.SESSION_END_WARNING_MINUTES = 15
    job = running(go, client_for(lab.alice), session_body(max_runtime_s=3600))
    start = job.started_at
    assert sessions.warn_ending(now=start + timedelta(minutes=40)) == 0
    assert sessions.warn_ending(now=start + timedelta(minutes=46)) == 1
    assert sessions.warn_ending(now=start + timedelta(minutes=50)) == 0  # once
    assert JobEvent.objects.filter(job=job, reason_code="session_ending").count() == 1
    assert Event.objects.filter(kind="session.ending").count() == 1
    job.refresh_from_db()
    assert sessions.ending_soon(job, now=start + timedelta(minutes=46))
    assert not sessions.ending_soon(job, now=start + timedelta(minutes=10))


def test_an_idle_session_without_a_client_is_stopped_and_its_owner_told(lab, client_for, go, jupyter, settings):
    settings.SESSION_IDLE_MINUTES = 30
    job = running(go, client_for(lab.alice), session_body())
    now = job.started_at + timedelta(minutes=45)
    url = sessions.connect_start(user=lab.alice, job=job, now=now - timedelta(minutes=5))
    sessions.connect_exchange(job_id=job.pk, code=url.split("code=")[1], now=now - timedelta(minutes=5))
    assert not sessions.stop_if_idle(job=job, gpu_idle_minutes=45, now=now)  # a client came 5 minutes ago
    assert not sessions.stop_if_idle(job=job, gpu_idle_minutes=10, now=now + timedelta(hours=1))  # GPUs busy
    assert go(sessions.stop_if_idle, job=job, gpu_idle_minutes=90, now=now + timedelta(hours=1))
    job.refresh_from_db()
    assert job.state == JobState.CANCELLED and "idle-session policy" in job.events.last().message
    assert Event.objects.filter(kind="session.stopped_idle").count() == 1


def test_only_a_jobs_page_lets_its_connect_form_go_on_to_the_sessions_address(lab, client_for, jupyter, settings):
    r = client_for(lab.alice).post("/api/v1/jobs", session_body(), format="json")
    assert r.status_code == 201, r.content
    c = browser(lab.alice)
    origin = "http://*.sessions.localhost:8001"
    assert f"form-action 'self' {origin};" in c.get(f"/jobs/{r.json()['id']}/")["Content-Security-Policy"]
    for url in ("/", "/jobs/", "/jobs/new"):
        assert "form-action 'self';" in c.get(url)["Content-Security-Policy"], url
