"""Contract tests: the real ``KubernetesBackend`` over HTTP against the fake API (tests/fakes/k8s_api.py).

Each test names the API server rule it holds the adapter to. Status mapping, watch, logs and
inventory live in the sibling files.
"""

from __future__ import annotations

import pytest

from scheduling.backends.base import BackendError, ClusterUnavailable, InvalidPodSpec
from scheduling.backends.kube import ADMISSION_GATE, GangIncomplete, KubernetesBackend, PodNameTaken
from tests.fakes.k8s_api import SchedulingError
from tests.fakes.k8s_fixtures import INSTALLATION

NS = "team-a"


def created_pod(fake, name="job-42-a1"):
    pod = fake.pod(NS, name)
    assert pod is not None, f"{name} was not created"
    return pod


# ------------------------------------------------------------------------------------------- pod contents


def test_pod_is_gated_with_tier_class_labels_and_annotations(kube_backend, kube_fake, make_podset):
    assert kube_backend.ensure_pods(make_podset()) == {"job-42-a1": "created"}
    pod = created_pod(kube_fake)
    spec, meta = pod["spec"], pod["metadata"]
    assert spec["schedulingGates"] == [{"name": ADMISSION_GATE}]
    assert spec["priorityClassName"] == "ai-elastic"
    assert spec["priority"] == 100000  # resolved by the API server from the existing class
    assert meta["labels"] == {
        "app.kubernetes.io/managed-by": "gpu-portal",
        "gpu-portal.io/installation": INSTALLATION,
        "gpu-portal.io/job-id": "42",
        "gpu-portal.io/attempt": "1",
        "gpu-portal.io/pod-index": "0",
        "gpu-portal.io/department": "vision",
        "gpu-portal.io/tier": "elastic",
        "gpu-portal.io/cluster": "default",
        "ai-task-type": "train",
        "urgency-level": "high",
    }
    assert meta["annotations"]["user-tier"] == "pi"
    assert meta["annotations"]["deadline"] == "2026-12-01T12:00:00+00:00"
    assert meta["annotations"]["gpu-portal.io/bid"] == "250"
    assert spec["restartPolicy"] == "Never"
    assert spec["terminationGracePeriodSeconds"] == 45
    assert spec["activeDeadlineSeconds"] == 7200
    assert pod["status"]["conditions"][0]["reason"] == "SchedulingGated"


def test_pod_is_restricted(kube_backend, kube_fake, make_podset):
    kube_backend.ensure_pods(make_podset())  # accepted by PodSecurity "restricted" in team-a
    spec = created_pod(kube_fake)["spec"]
    assert spec["automountServiceAccountToken"] is False
    assert spec["enableServiceLinks"] is False
    assert not spec["hostNetwork"] and not spec["hostPID"] and not spec["hostIPC"]
    assert "volumes" not in spec
    assert spec["securityContext"]["runAsNonRoot"] is True
    assert spec["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    (container,) = spec["containers"]
    ctx = container["securityContext"]
    assert ctx["allowPrivilegeEscalation"] is False
    assert ctx["privileged"] is False
    assert ctx["capabilities"] == {"drop": ["ALL"]}
    assert ctx["runAsNonRoot"] is True
    assert ctx["seccompProfile"] == {"type": "RuntimeDefault"}
    assert "ports" not in container
    assert container["env"] == [{"name": "EPOCHS", "value": "3"}, {"name": "PORTAL_JOB_ID", "value": "42"},
                                {"name": "PORTAL_ATTEMPT", "value": "1"}]
    assert container["command"] == ["python", "train.py"]


def test_gpu_requests_equal_limits_and_cpu_memory_are_set(kube_backend, kube_fake, make_podset):
    kube_backend.ensure_pods(make_podset(gpu_resource="nvidia.com/mig-3g.40gb", gpus_per_pod=1))
    resources = created_pod(kube_fake)["spec"]["containers"][0]["resources"]
    assert resources["requests"] == resources["limits"] == {
        "cpu": "4000m", "memory": "16384Mi", "nvidia.com/mig-3g.40gb": "1"}


def test_cpu_only_pod_requests_no_gpu(kube_backend, kube_fake, make_podset):
    kube_backend.ensure_pods(make_podset(gpus_per_pod=0, task_type="processing"))
    limits = created_pod(kube_fake)["spec"]["containers"][0]["resources"]["limits"]
    assert set(limits) == {"cpu", "memory"}


def test_node_affinity_requires_the_flavor_labels(kube_backend, kube_fake, make_podset):
    kube_backend.ensure_pods(make_podset(node_labels=(("gpu-type", "a100"), ("nvidia.com/gpu.memory", "81920"))))
    required = created_pod(kube_fake)["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert required == {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "gpu-type", "operator": "In", "values": ["a100"]},
        {"key": "nvidia.com/gpu.memory", "operator": "In", "values": ["81920"]},
    ]}]}


