"""Behaviour that only a real PostgreSQL can show: triggers, advisory locks, races between connections."""

from __future__ import annotations

import threading

import pytest
from django.db import connection, connections, transaction

from scheduling.models import Job, JobEvent, JobState

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]


def _in_thread(fn, n):
    """Run fn(i) in n threads released together; each thread uses (and closes) its own connection."""
    barrier = threading.Barrier(n)
    results, errors = [None] * n, []

    def run(i):
        try:
            barrier.wait()
            results[i] = fn(i)
        except Exception as exc:  # noqa: BLE001
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(i,)) for i in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    return results, errors


def test_database_refuses_to_rewrite_the_timeline(lab, submit):
    from django.db.utils import DatabaseError

    job = submit(lab.alice)
    for sql in ("UPDATE scheduling_jobevent SET message = 'x'", "DELETE FROM scheduling_jobevent"):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cur:
            cur.execute(sql)
    assert JobEvent.objects.filter(job=job).count() == 1


def test_advisory_lock_admits_one_cycle_at_a_time(lab):
    from scheduling.services.locks import exclusive

    inside = threading.Event()
    release = threading.Event()

    def holder():
        with exclusive("admission-cycle") as got:
            assert got
            inside.set()
            release.wait(10)
        connections.close_all()

    t = threading.Thread(target=holder)
    t.start()
    assert inside.wait(10)
    try:
        with exclusive("admission-cycle") as got:
            assert got is False  # another session holds it
    finally:
        release.set()
        t.join(10)
    with exclusive("admission-cycle") as got:
        assert got  # released with the holder


def test_concurrent_retries_of_one_submission_make_one_job(lab):
    from scheduling.api.serializers import JobSubmitSerializer
    from scheduling.services.jobs import job_submit
    from tests.conftest import job_payload

    def submit_once(i):
        s = JobSubmitSerializer(data=job_payload())
        s.is_valid(raise_exception=True)
        job, created = job_submit(user=lab.alice, data=s.validated_data, idempotency_key="race-1")
        return job.pk, created

    results, errors = _in_thread(submit_once, 6)
    assert not errors, errors
    assert len({pk for pk, _ in results}) == 1
    assert sum(created for _, created in results) == 1
    assert Job.objects.count() == 1


def test_concurrent_cycles_admit_each_job_once(lab, submit):
    from scheduling.services.cycle import run_cycle

    jobs = [submit(lab.alice if i % 2 else lab.bob, name=f"j{i}") for i in range(8)]
    results, errors = _in_thread(lambda i: run_cycle(), 4)
    assert not errors, errors
    decided = [r for r in results if r is not None]
    assert sum(r.admitted for r in decided) == 8
    for job in jobs:
        job.refresh_from_db()
        assert job.state == JobState.ADMITTED
        assert job.events.filter(to_state=JobState.ADMITTED).count() == 1


def test_cancel_racing_admission_has_one_winner(lab, submit):
    from scheduling.services.jobs import transition

    for _ in range(5):
        job = submit(lab.alice)

        def move(i, job_id=job.pk):
            j = Job.objects.get(pk=job_id)
            target = JobState.CANCELLED if i % 2 else JobState.ADMITTED
            return transition(job=j, to=target, allowed_from=[JobState.QUEUED])

        results, errors = _in_thread(move, 4)
        assert not errors and sum(results) == 1
        assert Job.objects.get(pk=job.pk).events.exclude(to_state=JobState.QUEUED).count() == 1


def test_two_workers_on_one_due_quota_retry_make_one_create(kube, lab, submit, go, monkeypatch):
    """A namespace quota refused a job's start; its next step is due, and two workers run it at once (the
    chain's message and a redelivered duplicate). The first is inside its create when the second asks: the
    second backs off with no create, so the step costs one create and the chain stays one."""
    from scheduling.backends import get_backend
    from scheduling.services import pods
    from tests.scheduling.test_kubernetes_lifecycle import refused_by_the_namespace_quota

    b, chained = refused_by_the_namespace_quota(kube, lab, submit, go, monkeypatch)
    posts = kube.count("POST", "/pods$")
    backend = get_backend("default")
    real_start, inside, release, starts = backend.start, threading.Event(), threading.Event(), []

    def slow_start(*args, **kwargs):  # the first worker's create, held open while the second asks
        starts.append(threading.current_thread().name)
        inside.set()
        assert release.wait(30)
        return real_start(*args, **kwargs)

    monkeypatch.setattr(backend, "start", slow_start)
    first: list = []

    def run_first():
        try:
            first.append(pods.admit_pods(job_id=b.pk, attempt=1, fresh=False))
        finally:
            connections.close_all()

    t = threading.Thread(target=run_first, name="first")
    t.start()
    try:
        assert inside.wait(30)
        assert pods.admit_pods(job_id=b.pk, attempt=1, fresh=False) == ("backing_off", None)
    finally:
        release.set()
        t.join(60)
    assert first == [("quota_backoff", 4.0)] and starts == ["first"]
    assert kube.count("POST", "/pods$") == posts + 1
