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
from scheduling.services.clusters import sync_cluster
from scheduling.services.cycle import run_cycle

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
    assert body["url"] == f"http://127.0.0.1:8001/s/{body['id']}/"


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
    path, code = url.split("http://127.0.0.1:8001")[1].split("?code=")
    assert path == f"/s/{job.pk}/_portal/connect"
    route = Client()  # the browser at the route's address: not signed in to the portal there
    answer = route.get(path, {"code": code})
    assert answer.status_code == 302 and answer["Location"] == f"/s/{job.pk}/"
    cookie = answer.cookies[f"portal_s{job.pk}"]
    assert cookie["httponly"] and cookie["path"] == f"/s/{job.pk}/" and cookie["samesite"] == "Lax"
    assert code not in cookie.value and cookie.value not in url
    assert route.get(path, {"code": code}).status_code == 404  # spent
    auth = route.get(f"/sessions/{job.pk}/auth")
    assert auth.status_code == 200 and auth["X-Portal-User"] == "alice"
    grant = SessionGrant.objects.get(job=job)
    assert grant.token_hash and grant.token_hash != cookie.value and grant.last_seen_at is not None
    assert sessions.connected(job)


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
    assert browser(user).get(f"/sessions/{job.pk}/auth").status_code == 404  # the route, with their log-in
    assert browser(user).get(f"/sessions/{job.pk}/auth", {"mode": "nginx"}).status_code == 401
    assert not SessionGrant.objects.exists()


def test_a_cookie_of_one_session_opens_no_other(lab, client_for, go, jupyter):
    mine = running(go, client_for(lab.alice), session_body())
    theirs = running(go, client_for(lab.amy), session_body(name="nb2"))
    url = sessions.connect_start(user=lab.alice, job=mine)
    token = sessions.connect_exchange(job_id=mine.pk, code=url.split("code=")[1])
    c = Client()
    c.cookies[f"portal_s{theirs.pk}"] = token
    assert c.get(f"/sessions/{theirs.pk}/auth").status_code == 404
    assert Client().get(f"/sessions/{theirs.pk}/auth").status_code == 401  # no credential at all


def test_a_code_for_a_session_that_ended_opens_nothing(lab, client_for, go, jupyter):
    job = running(go, client_for(lab.alice), session_body())
    url = sessions.connect_start(user=lab.alice, job=job)
    token = sessions.connect_exchange(job_id=job.pk, code=url.split("code=")[1])
    client_for(lab.alice).post(f"/api/v1/jobs/{job.pk}/cancel", {}, format="json")
    c = Client()
    c.cookies[f"portal_s{job.pk}"] = token
    assert c.get(f"/sessions/{job.pk}/auth").status_code == 404
    assert client_for(lab.alice).post(f"/api/v1/jobs/{job.pk}/connect").status_code == 409


def test_a_service_answers_its_departments_api_tokens(lab, client_for, go):
    job = running(go, client_for(lab.alice), {"name": "llm", "kind": "service", "image": "ghcr.io/lab/serve:1",
                                              "port": 8000, "flavor": "a100-80gb", "gpus": 1})
    _, colleague = ApiToken.issue(user=lab.amy, name="caller")
    _, outsider = ApiToken.issue(user=lab.bob, name="caller")
    assert Client().get(f"/sessions/{job.pk}/auth", HTTP_AUTHORIZATION=f"Bearer {colleague}").status_code == 200
    assert Client().get(f"/sessions/{job.pk}/auth", HTTP_AUTHORIZATION=f"Bearer {outsider}").status_code == 404
    assert Client().get(f"/sessions/{job.pk}/auth", HTTP_AUTHORIZATION="Bearer gpp_x_nope").status_code == 401


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
    origin = settings.SESSION_URL
    assert f"form-action 'self' {origin};" in c.get(f"/jobs/{r.json()['id']}/")["Content-Security-Policy"]
    for url in ("/", "/jobs/", "/jobs/new"):
        assert "form-action 'self';" in c.get(url)["Content-Security-Policy"], url
