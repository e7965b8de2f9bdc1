"""Starting an admitted job (``KubernetesBackend.start``): its pods are created at admission, pinned to the
placement, in as few API calls as the API's rules allow, and never re-POSTed to find out whether they exist
(quota admission runs before the AlreadyExists check). Also: the scheduler failures and deletion deadlines the
status mapping reports, logs without a kubelet, and evictions refused halfway through a gang."""

from __future__ import annotations

import pytest

from scheduling.backends.base import LogsUnavailable, QuotaExceeded
from scheduling.backends.kube import ADMISSION_GATE
from scheduling.backends.kube.podspec import pinned_nodes
from scheduling.backends.kube.status import pod_state

NS = "team-a"


@pytest.fixture
def gpu_nodes(kube_fake):
    for i in range(2):
        kube_fake.add_node(f"gpu-{i}", gpus=8, labels={"gpu-type": "a100"})


def calls(fake, since):
    return [(r.method, r.path.rsplit("/", 1)[-1] if r.method != "POST" else "POST") for r in fake.requests[since:]]


def test_a_single_pod_is_started_with_one_post_pinned_and_ungated(kube_backend, kube_fake, make_podset, gpu_nodes):
    before = len(kube_fake.requests)
    assert kube_backend.start(make_podset(), ("gpu-1",)) == {"job-42-a1": "created"}
    assert len(kube_fake.requests) - before == 1  # was 5: POST at submit, then POST (409), GET, LIST, PATCH
    pod = kube_fake.pod(NS, "job-42-a1")
    assert not pod["spec"].get("schedulingGates")
    assert pinned_nodes(pod) == {"gpu-1"}
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert terms[0]["matchExpressions"] == [{"key": "gpu-type", "operator": "In", "values": ["a100"]}]
    assert kube_fake.bind(NS, "job-42-a1") == "gpu-1"  # kube-scheduler can only bind it there


def test_a_gang_is_created_gated_then_ungated_without_reads(kube_backend, kube_fake, make_podset, gpu_nodes):
    before = len(kube_fake.requests)
    kube_backend.start(make_podset(pods=2), ("gpu-0", "gpu-1"))
    methods = [r.method for r in kube_fake.requests[before:]]
    # the gang's headless Service, then its pods: no pod of the gang may start before all exist
    assert methods == ["POST", "POST", "POST", "PATCH", "PATCH"]
    for i, node in enumerate(("gpu-0", "gpu-1")):
        pod = kube_fake.pod(NS, f"job-42-a1-{i}")
        assert not pod["spec"].get("schedulingGates") and pinned_nodes(pod) == {node}


def test_a_gang_whose_second_create_fails_starts_no_pod(kube_backend, kube_fake, make_podset, gpu_nodes):
    kube_fake.fail_next(1, status=503, method="POST", path="/pods$", after=1)
    with pytest.raises(Exception):  # noqa: B017 - ClusterUnavailable, retried by the caller
        kube_backend.start(make_podset(pods=2), ("gpu-0", "gpu-1"))
    assert kube_fake.pod(NS, "job-42-a1-0")["spec"]["schedulingGates"] == [{"name": ADMISSION_GATE}]
    before = len(kube_fake.requests)
    kube_backend.start(make_podset(pods=2), ("gpu-0", "gpu-1"), fresh=False)  # the retry reads first
    # the list, the Service (409: adopted after a read), the missing pod, the two ungates
    assert [r.method for r in kube_fake.requests[before:]] == ["GET", "POST", "GET", "POST", "PATCH", "PATCH"]


def test_a_retry_never_reposts_an_existing_pod(kube_backend, kube_fake, make_podset, gpu_nodes):
    kube_fake.add_resource_quota(NS, "ceiling", {"requests.nvidia.com/gpu": "8"})
    kube_backend.start(make_podset(), ("gpu-0",))
    before = len(kube_fake.requests)
    assert kube_backend.start(make_podset(), ("gpu-0",), fresh=False) == {"job-42-a1": "running"}
    assert [r.method for r in kube_fake.requests[before:]] == ["GET"]  # one list, no POST
    assert kube_fake.quota_used(NS, "ceiling")["requests.nvidia.com/gpu"] == 2  # not charged twice


def test_a_full_quota_answers_403_for_an_existing_pod_and_the_backend_reads_then_decides(
        kube_backend, kube_fake, make_podset, gpu_nodes):
    kube_fake.add_resource_quota(NS, "ceiling", {"requests.nvidia.com/gpu": "2"})
    kube_backend.ensure_pods(make_podset())  # a gated pod (created while queued by an older portal)
    # A duplicate POST now gets 403 (quota first), not 409: the backend reads and adopts the pod.
    assert kube_backend.start(make_podset(), ("gpu-0",)) == {"job-42-a1": "adopted"}
    assert [r.method for r in kube_fake.requests[-3:]] == ["POST", "GET", "PATCH"]
    assert not kube_fake.pod(NS, "job-42-a1")["spec"].get("schedulingGates")
    assert kube_backend.ensure_pods(make_podset()) == {"job-42-a1": "adopted"}