def test_multi_pod_job_gets_indexed_deterministic_names(kube_backend, kube_fake, make_podset):
    result = kube_backend.ensure_pods(make_podset(pods=3))
    assert list(result) == ["job-42-a1-0", "job-42-a1-1", "job-42-a1-2"]
    assert [created_pod(kube_fake, n)["metadata"]["labels"]["gpu-portal.io/pod-index"] for n in result] == ["0", "1", "2"]


def test_label_values_are_sanitised_but_annotations_keep_the_original(kube_backend, kube_fake, make_podset):
    kube_backend.ensure_pods(make_podset(department="Computer Vision / Lab #2"))
    meta = created_pod(kube_fake)["metadata"]
    assert meta["labels"]["gpu-portal.io/department"] == "Computer-Vision-Lab-2"
    assert meta["annotations"]["gpu-portal.io/department"] == "Computer Vision / Lab #2"


# ------------------------------------------------------------------------------------------- create: idempotency


def test_retried_create_adopts_the_existing_pod(kube_backend, kube_fake, make_podset):
    podset = make_podset(pods=2)
    kube_backend.ensure_pods(podset)
    assert kube_backend.ensure_pods(podset) == {"job-42-a1-0": "adopted", "job-42-a1-1": "adopted"}
    assert kube_fake.count("POST", r"/pods$") == 4  # the second round got 409 AlreadyExists twice
    assert len([k for k in kube_fake.pods if k[0] == NS]) == 2


def test_create_that_timed_out_after_being_applied_is_adopted_on_retry(kube_fake, make_podset, sleeps):
    """The worker-died-between-create-and-commit case: the pod exists, the caller never heard back."""
    backend = KubernetesBackend(host=kube_fake.url, qps=0, timeout_s=0.3, sleep=sleeps)
    kube_fake.hang_next(1, seconds=0.8, then="apply", method="POST", path=r"/pods$")
    with pytest.raises(ClusterUnavailable):
        backend.ensure_pods(make_podset())
    assert backend.ensure_pods(make_podset()) == {"job-42-a1": "adopted"}
    assert len([k for k in kube_fake.pods if k[0] == NS]) == 1


def test_a_gang_create_interrupted_halfway_is_completed_on_retry(kube_backend, kube_fake, make_podset):
    podset = make_podset(pods=3, gpus_per_pod=1)
    kube_fake.fail_next(1, status=503, method="POST", path=r"/pods$", after=1)  # pod 0 created, then 503
    with pytest.raises(ClusterUnavailable):
        kube_backend.ensure_pods(podset)
    assert [k[1] for k in kube_fake.pods if k[0] == NS] == ["job-42-a1-0"]
    assert kube_backend.ensure_pods(podset) == {
        "job-42-a1-0": "adopted", "job-42-a1-1": "created", "job-42-a1-2": "created"}


def test_name_taken_by_a_pod_that_is_not_ours_is_refused(kube_backend, kube_fake, make_podset):
    kube_fake.add_foreign_pod(NS, "job-42-a1", node="nowhere")
    with pytest.raises(PodNameTaken):
        kube_backend.ensure_pods(make_podset())


def test_name_taken_by_another_attempt_label_is_refused(kube_backend, kube_fake, make_podset):
    kube_backend.ensure_pods(make_podset())
    kube_fake.pods[(NS, "job-42-a1")]["metadata"]["labels"]["gpu-portal.io/attempt"] = "7"
    with pytest.raises(PodNameTaken):
        kube_backend.ensure_pods(make_podset())


