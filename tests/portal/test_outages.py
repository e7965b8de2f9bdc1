"""Dependencies down: an accepted job answers 201 whatever the broker or the cache does, the reconciler
repairs what the broker lost, and readiness reports each dependency while liveness stays up."""

from __future__ import annotations

import logging

import pytest
from django.db import OperationalError
from kombu.exceptions import OperationalError as BrokerUnavailable

from scheduling.models import Job, SimPod

pytestmark = pytest.mark.django_db

UNREACHABLE_REDIS = "redis://127.0.0.1:1/0"  # nothing listens on port 1: refused at once


@pytest.fixture
def broker_down(monkeypatch):
    """Every task publish fails as Celery fails with an unreachable broker."""
    from scheduling import tasks

    def refuse(*args, **kwargs):
        raise BrokerUnavailable("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    for task in (tasks.create_pods, tasks.create_pods_many, tasks.admit_pods_many, tasks.delete_pods,
                 tasks.evict_pods):
        monkeypatch.setattr(task, "delay", refuse)
    return monkeypatch


def test_a_job_accepted_while_the_broker_is_down_answers_201_once_and_the_reconciler_creates_its_pods(
    lab, client_for, payload, broker_down, django_capture_on_commit_callbacks, caplog
):
    client = client_for(lab.alice)
    with caplog.at_level(logging.WARNING, logger="portal.broker"), \
            django_capture_on_commit_callbacks(execute=True):
        r = client.post("/api/v1/jobs", payload(), format="json")
    assert r.status_code == 201, r.content
    assert Job.objects.count() == 1 and not SimPod.objects.exists()
    assert "broker unreachable" in caplog.text
    broker_down.undo()  # the broker is back: the periodic reconcile repairs the lost message
    from scheduling.services.reconcile import reconcile

    with django_capture_on_commit_callbacks(execute=True):
        assert reconcile()["created"] == 1
    assert SimPod.objects.filter(job_id=r.json()["id"]).count() == 1


def test_a_cancel_while_the_broker_is_down_is_recorded(lab, submit, go, client_for, broker_down):
    job = submit(lab.alice)
    r = go(client_for(lab.alice).post, f"/api/v1/jobs/{job.pk}/cancel", {}, format="json")
    assert r.status_code == 200 and r.json()["state"] == "cancelled"


def test_the_submit_throttle_fails_open_with_a_warning_when_the_cache_is_down(lab, client_for, payload, settings,
                                                                             caplog):
    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": UNREACHABLE_REDIS,
                                   "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5}}}
    with caplog.at_level(logging.WARNING, logger="scheduling.api.views"):
        r = client_for(lab.alice).post("/api/v1/jobs", payload(), format="json")
    assert r.status_code == 201, r.content
    assert "cache is unreachable" in caplog.text


def test_liveness_checks_no_dependency_and_readiness_reports_each(lab, client, settings, monkeypatch):
    from portal import views
    from portal.celery import app

    r = client.get("/readyz")
    assert r.status_code == 200 and r.json()["status"] == "ok" and r.json()["checks"] == {
        "database": "ok", "cache": "ok", "broker": "ok", "scheduler": "ok"}

    settings.CACHES = {"default": {"BACKEND": "django.core.cache.backends.redis.RedisCache",
                                   "LOCATION": UNREACHABLE_REDIS,
                                   "OPTIONS": {"socket_connect_timeout": 0.5, "socket_timeout": 0.5}}}
    monkeypatch.setattr(app.conf, "broker_url", UNREACHABLE_REDIS)
    body = client.get("/readyz").json()
    assert body["status"] == "degraded"
    assert body["checks"]["database"] == "ok"
    assert body["checks"]["cache"].startswith("error") and body["checks"]["broker"].startswith("error")
    assert client.get("/readyz").status_code == 200  # degraded: submissions still work, keep serving

    def db_down():
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setitem(views.READINESS_CHECKS, "database", db_down)
    r = client.get("/readyz")
    assert r.status_code == 503 and r.json()["status"] == "error"
    assert r.json()["checks"]["database"] == "error: OperationalError"
    assert client.get("/healthz").status_code == 200  # liveness: restarting the web process cannot fix that


def test_an_eviction_decided_while_the_broker_is_down_is_sent_again_by_the_reconciler(lab, submit, go,
                                                                                      broker_down):
    from datetime import timedelta

    from django.utils import timezone

    import engine
    from scheduling.models import Preemption, PreemptionVictim
    from scheduling.services.cycle import apply_result, run_cycle
    from scheduling.services.inventory import sync_cluster
    from scheduling.services.reconcile import reconcile
    from scheduling.services.snapshot import build_snapshot

    broker_down.undo()
    victim = go(submit, lab.bob, gpus=4, name="victim")
    go(run_cycle)
    go(sync_cluster)
    preemptor = go(submit, lab.alice, gpus=4, tier="realtime", name="rt")
    from scheduling import tasks

    def refuse(*args, **kwargs):
        raise BrokerUnavailable("Connection refused.")

    broker_down.setattr(tasks.evict_pods, "delay", refuse)
    snapshot, ctx = build_snapshot(now=timezone.now())
    go(apply_result, result=engine.CycleResult(preemptions=(engine.Preemption(
        preemptor_id=preemptor.pk, victim_ids=(victim.pk,), reason="priority", message="needs 4 GPUs"),)), ctx=ctx)
    assert PreemptionVictim.objects.get().status == PreemptionVictim.Status.DECIDED  # the message was lost
    broker_down.undo()
    assert "evictions_resent" not in go(reconcile)  # within the grace period: maybe just slow
    Preemption.objects.update(decided_at=timezone.now() - timedelta(minutes=5))
    assert go(reconcile)["evictions_resent"] == 1
    assert PreemptionVictim.objects.get().status == PreemptionVictim.Status.EVICTED
    go(sync_cluster)
    victim.refresh_from_db()
    assert (victim.state, victim.attempt) == ("queued", 2)