def test_a_pod_the_quota_refuses_is_reported_not_retried_blindly(kube_backend, kube_fake, make_podset, gpu_nodes):
    kube_fake.add_resource_quota(NS, "ceiling", {"requests.nvidia.com/gpu": "2"})
    kube_backend.start(make_podset(job_id=1), ("gpu-0",))
    with pytest.raises(QuotaExceeded, match="exceeded quota: ceiling"):
        kube_backend.start(make_podset(job_id=2), ("gpu-1",))
    with pytest.raises(QuotaExceeded):
        kube_backend.ensure_pods(make_podset(job_id=2))
    assert kube_fake.pod(NS, "job-2-a1") is None


def test_start_adopts_a_gated_pod_created_at_submission(kube_backend, kube_fake, make_podset, gpu_nodes):
    kube_backend.ensure_pods(make_podset())
    assert kube_backend.start(make_podset(), ("gpu-0",), fresh=False) == {"job-42-a1": "adopted"}
    pod = kube_fake.pod(NS, "job-42-a1")
    assert not pod["spec"].get("schedulingGates") and pinned_nodes(pod) == {"gpu-0"}


# ------------------------------------------------------------------------------------------- status


def test_every_scheduler_failure_is_reported_with_its_time(kube_backend, kube_fake, make_podset, gpu_nodes):
    kube_backend.start(make_podset(), ("gpu-0",))
    kube_fake.remove_node("gpu-0")
    assert kube_fake.schedule(NS, "job-42-a1") is None
    state = pod_state(kube_fake.pod(NS, "job-42-a1"))
    assert (state.reason, state.message) == ("SchedulerError", 'nodeinfo not found for node name "gpu-0"')
    assert state.since is not None
    kube_fake.mark_unschedulable(NS, "job-42-a1", reason="SomethingNew")
    assert pod_state(kube_fake.pod(NS, "job-42-a1")).reason == "SchedulerError"  # never unmapped


def test_a_terminating_pod_reports_when_it_must_be_gone(kube_backend, kube_fake, make_podset, gpu_nodes):
    kube_backend.start(make_podset(termination_grace_s=30), ("gpu-0",))
    kube_fake.run(NS, "job-42-a1")
    assert kube_backend.evict(job_id=42, attempt=1, namespace=NS).status == "accepted"
    state = pod_state(kube_fake.pod(NS, "job-42-a1"))
    assert state.deleting and state.reason == "Evicted"
    assert state.holds_node(kube_fake.now()) and not state.holds_node(kube_fake.now() + 31)


# ------------------------------------------------------------------------------------------- logs, eviction


def test_logs_without_a_kubelet_are_unavailable_not_an_outage(kube_backend, kube_fake, make_podset, gpu_nodes):
    kube_backend.start(make_podset(), ("gpu-0",))
    kube_fake.run(NS, "job-42-a1")
    kube_fake.fail_next(1, status=500, path="/log$")  # the API server could not reach the node's kubelet
    with pytest.raises(LogsUnavailable, match="unavailable"):
        kube_backend.logs(job_id=42, attempt=1, namespace=NS)


def test_an_eviction_refused_halfway_through_a_gang_is_partial(kube_backend, kube_fake, make_podset, gpu_nodes):
    kube_backend.start(make_podset(pods=2), ("gpu-0", "gpu-1"))
    for i in range(2):
        kube_fake.run(NS, f"job-42-a1-{i}")
    kube_fake.add_pdb(NS, "second", {"minAvailable": 1, "selector": {"matchLabels": {"gpu-portal.io/pod-index": "1"}}})
    outcome = kube_backend.evict(job_id=42, attempt=1, namespace=NS)
    assert (outcome.status, outcome.partial, outcome.pods) == ("blocked", True, ("job-42-a1-1",))
    assert kube_fake.count("DELETE") == 0
    kube_fake.pdbs.clear()
    assert kube_backend.evict(job_id=42, attempt=1, namespace=NS).status == "accepted"


def test_a_refusal_before_any_pod_went_is_not_partial(kube_backend, kube_fake, make_podset, gpu_nodes):
    kube_backend.start(make_podset(pods=2), ("gpu-0", "gpu-1"))
    for i in range(2):
        kube_fake.run(NS, f"job-42-a1-{i}")
    kube_fake.add_pdb(NS, "all", {"minAvailable": 2, "selector": {"matchLabels": {"gpu-portal.io/job-id": "42"}}})
    outcome = kube_backend.evict(job_id=42, attempt=1, namespace=NS)
    assert (outcome.status, outcome.partial) == ("blocked", False)
