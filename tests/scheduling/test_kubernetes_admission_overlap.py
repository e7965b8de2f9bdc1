"""A cycle's admissions on the Kubernetes backend create their pods concurrently (``admit_pods_many``), against
the fake API server: each pod exactly once, a failing or hanging admission never holds up the others, a message
run again after a worker died halfway makes no duplicate, each admission is still checked right before its own
creates (a job requeued meanwhile gets none), and the creates really are in flight at the same time."""

from __future__ import annotations

import pytest

from scheduling import backends, tasks
from scheduling.backends.kube.podspec import pinned_nodes
from scheduling.models import Job, JobState
from scheduling.services import pods
from scheduling.services.cycle import run_cycle
from scheduling.services.lifecycle import requeue

pytestmark = pytest.mark.django_db


def pod_names(job):
    return [f"job-{job.pk}-a{job.attempt}"] if job.pods == 1 else [
        f"job-{job.pk}-a{job.attempt}-{i}" for i in range(job.pods)]


def posted(kube, name):
    """How many times a pod of that name was POSTed."""
    return sum(1 for r in kube.requests if r.method == "POST" and r.path.endswith("/pods")
               and ((r.body or {}).get("metadata") or {}).get("name") == name)


def pods_of(kube, job):
    """The job's pods on the cluster, by its labels (a duplicate under another name would show here)."""
    return [p for p in kube.pods.values()
            if (p["metadata"].get("labels") or {}).get("gpu-portal.io/job-id") == str(job.pk)]


def assert_started_once(kube, job):
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED, (job.pk, job.reason_code, job.reason_message)
    found = pods_of(kube, job)
    assert sorted(p["metadata"]["name"] for p in found) == sorted(pod_names(job))
    for pod, node in zip(sorted(found, key=lambda p: p["metadata"]["name"]), job.placement, strict=True):
        assert not pod["spec"].get("schedulingGates")
        assert pinned_nodes(pod) == {node}  # pinned to its placement


def admitted_unstarted(run_cycle_with, *jobs):
    """Run the cycle without sending its messages: the jobs are admitted, their pods not created yet."""
    with run_cycle_with(execute=False):
        assert run_cycle().admitted == len(jobs)
    return [[job.pk, 1] for job in jobs]


@pytest.fixture
def slow_ok(kube, settings):
    """The backend with the settings' own rate limit (not the suite's unlimited one) and a read timeout far
    above the fake's injected waits, so that only the behaviour under test decides."""
    from scheduling.backends.factory import kubernetes_backend

    backend = kubernetes_backend("default", host=kube.url, timeout_s=60.0, connect_timeout_s=5.0)
    old, backends._cache["default"] = backends._cache["default"], backend
    yield backend
    backends._cache["default"] = old
    backend.close()


@pytest.fixture
def retried(monkeypatch):
    """The single-pair retries ``admit_pods_many`` hands out, recorded instead of run at once (eagerly)."""
    sent: list[tuple[int, int]] = []
    monkeypatch.setattr(tasks.admit_pods, "delay", lambda job_id, attempt: sent.append((job_id, attempt)))
    return sent


def test_overlapping_admissions_create_each_pod_exactly_once(kube, lab, submit, go, slow_ok):
    singles = [go(submit, lab.alice if i % 2 else lab.bob, gpus=1, name=f"one{i}") for i in range(4)]
    gang = go(submit, lab.bob, gpus=2, pods=2, name="gang")
    go(run_cycle)  # its admit_many message runs here (eagerly), its admissions overlapping
    for job in [*singles, gang]:
        assert_started_once(kube, job)
        assert all(posted(kube, name) == 1 for name in pod_names(job))


def test_the_creates_of_one_message_are_in_flight_at_once(kube, lab, submit, go, slow_ok, retried,
                                                          django_capture_on_commit_callbacks, settings):
    settings.ADMIT_CONCURRENCY = 4
    jobs = [go(submit, lab.alice, gpus=1, name=f"m{i}") for i in range(4)]
    pairs = admitted_unstarted(django_capture_on_commit_callbacks, *jobs)
    # Each of the 4 POSTs is held until all 4 are in flight: one after another, the first would wait 10 s
    # alone and every one would answer 503.
    kube.meet_next(4, seconds=10.0, method="POST", path="/pods$")
    assert tasks.admit_pods_many(pairs) == {"admitted": 4}
    assert retried == []
    for job in jobs:
        assert_started_once(kube, job)


