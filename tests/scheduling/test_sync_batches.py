"""The pod sync moves many jobs per transaction: one compare-and-set UPDATE per job that starts running, and
its events and notifications inserted with the others'; a job that fails is applied again alone."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.models import Job, JobState, SimPod
from scheduling.services import pod_states
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster

pytestmark = pytest.mark.django_db


def _running_and_finished(n, lab, submit, go, capture) -> tuple[int, int, list[Job]]:
    Job.objects.filter(state__in=(JobState.QUEUED, JobState.ADMITTED, JobState.RUNNING)).update(
        state=JobState.CANCELLED)
    SimPod.objects.all().delete()
    jobs = [go(submit, lab.alice if i % 2 else lab.bob, name=f"s{i}", gpus=1) for i in range(n)]
    assert go(run_cycle).admitted == n
    with capture(execute=False), CaptureQueriesContext(connection) as started:
        assert sync_cluster() == {"running": n}
    SimPod.objects.filter(phase="Running").update(started_at=timezone.now() - timedelta(days=30))
    with capture(execute=False), CaptureQueriesContext(connection) as ended:
        assert sync_cluster() == {"succeeded": n}
    return len(started.captured_queries), len(ended.captured_queries), jobs


def test_a_sync_writes_one_update_per_started_job_and_three_statements_per_finished_one(
        lab, submit, go, django_capture_on_commit_callbacks):
    """Before: a transaction per job, with its event and notification inserted one by one (five statements
    per started job; seven per finished one, its wallet lock and hold look-up included)."""
    capture = django_capture_on_commit_callbacks
    started_2, ended_2, _ = _running_and_finished(2, lab, submit, go, capture)
    started_6, ended_6, jobs = _running_and_finished(6, lab, submit, go, capture)
    assert started_6 - started_2 == 4 * 1
    assert ended_6 - ended_2 == 4 * 3  # its wallet (held already), its UPDATE, its hold
    for job in jobs:
        assert [(e.from_state, e.to_state) for e in job.events.filter(kind="transition")] == [
            ("", "queued"), ("queued", "admitted"), ("admitted", "running"), ("running", "succeeded")]


def test_a_job_that_fails_in_a_batch_stops_no_other(lab, submit, go, monkeypatch):
    jobs = [go(submit, lab.alice, name=f"f{i}", gpus=1) for i in range(4)]
    assert go(run_cycle).admitted == 4
    real = pod_states.start_running

    def broken(*, job, **kwargs):
        if job.pk == jobs[2].pk:
            raise RuntimeError("a bad row")
        return real(job=job, **kwargs)

    monkeypatch.setattr(pod_states, "start_running", broken)
    assert go(sync_cluster) == {"running": 3, "errors": 1}
    states = dict(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("pk", "state"))
    assert states == {j.pk: JobState.ADMITTED if j.pk == jobs[2].pk else JobState.RUNNING for j in jobs}
    assert jobs[2].events.filter(kind="transition", to_state=JobState.RUNNING).count() == 0
    assert all(j.events.filter(kind="transition", to_state=JobState.RUNNING).count() == 1
               for j in jobs if j.pk != jobs[2].pk)
    monkeypatch.setattr(pod_states, "start_running", real)
    assert go(sync_cluster) == {"running": 1}  # the next sync moves it