@pytest.mark.parametrize("overrides", [
    {"pods": 0},
    {"gpus_per_pod": -1},
    {"gpu_resource": "gpu"},
    {"image": "bad image"},
    {"env": (("BAD NAME", "x"),)},
    {"pdb_min_available": 5},
])
def test_invalid_podsets_never_reach_the_api(kube_backend, kube_fake, make_podset, overrides):
    with pytest.raises(InvalidPodSpec):
        kube_backend.ensure_pods(make_podset(**overrides))
    assert kube_fake.count("POST") == 0


def test_unknown_priority_class_is_an_invalid_spec(kube_backend, make_podset):
    with pytest.raises(InvalidPodSpec, match="no PriorityClass with name ai-missing"):
        kube_backend.ensure_pods(make_podset(priority_class="ai-missing"))


def test_missing_namespace_is_an_invalid_spec(kube_backend, make_podset):
    with pytest.raises(InvalidPodSpec, match="namespace 'ghost' not found"):
        kube_backend.ensure_pods(make_podset(namespace="ghost"))


def test_run_as_user_none_still_passes_pod_security(kube_fake, make_podset, sleeps):
    backend = KubernetesBackend(host=kube_fake.url, qps=0, run_as_user=None, sleep=sleeps)
    backend.ensure_pods(make_podset())
    assert "runAsUser" not in created_pod(kube_fake)["spec"]["securityContext"]


# ------------------------------------------------------------------------------------------- PDB with the job


def test_pdb_is_created_with_the_job_adopted_on_retry_and_deleted_with_it(kube_backend, kube_fake, make_podset):
    podset = make_podset(pods=2, pdb_min_available=1)
    kube_backend.ensure_pods(podset)
    kube_backend.ensure_pods(podset)
    pdb = kube_fake.pdbs[(NS, "job-42-a1")]
    assert pdb["spec"]["minAvailable"] == 1
    assert pdb["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/managed-by": "gpu-portal", "gpu-portal.io/installation": INSTALLATION,
        "gpu-portal.io/job-id": "42", "gpu-portal.io/attempt": "1"}
    kube_backend.delete_pods(job_id=42, attempt=1, namespace=NS)
    assert (NS, "job-42-a1") not in kube_fake.pdbs
    assert not [k for k in kube_fake.pods if k[0] == NS]


def test_delete_pods_is_idempotent(kube_backend, kube_fake, make_podset):
    kube_backend.delete_pods(job_id=1, attempt=1, namespace=NS)  # nothing there: fine
    kube_backend.ensure_pods(make_podset())
    kube_fake.run(NS, "job-42-a1") if kube_fake.nodes else None
    kube_backend.delete_pods(job_id=42, attempt=1, namespace=NS)
    kube_backend.delete_pods(job_id=42, attempt=1, namespace=NS)
    assert kube_fake.pod(NS, "job-42-a1") is None


def test_disruption_budgets_report_allowed_disruptions(kube_backend, kube_fake, make_podset):
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    podset = make_podset(pods=2, pdb_min_available=1, gpus_per_pod=1)
    kube_backend.ensure_pods(podset)
    kube_backend.admit(podset, ("n1", "n1"))
    kube_fake.run(NS, "job-42-a1-0")
    kube_fake.run(NS, "job-42-a1-1")
    (budget,) = kube_backend.disruption_budgets()
    assert (budget.name, budget.disruptions_allowed) == ("team-a/job-42-a1", 1)


# ------------------------------------------------------------------------------------------- admission


def test_admit_narrows_affinity_to_the_node_and_removes_the_gate(kube_backend, kube_fake, make_podset):
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    kube_fake.add_node("n2", gpus=8, labels={"gpu-type": "a100"})
    podset = make_podset()
    kube_backend.ensure_pods(podset)
    kube_backend.admit(podset, ("n2",))
    pod = created_pod(kube_fake)
    assert pod["spec"]["schedulingGates"] == []
    (term,) = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]
    assert term["matchExpressions"] == [{"key": "gpu-type", "operator": "In", "values": ["a100"]}]
    assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": ["n2"]}]
    with pytest.raises(SchedulingError):
        kube_fake.bind(NS, "job-42-a1", "n1")  # the scheduler may only use the placement
    assert kube_fake.bind(NS, "job-42-a1") == "n2"
    (patch,) = [r for r in kube_fake.requests if r.method == "PATCH"]
    assert patch.content_type == "application/json-patch+json"
    assert patch.body[0] == {"op": "replace", "path": "/metadata/resourceVersion",
                             "value": patch.body[0]["value"]}


