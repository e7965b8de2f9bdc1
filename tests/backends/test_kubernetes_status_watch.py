"""Pod -> PodState mapping and the pod watch (410 Gone re-list, back-off), against the fake API over HTTP."""

from __future__ import annotations

import threading

import pytest

from scheduling.backends.base import ClusterUnavailable
from scheduling.backends.kube import KubernetesBackend, pod_state

NS = "team-a"


@pytest.fixture
def admitted(kube_backend, kube_fake, make_podset):
    """A one-pod job, created and admitted onto n1 (not yet bound)."""
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    podset = make_podset()
    kube_backend.ensure_pods(podset)
    kube_backend.admit(podset, ("n1",))
    return podset


def state(backend, name="job-42-a1"):
    (found,) = [p for p in backend.list_pods() if p.name == name]
    return found


# ------------------------------------------------------------------------------------------- status mapping


def test_gated_pod(kube_backend, make_podset):
    kube_backend.ensure_pods(make_podset())
    s = state(kube_backend)
    assert (s.job_id, s.attempt, s.index, s.namespace) == (42, 1, 0, NS)
    assert (s.phase, s.gated, s.node, s.reason) == ("Pending", True, None, "")


def test_running_pod(kube_backend, kube_fake, admitted):
    kube_fake.run(NS, "job-42-a1")
    s = state(kube_backend)
    assert (s.phase, s.gated, s.node, s.deleting) == ("Running", False, "n1", False)
    assert s.started_at is not None and s.finished_at is None


def test_succeeded_pod(kube_backend, kube_fake, admitted):
    kube_fake.run(NS, "job-42-a1")
    kube_fake.terminate(NS, "job-42-a1", exit_code=0)
    s = state(kube_backend)
    assert (s.phase, s.exit_code, s.reason) == ("Succeeded", 0, "")
    assert s.finished_at is not None


def test_failed_pod_with_exit_code(kube_backend, kube_fake, admitted):
    kube_fake.run(NS, "job-42-a1")
    kube_fake.terminate(NS, "job-42-a1", exit_code=3, message="boom")
    s = state(kube_backend)
    assert (s.phase, s.exit_code, s.reason, s.message) == ("Failed", 3, "Error", "boom")


def test_oom_killed_pod(kube_backend, kube_fake, admitted):
    kube_fake.run(NS, "job-42-a1")
    kube_fake.oom_kill(NS, "job-42-a1")
    s = state(kube_backend)
    assert (s.phase, s.exit_code, s.reason) == ("Failed", 137, "OOMKilled")


@pytest.mark.parametrize("reason", ["ErrImagePull", "ImagePullBackOff", "CrashLoopBackOff", "InvalidImageName"])
def test_container_that_cannot_start(kube_backend, kube_fake, admitted, reason):
    kube_fake.wait_container(NS, "job-42-a1", reason, message="pull access denied")
    s = state(kube_backend)
    assert (s.phase, s.reason, s.message) == ("Pending", reason, "pull access denied")


def test_container_creating_is_not_an_error(kube_backend, kube_fake, admitted):
    kube_fake.wait_container(NS, "job-42-a1", "ContainerCreating")
    assert state(kube_backend).reason == ""


def test_unschedulable_after_admission(kube_backend, kube_fake, admitted):
    kube_fake.mark_unschedulable(NS, "job-42-a1", "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.")
    s = state(kube_backend)
    assert (s.phase, s.gated, s.reason) == ("Pending", False, "Unschedulable")
    assert "Insufficient" in s.message


def test_evicted_through_the_api(kube_backend, kube_fake, admitted):
    kube_fake.run(NS, "job-42-a1")
    kube_backend.evict(job_id=42, attempt=1, namespace=NS)
    s = state(kube_backend)
    assert (s.reason, s.deleting, s.phase) == ("Evicted", True, "Running")


def test_evicted_by_the_kubelet_under_node_pressure(kube_backend, kube_fake, admitted):
    kube_fake.run(NS, "job-42-a1")
    kube_fake.kubelet_evict(NS, "job-42-a1")
    s = state(kube_backend)
    assert (s.phase, s.reason) == ("Failed", "Evicted")


def test_deleted_pod_is_deleting(kube_backend, kube_fake, admitted):
    kube_fake.run(NS, "job-42-a1")
    kube_backend.delete_pods(job_id=42, attempt=1, namespace=NS)
    assert state(kube_backend).deleting is True


@pytest.mark.parametrize(("status", "reason"), [
    ({"phase": "Failed", "reason": "DeadlineExceeded", "message": "Pod was active too long"}, "DeadlineExceeded"),
    ({"phase": "Running", "conditions": [{"type": "DisruptionTarget", "status": "True",
                                          "reason": "PreemptionByScheduler"}]}, "Preempted"),
    ({"phase": "Running", "conditions": [{"type": "DisruptionTarget", "status": "True",
                                          "reason": "DeletionByTaintManager"}]}, "NodeLost"),
    ({"phase": "Failed", "containerStatuses": [{"name": "main", "state": {
        "terminated": {"exitCode": 137, "reason": "OOMKilled"}}}],
      "conditions": [{"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI"}]}, "Evicted"),
    ({"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated"}]},
     ""),
])
def test_status_mapping_table(status, reason):
    pod = {"metadata": {"name": "job-1-a2", "namespace": NS, "labels": {
        "app.kubernetes.io/managed-by": "gpu-portal", "gpu-portal.io/job-id": "1", "gpu-portal.io/attempt": "2"}},
        "spec": {}, "status": status}
    s = pod_state(pod)
    assert (s.job_id, s.attempt, s.index, s.reason) == (1, 2, 0, reason)


