"""Sweep pages: the submit form makes an array (then a job waiting for it), the array page lists its tasks by
state with its actions, a job page holds and releases; another department's array is a 404."""

from __future__ import annotations

import pytest
from django.test import Client

from engine import reasons
from scheduling.models import Job, JobArray, JobState
from scheduling.services.cycle import run_cycle

pytestmark = pytest.mark.django_db

FORM = {"name": "sweep", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": "python train.py --seed {{index}}",
        "flavor": "a100-80gb", "gpus": "1", "pods": "1", "cpu": "4", "memory": "16Gi", "tier": "elastic",
        "urgency": "normal", "task_type": "train", "max_runtime_s": "3600", "bid": "0"}


def _client(user):
    c = Client()
    c.force_login(user)
    return c


def test_the_form_submits_a_sweep_then_an_evaluation_that_waits_for_it(lab, go):
    c = _client(lab.alice)
    assert 'name="array"' in c.get("/jobs/new").content.decode()
    r = c.post("/jobs/new", {**FORM, "array": "0-63%8"})
    assert r.status_code == 302, r.content.decode()[-2000:]
    array = JobArray.objects.get()
    assert r["Location"] == f"/arrays/{array.pk}/" and array.size == 64 and array.throttle == 8
    assert Job.objects.get(array=array, array_index=9).command == ["/bin/sh", "-c", "python train.py --seed 9"]
    r = c.post("/jobs/new", {**FORM, "name": "eval", "command": "python eval.py", "after": f"afterok:a{array.pk}"})
    assert r.status_code == 302
    evaluation = Job.objects.get(name="eval")
    go(run_cycle)
    page = c.get(f"/arrays/{array.pk}/").content.decode()
    assert "at most <strong>8</strong> at once" in page and "Cancel waiting tasks" in page
    assert f"job {evaluation.pk} (eval)" in page
    assert Job.objects.filter(array=array, state=JobState.ADMITTED).count() == 8
    evaluation.refresh_from_db()
    assert evaluation.reason_code == reasons.WAITING_FOR_DEPENDENCY
    job_page = c.get(f"/jobs/{evaluation.pk}/").content.decode()
    assert f"array a{array.pk}" in job_page and 'id="hold"' in job_page
    assert c.post(f"/arrays/{array.pk}/cancel-waiting").status_code == 302
    assert Job.objects.filter(array=array, state=JobState.CANCELLED).count() == 56


@pytest.mark.parametrize(("field", "value"), [("array", "0-3%0"), ("array", "1,1"), ("after", "afterok:999"),
                                              ("after", "later:1"), ("command", "run {{ idx }}")])
def test_bad_sweep_fields_are_said_on_the_form(lab, field, value):
    r = _client(lab.alice).post("/jobs/new", {**FORM, "array": "0-3", field: value})
    assert r.status_code == 400 and 'class="field-error"' in r.content.decode()
    assert not Job.objects.exists() and not JobArray.objects.exists()


def test_hold_and_release_from_the_job_page(lab, submit, go):
    job = submit(lab.alice)
    c = _client(lab.alice)
    assert c.post(f"/jobs/{job.pk}/hold").status_code == 302
    go(run_cycle)
    job.refresh_from_db()
    assert job.reason_code == reasons.HELD and 'id="release"' in c.get(f"/jobs/{job.pk}/").content.decode()
    assert c.post(f"/jobs/{job.pk}/release").status_code == 302
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED


def test_another_departments_array_and_job_are_404s_and_a_colleague_may_not_act(lab, client_for, payload, submit):
    array_id = client_for(lab.alice).post("/api/v1/arrays", {**payload(), "array": "0-1"}, format="json").json()["id"]
    job = submit(lab.alice)
    bob = _client(lab.bob)
    assert bob.get(f"/arrays/{array_id}/").status_code == 404
    assert bob.post(f"/arrays/{array_id}/cancel").status_code == 404
    assert bob.post(f"/jobs/{job.pk}/hold").status_code == 404
    amy = _client(lab.amy)
    assert amy.get(f"/arrays/{array_id}/").status_code == 200
    assert amy.post(f"/arrays/{array_id}/cancel").status_code == 403
    assert amy.post(f"/jobs/{job.pk}/hold").status_code == 403
    assert not Job.objects.filter(state=JobState.CANCELLED).exists()
    assert _client(lab.alice).post(f"/arrays/{array_id}/explode").status_code == 404