def test_admit_without_flavor_labels_creates_the_required_affinity(kube_backend, kube_fake, make_podset):
    kube_fake.add_node("n1", gpus=8)
    podset = make_podset(node_labels=())
    kube_backend.ensure_pods(podset)
    assert "affinity" not in created_pod(kube_fake)["spec"]
    kube_backend.admit(podset, ("n1",))
    assert kube_fake.bind(NS, "job-42-a1") == "n1"


def test_admit_is_idempotent(kube_backend, kube_fake, make_podset):
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    podset = make_podset()
    kube_backend.ensure_pods(podset)
    kube_backend.admit(podset, ("n1",))
    kube_backend.admit(podset, ("n1",))  # gate already gone: done, no second patch
    assert kube_fake.count("PATCH") == 1


def test_admit_retries_when_the_pod_changed_since_it_was_read(kube_backend, kube_fake, make_podset, sleeps):
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    podset = make_podset()
    kube_backend.ensure_pods(podset)
    # Another controller writes the pod between our read and our patch: the patch carries a stale
    # resourceVersion, gets 409 Conflict, we re-read and try again.
    kube_fake.race_next(lambda fake: fake.touch(NS, "job-42-a1"), method="PATCH")
    kube_backend.admit(podset, ("n1",))
    assert created_pod(kube_fake)["spec"]["schedulingGates"] == []
    assert kube_fake.count("PATCH") == 2
    assert kube_fake.count("GET", r"/pods/job-42-a1$") == 1  # the re-read
    assert len(sleeps) == 1 and sleeps[0] < 1.0


def test_admit_conflicts_are_bounded(kube_fake, make_podset, sleeps):
    backend = KubernetesBackend(host=kube_fake.url, qps=0, conflict_retries=3, sleep=sleeps)
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    podset = make_podset()
    backend.ensure_pods(podset)
    kube_fake.race_next(lambda fake: fake.touch(NS, "job-42-a1"), n=100, method="PATCH")
    with pytest.raises(BackendError, match="still conflicting"):
        backend.admit(podset, ("n1",))
    assert kube_fake.count("PATCH") == 4
    assert len(sleeps) == 3 and max(sleeps) <= 1.5  # jittered exponential back-off, capped
    assert created_pod(kube_fake)["spec"]["schedulingGates"] == [{"name": ADMISSION_GATE}]


def test_gang_is_not_ungated_until_every_pod_exists(kube_backend, kube_fake, make_podset):
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    podset = make_podset(pods=3, gpus_per_pod=1)
    kube_backend.ensure_pods(podset)
    kube_fake.finish_termination(NS, "job-42-a1-2")  # one pod is missing (deleted, or never created)
    with pytest.raises(GangIncomplete, match="job-42-a1-2"):
        kube_backend.admit(podset, ("n1", "n1", "n1"))
    assert kube_fake.count("PATCH") == 0
    assert all(created_pod(kube_fake, f"job-42-a1-{i}")["spec"]["schedulingGates"] for i in (0, 1))
    kube_backend.ensure_pods(podset)  # re-create the missing one, then the gang goes together
    kube_backend.admit(podset, ("n1", "n1", "n1"))
    assert not any(created_pod(kube_fake, f"job-42-a1-{i}")["spec"]["schedulingGates"] for i in range(3))


def test_gang_pods_are_narrowed_to_their_own_nodes(kube_backend, kube_fake, make_podset):
    for n in ("n1", "n2"):
        kube_fake.add_node(n, gpus=8, labels={"gpu-type": "a100"})
    podset = make_podset(pods=2, gpus_per_pod=8)
    kube_backend.ensure_pods(podset)
    kube_backend.admit(podset, ("n2", "n1"))
    assert kube_fake.bind(NS, "job-42-a1-0") == "n2"
    assert kube_fake.bind(NS, "job-42-a1-1") == "n1"


