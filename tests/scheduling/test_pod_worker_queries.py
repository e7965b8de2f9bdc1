"""A pod worker's message costs a few statements per job: the message's jobs (and their departments' secrets)
are read together, a simulated start is one UPDATE, a create one INSERT; and the guarantees stay."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from scheduling.models import Job, JobState, NamespaceQuotaRefusal, SimPod
from scheduling.services.cluster_binding import default_cluster
from scheduling.services.cycle import run_cycle

pytestmark = pytest.mark.django_db


def _admitted(lab, submit, n, django_capture_on_commit_callbacks, **fields):
    Job.objects.filter(state__in=(JobState.QUEUED, JobState.ADMITTED)).update(state=JobState.CANCELLED)
    with django_capture_on_commit_callbacks(execute=True):  # their gated pods made, as at submission
        jobs = [submit(lab.alice if i % 2 else lab.bob, name=f"q{i}", **fields) for i in range(n)]
    assert SimPod.objects.filter(job_id__in=[j.pk for j in jobs], gated=True).count() == n * jobs[0].pods
    with django_capture_on_commit_callbacks(execute=False):  # the admit messages are run by the test
        assert run_cycle().admitted == n
    return jobs


def _admit_queries(lab, submit, n, capture, **fields) -> int:
    from scheduling import tasks

    jobs = _admitted(lab, submit, n, capture, **fields)
    with CaptureQueriesContext(connection) as q:
        assert tasks.admit_pods_many([[j.pk, j.attempt] for j in jobs]) == {"admitted": n}
    assert SimPod.objects.filter(job_id__in=[j.pk for j in jobs], gated=False, phase="Running").count() == \
        n * jobs[0].pods
    return len(q.captured_queries)


def test_a_simulated_admission_is_one_statement_per_job(lab, submit, django_capture_on_commit_callbacks):
    """Before: the job, its quota refusal, its secrets, a failed INSERT per pod in a savepoint, the pods' read,
    an UPDATE per pod and the refusal's clearing: ten statements per one-pod job."""
    capture = django_capture_on_commit_callbacks
    assert _admit_queries(lab, submit, 6, capture, gpus=1) - _admit_queries(lab, submit, 2, capture, gpus=1) == 4


def test_a_gang_is_ungated_whole_in_one_transaction(lab, submit, django_capture_on_commit_callbacks):
    capture = django_capture_on_commit_callbacks
    # per gang: the UPDATE of its pods inside a savepoint (here; a transaction in a worker)
    assert _admit_queries(lab, submit, 3, capture, gpus=1, pods=2) - \
        _admit_queries(lab, submit, 1, capture, gpus=1, pods=2) == 2 * 3


def test_a_create_message_is_one_insert_per_job(lab, submit, monkeypatch):
    from scheduling import tasks

    def creates(n):
        Job.objects.filter(state=JobState.QUEUED).update(state=JobState.CANCELLED)
        jobs = [submit(lab.alice if i % 2 else lab.bob, name=f"c{i}", gpus=1, pods=2) for i in range(n)]
        SimPod.objects.all().delete()  # made at submission (eagerly in tests): the task makes them again
        with CaptureQueriesContext(connection) as q:
            assert tasks.create_pods_many([[j.pk, j.attempt] for j in jobs]) == {"created": n}
        assert SimPod.objects.filter(gated=True).count() == 2 * n
        return len(q.captured_queries)

    # before: the job, its secrets, and a savepoint, an INSERT and its release per pod: eight per gang of two
    assert creates(5) - creates(2) == 3


def test_a_gang_with_a_pod_missing_is_made_whole_before_it_starts(lab, submit, django_capture_on_commit_callbacks):
    from scheduling import tasks

    [job] = _admitted(lab, submit, 1, django_capture_on_commit_callbacks, gpus=1, pods=2)
    SimPod.objects.filter(job_id=job.pk, index=1).delete()
    assert tasks.admit_pods_many([[job.pk, job.attempt]]) == {"admitted": 1}
    assert sorted(SimPod.objects.filter(job_id=job.pk).values_list("index", "gated", "phase")) == [
        (0, False, "Running"), (1, False, "Running")]
    # run again (a redelivered message): nothing is made twice, nothing changes
    assert tasks.admit_pods_many([[job.pk, job.attempt]]) == {"admitted": 1}
    assert SimPod.objects.filter(job_id=job.pk).count() == 2


def test_stale_and_cancelled_pairs_of_a_message_start_nothing(lab, submit, django_capture_on_commit_callbacks):
    from scheduling import tasks

    jobs = _admitted(lab, submit, 3, django_capture_on_commit_callbacks, gpus=1)
    Job.objects.filter(pk=jobs[0].pk).update(state=JobState.CANCELLED)
    outcome = tasks.admit_pods_many([[jobs[0].pk, 1], [jobs[1].pk, 2], [jobs[2].pk, 1]])
    assert outcome == {"stale": 2, "admitted": 1}
    assert list(SimPod.objects.filter(gated=False).values_list("job_id", flat=True)) == [jobs[2].pk]


def test_a_refusal_in_force_is_still_claimed_and_cleared_by_the_start(lab, submit, django_capture_on_commit_callbacks):
    from scheduling import tasks

    jobs = _admitted(lab, submit, 2, django_capture_on_commit_callbacks, gpus=1)
    now = timezone.now()
    refused = NamespaceQuotaRefusal.objects.create(
        job=jobs[0], attempt=1, cluster=default_cluster(), namespace="gpu-vision", total_gpus=1, request={},
        refused_at=now, step=1, next_retry_at=now + timezone.timedelta(seconds=60),
        expires_at=now + timezone.timedelta(minutes=30))
    # its next try is not due: no second chain; the other job starts
    assert tasks.admit_pods_many([[j.pk, 1] for j in jobs]) == {"backing_off": 1, "admitted": 1}
    NamespaceQuotaRefusal.objects.filter(pk=refused.pk).update(next_retry_at=now)
    assert tasks.admit_pods_many([[jobs[0].pk, 1]]) == {"admitted": 1}
    refused.refresh_from_db()
    assert refused.cleared_at is not None


def _array_admit_queries(lab, client_for, payload, n, capture) -> int:
    """Queries of one admit message for the ``n`` tasks of a new array (their pods made at submission)."""
    from scheduling import tasks

    Job.objects.filter(state__in=(JobState.QUEUED, JobState.ADMITTED)).update(state=JobState.CANCELLED)
    with capture(execute=True):
        r = client_for(lab.alice).post("/api/v1/arrays", {**payload(name="sweep", gpus=1), "array": f"0-{n - 1}"},
                                       format="json")
    assert r.status_code == 201, r.content
    jobs = list(Job.objects.filter(array_id=r.json()["id"]).order_by("pk"))
    with capture(execute=False):
        assert run_cycle().admitted == n
    with CaptureQueriesContext(connection) as q:
        assert tasks.admit_pods_many([[j.pk, j.attempt] for j in jobs]) == {"admitted": n}
    return len(q.captured_queries)


def test_an_arrays_tasks_are_admitted_with_their_array_read_along(lab, client_for, payload,
                                                                    django_capture_on_commit_callbacks):
    """A task's pods carry its array's size (the rendezvous of a sweep's index): the array comes with the job's
    row, so a task costs what any job costs, one statement (before: one more read of its array each)."""
    capture = django_capture_on_commit_callbacks
    assert _array_admit_queries(lab, client_for, payload, 6, capture) - \
        _array_admit_queries(lab, client_for, payload, 2, capture) == 4
