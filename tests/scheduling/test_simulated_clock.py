"""The simulated cluster keeps time by its clock (``scheduling.backends.clock``), not by the wall: the tests'
``sim_clock`` stands still until a test advances it, so a pod starts, logs and ends exactly when the test says,
however slowly the machine runs the test."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from scheduling.backends import get_backend
from scheduling.backends.clock import ManualClock, WallClock, sim_clock
from scheduling.models import Job, SimPod
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster

pytestmark = pytest.mark.django_db

START = datetime(2030, 1, 1, 9, 0, tzinfo=UTC)  # far from the wall clock: a read of the wall shows


def _running(lab, submit, go, **fields):
    job = go(submit, lab.alice, **fields)
    go(run_cycle)
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == "running", job.state
    return job


def test_a_pod_starts_logs_and_ends_by_the_clusters_clock(lab, submit, go, settings, sim_clock):
    sim_clock.set(START)
    settings.SIM_SPEEDUP = 60
    job = _running(lab, submit, go, max_runtime_s=600)  # 600 s of runtime: 10 s of the clock at 60x
    pod = SimPod.objects.get(job_id=job.pk)
    assert pod.started_at == START and job.started_at == START
    backend = get_backend()
    assert backend.clock is sim_clock

    def log():
        return list(backend.logs(job_id=job.pk, attempt=job.attempt, namespace=pod.namespace))

    assert log() == ["$ python train.py"]  # not a simulated second has passed
    sim_clock.advance(2.5)  # 150 simulated seconds
    assert log()[1:] == ["[sim] step 0: running", "[sim] step 60: running", "[sim] step 120: running"]
    sim_clock.advance(7.4)  # 594 s: not yet
    assert backend.advance() == 0 and SimPod.objects.get(pk=pod.pk).phase == "Running"
    sim_clock.advance(0.1)  # 600 s: done, at the clock's time
    go(sync_cluster)
    pod.refresh_from_db()
    job.refresh_from_db()
    assert (pod.phase, pod.finished_at) == ("Succeeded", START + timedelta(seconds=10))
    assert job.state == "succeeded" and job.finished_at == START + timedelta(seconds=10)


def test_an_eviction_is_stamped_by_the_clusters_clock(lab, submit, go, sim_clock):
    sim_clock.set(START)
    job = _running(lab, submit, go)
    sim_clock.advance(30)
    assert get_backend().evict(job_id=job.pk, attempt=job.attempt, namespace="x").status == "accepted"
    assert SimPod.objects.get(job_id=job.pk).finished_at == START + timedelta(seconds=30)
    assert Job.objects.get(pk=job.pk).state == "running"  # the portal learns of it at the next sync


def test_real_time_is_the_default_and_the_manual_clock_never_goes_back(settings):
    settings.SIM_CLOCK = None
    assert isinstance(sim_clock(), WallClock)
    before = datetime.now(UTC)
    assert before <= WallClock().now() <= datetime.now(UTC)
    clock = ManualClock(START)
    assert clock.now() == clock.now() == START
    assert clock.advance(1.5) == START + timedelta(seconds=1.5)
    with pytest.raises(ValueError):
        clock.advance(-1)
    with pytest.raises(ValueError):
        clock.set(START)
    with pytest.raises(ValueError):
        ManualClock(datetime(2030, 1, 1))


def test_a_job_that_ends_between_two_syncs_started_when_its_pods_did(lab, submit, go, settings, sim_clock):
    sim_clock.set(START)
    settings.SIM_SPEEDUP = 60
    job = go(submit, lab.alice, max_runtime_s=600)
    go(run_cycle)  # admitted; its pod starts at the cluster's START, and no sync sees it run
    assert SimPod.objects.get(job_id=job.pk).started_at == START
    sim_clock.advance(20)
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == "succeeded"
    assert (job.started_at, job.finished_at) == (START, START + timedelta(seconds=10))


def test_a_job_that_fails_between_two_syncs_started_when_its_pods_did(lab, submit, go, sim_clock):
    sim_clock.set(START)
    job = go(submit, lab.alice, max_runtime_s=600)
    go(run_cycle)
    sim_clock.advance(5)
    SimPod.objects.filter(job_id=job.pk).update(phase="Failed", exit_code=3, finished_at=START + timedelta(seconds=5))
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == "failed"
    assert (job.started_at, job.finished_at) == (START, START + timedelta(seconds=5))