def test_admit_rejects_a_placement_of_the_wrong_length(kube_backend, make_podset):
    with pytest.raises(ValueError):
        kube_backend.admit(make_podset(pods=2), ("n1",))


def test_admit_refuses_a_pod_pinned_elsewhere(kube_backend, kube_fake, make_podset):
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    podset = make_podset()
    kube_backend.ensure_pods(podset)
    pod = kube_fake.pods[(NS, "job-42-a1")]
    term = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0]
    term["matchFields"] = [{"key": "metadata.name", "operator": "In", "values": ["n9"]}]
    with pytest.raises(BackendError, match="already pinned"):
        kube_backend.admit(podset, ("n1",))


# ------------------------------------------------------------------------------------------- eviction


def _running_job(backend, fake, podset, nodes):
    for n in sorted(set(nodes)):
        if n not in fake.nodes:
            fake.add_node(n, gpus=8, labels={"gpu-type": "a100"})
    backend.ensure_pods(podset)
    backend.admit(podset, nodes)
    for i in range(podset.pods):
        fake.run(NS, podset.pod_name(i))


def test_evict_uses_the_eviction_api(kube_backend, kube_fake, make_podset):
    _running_job(kube_backend, kube_fake, make_podset(), ("n1",))
    outcome = kube_backend.evict(job_id=42, attempt=1, namespace=NS)
    assert outcome.status == "accepted" and outcome.pods == ("job-42-a1",)
    pod = created_pod(kube_fake)
    assert pod["metadata"]["deletionTimestamp"]
    assert any(c["type"] == "DisruptionTarget" for c in pod["status"]["conditions"])
    assert kube_fake.count("POST", r"/eviction$") == 1
    assert kube_fake.count("DELETE") == 0


def test_evict_blocked_by_a_pdb_reports_blocked_and_never_deletes(kube_backend, kube_fake, make_podset):
    _running_job(kube_backend, kube_fake, make_podset(pods=2, gpus_per_pod=1, pdb_min_available=2), ("n1", "n1"))
    outcome = kube_backend.evict(job_id=42, attempt=1, namespace=NS)
    assert outcome.status == "blocked"
    assert outcome.pods == ("job-42-a1-0",)
    assert "needs 2 healthy pods" in outcome.message
    assert kube_fake.count("DELETE") == 0
    assert all(not created_pod(kube_fake, f"job-42-a1-{i}")["metadata"].get("deletionTimestamp") for i in (0, 1))
    # and again later: still blocked, still no DELETE
    assert kube_backend.evict(job_id=42, attempt=1, namespace=NS).status == "blocked"
    assert kube_fake.count("DELETE") == 0


def test_evict_stops_at_the_first_blocked_pod_of_a_gang(kube_backend, kube_fake, make_podset):
    _running_job(kube_backend, kube_fake, make_podset(pods=2, gpus_per_pod=1, pdb_min_available=1), ("n1", "n1"))
    outcome = kube_backend.evict(job_id=42, attempt=1, namespace=NS)
    assert outcome.status == "blocked" and outcome.pods == ("job-42-a1-1",)
    assert "already evicted: job-42-a1-0" in outcome.message
    assert kube_fake.count("DELETE") == 0


def test_evict_of_gone_pods_reports_gone(kube_backend, kube_fake):
    assert kube_backend.evict(job_id=9, attempt=1, namespace=NS).status == "gone"


def test_evict_is_idempotent_while_the_pod_terminates(kube_backend, kube_fake, make_podset):
    _running_job(kube_backend, kube_fake, make_podset(), ("n1",))
    kube_backend.evict(job_id=42, attempt=1, namespace=NS)
    assert kube_backend.evict(job_id=42, attempt=1, namespace=NS).status == "accepted"
    assert kube_fake.count("POST", r"/eviction$") == 1
    kube_fake.finish_termination(NS, "job-42-a1")
    assert kube_backend.evict(job_id=42, attempt=1, namespace=NS).status == "gone"


def test_evict_of_a_pod_deleted_meanwhile_is_gone(kube_backend, kube_fake, make_podset):
    _running_job(kube_backend, kube_fake, make_podset(), ("n1",))
    kube_fake.race_next(lambda fake: fake.finish_termination(NS, "job-42-a1"), method="POST", path="eviction")
    outcome = kube_backend.evict(job_id=42, attempt=1, namespace=NS)
    assert outcome.status == "gone"
    assert kube_fake.count("DELETE") == 0


