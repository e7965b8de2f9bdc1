"""Cancels, pod-sync completions and admission cycles racing over many jobs of two departments, on real
PostgreSQL: no transaction may deadlock (retries are switched off, so a deadlock would surface as an error or
a 500), and PostgreSQL's own deadlock counter for the database must not move."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import connection, connections
from django.utils import timezone

from quotas.services import wallets
from scheduling.backends.base import PodState
from scheduling.models import Job, JobState, Node
from scheduling.services.cluster_binding import default_cluster
from scheduling.services.cycle import run_cycle
from scheduling.services.jobs import namespace_for
from scheduling.services.pod_states import apply_pod_states

ROUNDS = 4
PER_DEPT = 12  # queued and running jobs per department and round


def _deadlocks() -> int:
    with connection.cursor() as cur:
        cur.execute("SELECT pg_stat_force_next_flush()")
        cur.execute("SELECT deadlocks FROM pg_stat_database WHERE datname = current_database()")
        return cur.fetchone()[0]


def _world(money, rnd):
    """Queued jobs for the cycle to admit and running jobs (with holds) for the sync to finish, the two
    departments interleaved by primary key, so any per-job lock order crosses departments both ways."""
    queued, running = [], []
    now = timezone.now()
    for i in range(PER_DEPT):
        for dept, owner in ((money.vision, money.alice), (money.nlp, money.bob)):
            queued.append(Job.objects.create(
                owner=owner, department=dept, name=f"q{rnd}-{i}", image="x", command=["true"],
                flavor=money.a100, gpus_per_pod=1, max_runtime_s=600, state=JobState.QUEUED, submitted_at=now,
                queued_at=now))
            job = Job.objects.create(
                owner=owner, department=dept, name=f"r{rnd}-{i}", image="x", command=["true"], flavor=money.a100,
                gpus_per_pod=1, max_runtime_s=600, state=JobState.RUNNING, submitted_at=now, queued_at=now,
                admitted_at=now - timedelta(minutes=5), started_at=now - timedelta(minutes=5),
                placement=[f"big{len(running) % 20}"])
            wallets.wallet_hold(job=job, attempt=1, amount=1000, rate=1000,
                                 data={"admitted_at": job.admitted_at.isoformat(), "max_runtime_s": 600})
            running.append(job)
    return queued, running


def _succeeded(job):
    # in the job's own namespace: a pod elsewhere is a look-alike, not the job's
    namespace = namespace_for(job.department.slug, job.cluster or default_cluster())
    return PodState(job_id=job.pk, attempt=1, index=0, name=f"job-{job.pk}-1-0", namespace=namespace,
                    phase="Succeeded", gated=False, node="big0", exit_code=0, reason="Completed",
                    finished_at=timezone.now().timestamp())


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_cancel_sync_and_cycle_never_deadlock(money, client_for, consistent, monkeypatch):
    import portal.db

    monkeypatch.setattr(portal.db, "ATTEMPTS", 1)  # a deadlock must show, not be retried away
    for i in range(20):
        Node.objects.create(cluster=money.cluster, name=f"big{i}", flavor=money.a100, gpus=8,
                            labels={"gpu-type": "a100"})
    from quotas.models import Quota

    Quota.objects.update(nominal=200, borrowing_limit=0)
    for dept in (money.vision, money.nlp):
        wallets.wallet_adjust(department=dept, amount=10_000_000, actor=money.root, comment="stress")
    before = _deadlocks()
    statuses, errors = [], []
    lock = threading.Lock()

    def guarded(fn):
        def run():
            try:
                barrier.wait()
                fn()
            except Exception as exc:  # noqa: BLE001 - collected and asserted on
                with lock:
                    errors.append(exc)
            finally:
                connections.close_all()
        return run

    for rnd in range(ROUNDS):
        queued, running = _world(money, rnd)
        victims = (queued[::3] + running[1::3])[::-1]  # both kinds, both departments, against pk order

        def cycle():
            for _ in range(3):
                run_cycle()

        def sync(running=running):
            apply_pod_states([_succeeded(j) for j in running])

        def cancel(admin, dept_id, victims=victims):
            def run():
                client = client_for(admin)
                client.raise_request_exception = False
                for job in victims:
                    if job.department_id == dept_id:
                        status = client.post(f"/api/v1/jobs/{job.pk}/cancel", {}, format="json").status_code
                        with lock:
                            statuses.append(status)
            return run

        workers = [cycle, sync, cancel(money.vadmin, money.vision.pk), cancel(money.nadmin, money.nlp.pk)]
        barrier = threading.Barrier(len(workers))
        threads = [threading.Thread(target=guarded(w)) for w in workers]
        for t in threads:
            t.start()
        for t in threads:
            t.join(120)
        assert not any(t.is_alive() for t in threads)

    assert errors == []
    assert statuses and all(s < 500 for s in statuses), sorted(set(statuses))
    assert _deadlocks() == before
    consistent()
    # The race did real work: cancels, completions and admissions all happened.
    states = set(Job.objects.values_list("state", flat=True))
    assert {JobState.CANCELLED, JobState.SUCCEEDED, JobState.ADMITTED} <= states


def test_a_transaction_aborted_by_a_lock_conflict_runs_again_and_other_errors_do_not():
    from django.db import OperationalError

    from portal.db import retry_on_conflict

    class Deadlock(Exception):
        sqlstate = "40P01"

    calls = []

    def flaky():
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("deadlock detected") from Deadlock()
        return "done"

    assert retry_on_conflict(flaky) == "done" and len(calls) == 2

    def broken():
        calls.append(1)
        raise OperationalError("connection lost")

    calls.clear()
    with pytest.raises(OperationalError):
        retry_on_conflict(broken)
    assert len(calls) == 1


@pytest.mark.django_db
def test_a_lock_conflict_that_outlives_the_retries_is_a_503_with_retry_after(lab, client_for, submit,
                                                                              monkeypatch):
    from django.db import OperationalError

    from scheduling.api import views

    class Deadlock(Exception):
        sqlstate = "40P01"

    def deadlocked(**kwargs):
        raise OperationalError("deadlock detected") from Deadlock()

    job = submit(lab.alice)
    monkeypatch.setattr(views, "job_cancel", deadlocked)
    r = client_for(lab.alice).post(f"/api/v1/jobs/{job.pk}/cancel", {}, format="json")
    assert r.status_code == 503 and r.json()["error"]["code"] == "busy" and r["Retry-After"] == "1"