def test_pods_not_ours_are_ignored():
    assert pod_state({"metadata": {"name": "x", "labels": {"app": "web"}}, "spec": {}, "status": {}}) is None
    assert pod_state({"metadata": {"name": "x", "labels": {"app.kubernetes.io/managed-by": "gpu-portal",
                                                           "gpu-portal.io/job-id": "nope"}}}) is None


# ------------------------------------------------------------------------------------------- watch


def test_watch_lists_first_then_streams_changes(kube_backend, kube_fake, admitted):
    kube_fake.add_foreign_pod("default", "web-1", node="n1")  # not ours: never reported
    watch = kube_backend.watch_pods(timeout_s=1)
    events = iter(watch)
    kind, s = next(events)
    assert (kind, s.name, s.phase) == ("ADDED", "job-42-a1", "Pending")
    listed_rv = watch.resource_version
    kube_fake.run(NS, "job-42-a1")
    kube_fake.oom_kill(NS, "job-42-a1")
    kind, s = next(events)
    assert (kind, s.phase) == ("MODIFIED", "Pending")  # bound
    kind, s = next(events)
    assert (kind, s.phase) == ("MODIFIED", "Running")
    kind, s = next(events)
    assert (kind, s.phase, s.reason) == ("MODIFIED", "Failed", "OOMKilled")
    kube_backend.delete_pods(job_id=42, attempt=1, namespace=NS)
    kind, s = next(events)
    assert (kind, s.name) == ("DELETED", "job-42-a1")  # failed pods go at once
    assert int(watch.resource_version) > int(listed_rv)
    watch.stop()
    assert watch.relists == 1


def test_watch_reconnects_after_server_timeout(kube_backend, kube_fake, admitted):
    watch = kube_backend.watch_pods(timeout_s=1)
    events = iter(watch)
    next(events)

    def later():
        threading.Event().wait(1.3)  # after the first watch request timed out server-side
        kube_fake.run(NS, "job-42-a1")

    t = threading.Thread(target=later)
    t.start()
    kind, s = next(events)
    t.join()
    assert kind == "MODIFIED"
    assert kube_fake.count("GET", "/api/v1/pods") >= 3  # list + 2 watch connections
    watch.stop()


def test_watch_410_gone_relists_and_reports_what_vanished(kube_backend, kube_fake, make_podset):
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    kube_backend.ensure_pods(make_podset(pods=2, gpus_per_pod=1))
    watch = kube_backend.watch_pods(timeout_s=1)
    events = iter(watch)
    assert {next(events)[1].name for _ in range(2)} == {"job-42-a1-0", "job-42-a1-1"}
    # While we were away: one pod vanished, the other changed, and the history was compacted.
    kube_fake.finish_termination(NS, "job-42-a1-1")
    kube_fake.touch(NS, "job-42-a1-0")
    kube_fake.compact()
    kind, s = next(events)
    assert (kind, s.name) == ("DELETED", "job-42-a1-1")
    kind, s = next(events)
    assert (kind, s.name) == ("MODIFIED", "job-42-a1-0")
    assert watch.relists == 2
    # and it resumes watching from the new list
    kube_fake.touch(NS, "job-42-a1-0")
    kind, s = next(events)
    assert (kind, s.name) == ("MODIFIED", "job-42-a1-0")
    watch.stop()


def test_watch_from_a_stored_resource_version_that_is_too_old(kube_backend, kube_fake, make_podset):
    kube_backend.ensure_pods(make_podset())
    kube_fake.compact()
    gone = pod_state(kube_fake.pod(NS, "job-42-a1"))
    stale = gone.__class__(**{**{f: getattr(gone, f) for f in gone.__slots__}, "name": "job-41-a1", "job_id": 41})
    watch = kube_backend.watch_pods(resource_version="5", known=[stale], timeout_s=1)
    events = iter(watch)
    assert next(events)[0:1] == ("DELETED",)  # the pod the caller knew about is gone
    kind, s = next(events)
    assert (kind, s.name) == ("ADDED", "job-42-a1")
    assert watch.relists == 1
    watch.stop()


def test_watch_backs_off_and_gives_up_without_a_hot_loop(kube_fake, sleeps):
    backend = KubernetesBackend(host=kube_fake.url, qps=0, sleep=sleeps)
    kube_fake.fail_next(100, status=503, path="^/api/v1/pods$")
    watch = backend.watch_pods(resource_version=str(kube_fake.rv), max_failures=4, timeout_s=1)
    with pytest.raises(ClusterUnavailable, match="5 times in a row"):
        list(watch)
    assert sleeps == [0.5, 1.0, 2.0, 4.0]
    assert kube_fake.count("GET", "^/api/v1/pods$") == 5


def test_watch_recovers_after_transient_errors(kube_backend, kube_fake, admitted, sleeps):
    kube_fake.fail_next(2, status=500, path="^/api/v1/pods$")
    watch = kube_backend.watch_pods(resource_version=str(kube_fake.rv), timeout_s=1)
    events = iter(watch)
    kube_fake.run(NS, "job-42-a1")
    kind, s = next(events)
    assert kind == "MODIFIED" and sleeps[:2] == [0.5, 1.0]
    watch.stop()


def test_watch_stop_ends_iteration(kube_backend, kube_fake, admitted):
    stop = threading.Event()
    watch = kube_backend.watch_pods(timeout_s=1, stop=stop)
    seen = []
    for kind, _state in watch:
        seen.append(kind)
        stop.set()
        kube_fake.touch(NS, "job-42-a1")
    assert seen == ["ADDED"]