# ------------------------------------------------------------------------------------------- failures


def test_5xx_is_cluster_unavailable_without_retry_loops(kube_backend, kube_fake, make_podset):
    kube_fake.fail_next(1, status=500, method="POST")
    with pytest.raises(ClusterUnavailable):
        kube_backend.ensure_pods(make_podset())
    assert kube_fake.count("POST") == 1  # no silent retries: the caller backs off
    kube_backend.ensure_pods(make_podset())
    assert created_pod(kube_fake)


@pytest.mark.parametrize("status", [500, 502, 503, 504])
def test_every_5xx_maps_to_cluster_unavailable(kube_backend, kube_fake, status):
    kube_fake.fail_next(1, status=status)
    with pytest.raises(ClusterUnavailable):
        kube_backend.inventory()


def test_a_hanging_api_times_out_as_cluster_unavailable(kube_fake, make_podset, sleeps):
    backend = KubernetesBackend(host=kube_fake.url, qps=0, timeout_s=0.3, sleep=sleeps)
    kube_fake.hang_next(1, seconds=1.5)
    with pytest.raises(ClusterUnavailable, match="unreachable"):
        backend.inventory()
    assert kube_fake.count() == 1


def test_connection_refused_is_cluster_unavailable(make_podset, sleeps):
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    backend = KubernetesBackend(host=f"http://127.0.0.1:{port}", qps=0, timeout_s=0.5, sleep=sleeps)
    for call in (backend.inventory, lambda: backend.ensure_pods(make_podset()),
                 lambda: backend.evict(job_id=1, attempt=1, namespace=NS)):
        with pytest.raises(ClusterUnavailable):
            call()


def test_api_throttling_429_outside_eviction_is_cluster_unavailable(kube_backend, kube_fake):
    kube_fake.fail_next(1, status=429, path="/api/v1/nodes")
    with pytest.raises(ClusterUnavailable):
        kube_backend.inventory()


def test_client_side_rate_limit_spaces_out_requests(kube_fake, sleeps, make_podset):
    from scheduling.backends.kube.client import TokenBucket

    # The bucket's clock is the test's: it moves only by the waits, so the pacing does not depend on how long
    # the machine takes to send each request.
    clock = [0.0]

    def sleep(seconds):
        sleeps(seconds)
        clock[0] += seconds

    backend = KubernetesBackend(host=kube_fake.url, qps=5, burst=2, sleep=sleeps)
    backend.call.bucket = TokenBucket(qps=5, burst=2, clock=lambda: clock[0], sleep=sleep)
    backend.ensure_pods(make_podset(pods=3))  # 4 POSTs (the gang's Service, 3 pods) with a burst of 2 at 5 qps
    assert sleeps == [pytest.approx(0.2), pytest.approx(0.2)]  # the burst, then one request each 1/5 s


def test_the_client_keeps_as_many_connections_as_it_is_told(kube_fake):
    # Overlapping admissions need one kept connection each: beyond urllib3's pool size (5 per CPU by default)
    # every request would open and close a connection of its own (a TLS handshake each on a real cluster).
    backend = KubernetesBackend(host=kube_fake.url, qps=0, connections=48)
    try:
        assert backend.api_client.rest_client.pool_manager.connection_pool_kw["maxsize"] == 48
    finally:
        backend.close()


def test_the_rate_limit_paces_concurrent_callers_without_holding_them_in_line():
    import threading

    from scheduling.backends.kube.client import TokenBucket

    met = threading.Barrier(3, timeout=10)
    clock = [0.0]

    def sleep(seconds):  # each caller waits for its own token: all three wait at the same time (else: broken)
        met.wait()

    bucket = TokenBucket(qps=10, burst=1, clock=lambda: clock[0], sleep=sleep)
    bucket.acquire()  # the burst is spent
    waits = []
    threads = [threading.Thread(target=lambda: waits.append(bucket.acquire())) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert len(waits) == 3 and -bucket._tokens == pytest.approx(3.0)  # 0.1, 0.2 and 0.3 s: paced at 10/s