def test_a_hanging_admission_holds_up_no_other_and_is_retried_alone(
        kube, lab, submit, go, slow_ok, retried, django_capture_on_commit_callbacks, settings):
    settings.ADMIT_CONCURRENCY = 4
    jobs = [go(submit, lab.alice if i % 2 else lab.bob, gpus=1, name=f"h{i}") for i in range(4)]
    pairs = admitted_unstarted(django_capture_on_commit_callbacks, *jobs)
    # The first create gets no answer (its connection is cut, nothing stored); the other three are only
    # answered once all three are in flight together, i.e. while the first still hangs or after it.
    kube.hang_next(1, seconds=1.0, then="drop", method="POST", path="/pods$")
    kube.meet_next(3, seconds=10.0, method="POST", path="/pods$")
    assert tasks.admit_pods_many(pairs) == {"admitted": 3, "retrying": 1}
    assert len(retried) == 1
    hung = Job.objects.get(pk=retried[0][0])
    assert pods_of(kube, hung) == []
    for job in jobs:
        if job.pk != hung.pk:
            assert_started_once(kube, job)
    assert tasks.admit_pods(*retried[0]) == "admitted"  # the pair's own task, with its retries
    assert_started_once(kube, hung)


def test_a_message_run_again_after_the_worker_died_halfway_makes_no_duplicate(
        kube, lab, submit, go, slow_ok, retried, django_capture_on_commit_callbacks):
    singles = [go(submit, lab.alice if i % 2 else lab.bob, gpus=1, name=f"k{i}") for i in range(3)]
    gang = go(submit, lab.bob, gpus=2, pods=2, name="gang")
    pairs = admitted_unstarted(django_capture_on_commit_callbacks, *singles, gang)
    # The first run gets three pods in, then the API server stops answering creates, and the worker is
    # killed before any retry it handed out runs (they are only recorded): the broker delivers the message again.
    kube.fail_next(100, status=503, method="POST", path="/pods$", after=3)
    first = tasks.admit_pods_many(pairs)
    assert first.get("retrying", 0) >= 1 and sum(len(pods_of(kube, j)) for j in [*singles, gang]) == 3
    kube.faults.clear()
    assert tasks.admit_pods_many(pairs) == {"admitted": 4}  # the same message, again: creates are fresh POSTs
    for job in [*singles, gang]:
        assert_started_once(kube, job)  # what existed was answered 409 AlreadyExists and adopted
    assert sum(posted(kube, name) for job in [*singles, gang] for name in pod_names(job)) > 5


def test_each_admission_is_checked_right_before_its_creates(
        kube, lab, submit, go, slow_ok, retried, django_capture_on_commit_callbacks, settings, monkeypatch):
    settings.ADMIT_CONCURRENCY = 2
    first, second, late = [go(submit, lab.alice if i % 2 else lab.bob, gpus=1, name=f"v{i}") for i in range(3)]
    pairs = admitted_unstarted(django_capture_on_commit_callbacks, first, second, late)
    late.refresh_from_db()
    real, seen = pods.settle_admission, []

    def settle(admission, error):
        # While the first two creates were in flight, another worker's sync found the node of the third
        # job's placement gone and gave that placement up: the job is queued again as a new attempt.
        if not seen:
            assert pods_of(kube, late) == [] and posted(kube, pod_names(late)[0]) == 0  # not claimed yet
            kube.remove_node(late.placement[0])
            assert requeue(job=Job.objects.get(pk=late.pk), outcome="platform_failure", reason="NodeLost",
                           message="its node left the cluster")
        seen.append(admission.job.pk)
        return real(admission, error)

    monkeypatch.setattr(pods, "settle_admission", settle)
    assert tasks.admit_pods_many(pairs) == {"admitted": 2, "stale": 1}
    assert sorted(seen) == sorted([first.pk, second.pk])
    assert pods_of(kube, late) == [] and posted(kube, pod_names(late)[0]) == 0  # nothing created for it
    late.refresh_from_db()
    assert (late.state, late.attempt) == (JobState.QUEUED, 2)
    for job in (first, second):
        assert_started_once(kube, job)


@pytest.mark.postgres  # SQLite's in-memory test database ignores closing (it would be lost)
def test_a_pool_thread_closes_a_database_connection_it_opened(
        kube, lab, submit, go, slow_ok, retried, django_capture_on_commit_callbacks, monkeypatch):
    from django.db import connections

    jobs = [go(submit, lab.alice, gpus=1, name=f"c{i}") for i in range(2)]
    pairs = admitted_unstarted(django_capture_on_commit_callbacks, *jobs)
    real, opened = pods.Admission.run, []

    def run(admission):  # something on the way that reads the database, on the pool's thread
        with connections["default"].cursor() as cursor:
            cursor.execute("SELECT 1")
        opened.append(connections["default"])
        return real(admission)

    monkeypatch.setattr(pods.Admission, "run", run)
    assert tasks.admit_pods_many(pairs) == {"admitted": 2}
    assert len(opened) == 2 and all(c is not connections["default"] for c in opened)
    assert all(c.connection is None for c in opened)  # closed when its run ended, not left to the thread
