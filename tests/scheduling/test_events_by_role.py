"""Events by role (docs/workloads.md, "Shapes"): each event of a job of several roles about one of its pods says
that pod's role, and the timeline filters by role on the job's page and through the API."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.test import Client
from rest_framework.test import APIClient

from lab import demo
from lab.services.labfile import apply_lab
from scheduling.backends import get_backend
from scheduling.models import Job, JobState
from tests.scheduling.two_roles import TRAIN, step

pytestmark = pytest.mark.django_db

@pytest.fixture
def bob():
    apply_lab(demo.LAB_FILE.read_text())
    demo.add_cpu_pool()
    return get_user_model().objects.get(username="bob")


@pytest.fixture
def api(bob):
    c = APIClient()
    c.force_authenticate(bob)
    return c


@pytest.fixture
def running(api, go, sim_clock):
    r = api.post("/api/v1/jobs", TRAIN, format="json")
    assert r.status_code == 201, r.json()
    step(go, sim_clock)
    job = Job.objects.get(pk=r.json()["id"])
    assert job.state == JobState.RUNNING, job.reason_message
    return job


def _fail(job, index):
    assert get_backend("default").fail_pod(job_id=job.pk, attempt=job.attempt, index=index, exit_code=137,
                                           reason="Error") == 1


def test_a_data_workers_and_a_trainers_failures_each_say_their_role(running, api, go, sim_clock):
    job = running
    _fail(job, 1)  # data worker 0: replaced alone
    step(go, sim_clock, 1)
    _fail(job, 0)  # the trainer: ends the attempt
    step(go, sim_clock, 1)
    job.refresh_from_db()
    assert job.state == JobState.FAILED
    events = api.get(f"/api/v1/jobs/{job.pk}/events").json()
    by_code = {e["reason_code"]: e["role"] for e in events}
    assert by_code["pod_restarted"] == "data"
    assert by_code["Error"] == "trainer"  # the failed transition names the failing pod's role
    assert events[0]["role"] == ""  # the submission: about the whole job
    assert [e["reason_code"] for e in api.get(f"/api/v1/jobs/{job.pk}/events?role=data").json()] == ["pod_restarted"]
    assert [e["reason_code"] for e in api.get(f"/api/v1/jobs/{job.pk}/events?role=trainer").json()] == ["Error"]
    detail = api.get(f"/api/v1/jobs/{job.pk}").json()["events"]  # the job's own view says the same
    assert [e["role"] for e in detail if e["reason_code"] in ("pod_restarted", "Error")] == ["data", "trainer"]


def test_the_job_page_shows_each_events_role_and_filters_by_it(running, bob, go, sim_clock):
    job = running
    _fail(job, 2)
    step(go, sim_clock, 1)
    c = Client()
    c.force_login(bob)
    html = c.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-role-filter="data"' in html and 'data-role-filter="trainer"' in html
    assert '<li data-role="data">' in html and "whole job" in html
    only = c.get(f"/jobs/{job.pk}/?role=data").content.decode()
    timeline = only[only.index('id="timeline"'):]
    assert timeline.count("<li") == 1 and '<li data-role="data">' in timeline
    # the page's live check compares the whole timeline's length, filtered or not (else it would reload for ever)
    assert f'data-events="{job.events.count()}"' in only


@pytest.mark.parametrize("role", ["loader", "main"])
def test_a_role_the_job_has_not_is_a_400_on_role(running, api, bob, role):
    r = api.get(f"/api/v1/jobs/{running.pk}/events?role={role}")
    assert r.status_code == 400 and "role" in r.json()["error"]["fields"]
    c = Client()
    c.force_login(bob)
    page = c.get(f"/jobs/{running.pk}/?role={role}")
    assert page.status_code == 400 and 'data-error-for="role"' in page.content.decode()


def test_a_job_of_one_role_has_no_role_to_filter_by(api, go, sim_clock, bob):
    r = api.post("/api/v1/jobs", {k: v for k, v in TRAIN.items() if k != "roles"} | {"gpus": 1}, format="json")
    job_id = r.json()["id"]
    assert [e["role"] for e in api.get(f"/api/v1/jobs/{job_id}/events").json()] == [""]
    assert api.get(f"/api/v1/jobs/{job_id}/events?role=main").status_code == 400


def test_another_departments_job_events_are_a_404(running):
    dave = APIClient()  # nlp; the job is vision's
    dave.force_authenticate(get_user_model().objects.get(username="dave"))
    assert dave.get(f"/api/v1/jobs/{running.pk}/events").status_code == 404
