"""The contract scenarios against a real cluster (kind, k3s, ...): ``KUBECONFIG=... pytest -m kube tests/kube``.

Skipped unless ``KUBECONFIG`` is set. Each run creates a namespace ``gpu-portal-test-<random>`` labelled
PodSecurity ``restricted`` and PriorityClasses prefixed with the same random id, and deletes them afterwards.
No GPUs needed: pods request CPU only (``gpus_per_pod=0``) except where a test only checks validation.
Needs: Kubernetes >= 1.30 (scheduling gates GA, mutable scheduling directives) and the image ``busybox:1.36``
pullable by the nodes. See docs/kubernetes.md.

``KUBE_TEST_NO_KUBELET=1``: a control plane whose nodes have no kubelet logs endpoint (a stand-in kubelet that
only binds and runs pods): the logs must then answer ``LogsUnavailable`` with a clear message, never a 500.
``KUBE_TEST_NO_EXEC=1``: the stand-in kubelet does not run the containers' commands (the fake API server), so
what a container would print (a file it wrote on a claim, the size of /dev/shm) is not checked.

The claim test needs a default StorageClass (kind and k3s have one) and is skipped with that reason without.
``KUBE_TEST_NO_CONTAINERS=1``: a stand-in kubelet that runs no containers (the fake API server's): tests that
read what a container printed check the pod spec and that the pod runs instead.
"""

from __future__ import annotations

import json
import os
import time
import uuid
from dataclasses import replace

import pytest

from tests.kube.waiting import wait_for

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(not os.environ.get("KUBECONFIG"), reason="needs a real cluster: set KUBECONFIG"),
]

if os.environ.get("KUBECONFIG"):
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    from scheduling.backends.base import PodSet
    from scheduling.backends.kube import ADMISSION_GATE, KubernetesBackend, PriorityClassNotOwned
    from workloads.values import Mount, PodWorkload

NO_KUBELET = os.environ.get("KUBE_TEST_NO_KUBELET", "") not in ("", "0", "false")
NO_EXEC = NO_KUBELET or os.environ.get("KUBE_TEST_NO_EXEC", "") not in ("", "0", "false")
NO_CONTAINERS = NO_KUBELET or os.environ.get("KUBE_TEST_NO_CONTAINERS", "") not in ("", "0", "false")
RUN = uuid.uuid4().hex[:6]
NS = f"gpu-portal-test-{RUN}"
CLASSES = {f"gpt-{RUN}-realtime": 1000000, f"gpt-{RUN}-elastic": 100000, f"gpt-{RUN}-backfill": 1000}
ELASTIC = f"gpt-{RUN}-elastic"
# The suite is an installation of its own: on a cluster that also runs a portal, it never takes that portal's
# pods for its own, and that portal never takes the suite's.
INSTALLATION = f"gpu-portal-test-{RUN}"


@pytest.fixture(scope="module")
def backend():
    b = KubernetesBackend(kubeconfig=os.environ["KUBECONFIG"], qps=20, burst=40, timeout_s=15, watch_timeout_s=30,
                          installation=INSTALLATION)
    core = k8s.CoreV1Api(b.api_client)
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": NS, "labels": {"pod-security.kubernetes.io/enforce": "restricted",
                               "pod-security.kubernetes.io/enforce-version": "latest"}}})
    b.ensure_priority_classes(CLASSES)
    yield b
    core.delete_namespace(NS, grace_period_seconds=0)
    sched = k8s.SchedulingV1Api(b.api_client)
    for name in [*CLASSES, f"gpt-{RUN}-foreign"]:
        try:
            sched.delete_priority_class(name)
        except ApiException:
            pass
    b.close()


@pytest.fixture(scope="module")
def core(backend):
    return k8s.CoreV1Api(backend.api_client)


@pytest.fixture(scope="module")
def node(core):
    for n in core.list_node().items:
        ready = any(c.type == "Ready" and c.status == "True" for c in n.status.conditions or [])
        control_plane = any(t.effect == "NoSchedule" for t in n.spec.taints or [])
        if ready and not n.spec.unschedulable and not control_plane:
            return n.metadata.name
    pytest.skip("no schedulable worker node")


_JOB_IDS = iter(range(1, 10_000))


def podset(**overrides):
    base = PodSet(
        job_id=next(_JOB_IDS), attempt=1, namespace=NS, department="vision", job_name="real cluster test",
        owner="tester", image="busybox:1.36", command=("sh", "-c", "echo hello from the portal; sleep 3600"),
        env=(), pods=1, gpus_per_pod=0, gpu_resource="nvidia.com/gpu",
        node_labels=(("kubernetes.io/os", "linux"),), cpu_millicores=50, memory_mib=32, tier="elastic",
        priority_class=ELASTIC, max_runtime_s=600, termination_grace_s=5,
    )
    return replace(base, **overrides)


def read(core, name):
    return core.read_namespaced_pod(name, NS)


def raw_patch(core, name, ops):
    try:
        core.patch_namespaced_pod(name, NS, ops)
        return 200
    except ApiException as exc:
        return exc.status


def test_gated_pod_is_accepted_by_pod_security_and_adopted_on_retry(backend, core):
    ps = podset()
    assert backend.ensure_pods(ps) == {ps.pod_name(0): "created"}
    assert backend.ensure_pods(ps) == {ps.pod_name(0): "adopted"}
    pod = read(core, ps.pod_name(0))
    assert [g.name for g in pod.spec.scheduling_gates] == [ADMISSION_GATE]
    assert pod.spec.priority == CLASSES[ELASTIC]
    assert pod.status.phase == "Pending"


def test_admission_narrows_and_the_pod_runs_on_the_placement(backend, core, node):
    ps = podset()
    backend.ensure_pods(ps)
    backend.admit(ps, (node,))
    backend.admit(ps, (node,))  # idempotent
    pod = wait_for(lambda: (p := read(core, ps.pod_name(0))).status.phase == "Running" and p, what="Running")
    assert pod.spec.node_name == node
    assert any(s.name == ps.pod_name(0) and s.phase == "Running" for s in backend.inventory().pods)
    if NO_KUBELET:
        from scheduling.backends.base import LogsUnavailable

        with pytest.raises(LogsUnavailable, match="unavailable|not|waiting"):
            list(backend.logs(job_id=ps.job_id, attempt=1, namespace=NS, tail_lines=5))
        return
    lines = wait_for(lambda: list(backend.logs(job_id=ps.job_id, attempt=1, namespace=NS, tail_lines=5)),
                     timeout=30, what="log lines")
    assert "hello from the portal" in lines


def test_api_server_rules_the_adapter_relies_on(backend, core):
    ps = podset()
    backend.ensure_pods(ps)
    name = ps.pod_name(0)
    rv = read(core, name).metadata.resource_version
    core.patch_namespaced_pod(name, NS, {"metadata": {"labels": {"touched": "yes"}}})
    # stale resourceVersion -> 409, failed JSON-patch test -> 422
    assert raw_patch(core, name, [{"op": "replace", "path": "/metadata/resourceVersion", "value": rv},
                                  {"op": "remove", "path": "/spec/schedulingGates/0"}]) == 409
    assert raw_patch(core, name, [{"op": "test", "path": "/metadata/resourceVersion", "value": rv}]) == 422
    # gates cannot be added; affinity cannot be widened while gated
    assert raw_patch(core, name, [{"op": "add", "path": "/spec/schedulingGates/-",
                                   "value": {"name": "example.com/x"}}]) == 422
    terms = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
    assert raw_patch(core, name, [{"op": "remove", "path": f"{terms}/0/matchExpressions/0"}]) == 422
    # priorityClassName is immutable
    assert raw_patch(core, name, [{"op": "replace", "path": "/spec/priorityClassName",
                                   "value": f"gpt-{RUN}-realtime"}]) == 422


def test_admission_survives_a_concurrent_writer(backend, core, node):
    ps = podset()
    backend.ensure_pods(ps)
    name = ps.pod_name(0)
    original = backend.call.json

    def touching_json(fn, *args, **kwargs):  # a concurrent write right before our first PATCH
        if fn == backend.core.patch_namespaced_pod and not touching_json.done:
            touching_json.done = True
            core.patch_namespaced_pod(name, NS, {"metadata": {"annotations": {"racer": "1"}}})
        return original(fn, *args, **kwargs)

    touching_json.done = False
    backend.call.json = touching_json
    try:
        backend.admit(ps, (node,))
    finally:
        backend.call.json = original
    assert not read(core, name).spec.scheduling_gates


def test_gang_waits_for_every_pod(backend, core, node):
    from scheduling.backends.kube import GangIncomplete

    ps = podset(pods=2)
    backend.ensure_pods(ps)
    core.delete_namespaced_pod(ps.pod_name(1), NS, grace_period_seconds=0)
    wait_for(lambda: not [p for p in core.list_namespaced_pod(NS).items if p.metadata.name == ps.pod_name(1)],
             timeout=30, what="pod 1 gone")
    with pytest.raises(GangIncomplete):
        backend.admit(ps, (node, node))
    assert read(core, ps.pod_name(0)).spec.scheduling_gates


def test_eviction_respects_pdbs_and_never_deletes(backend, core, node):
    guarded = podset(pdb_min_available=1)
    backend.ensure_pods(guarded)
    backend.admit(guarded, (node,))
    wait_for(lambda: read(core, guarded.pod_name(0)).status.phase == "Running", what="Running")
    # the disruption controller must have computed the PDB status first
    wait_for(lambda: backend.disruption_budgets(), timeout=30, what="PDB status")
    outcome = backend.evict(job_id=guarded.job_id, attempt=1, namespace=NS)
    assert outcome.status == "blocked", outcome
    assert read(core, guarded.pod_name(0)).metadata.deletion_timestamp is None

    free = podset()
    backend.ensure_pods(free)
    backend.admit(free, (node,))
    wait_for(lambda: read(core, free.pod_name(0)).status.phase == "Running", what="Running")
    assert backend.evict(job_id=free.job_id, attempt=1, namespace=NS).status == "accepted"
    backend.delete_pods(job_id=guarded.job_id, attempt=1, namespace=NS, grace_period_s=0)


def test_watch_sees_changes(backend, core):
    watch = backend.watch_pods(timeout_s=10)  # list, then watch from the list's version
    ps = podset()
    backend.ensure_pods(ps)
    deadline = time.monotonic() + 60
    seen = None
    for kind, state in watch:
        if state.name == ps.pod_name(0):
            seen = kind
            break
        assert time.monotonic() < deadline, "no watch event for the new pod"
    watch.stop()
    assert seen in ("ADDED", "MODIFIED") and watch.relists == 1


def test_watch_recovers_from_410(backend, core):
    """A watch from a version older than the API server's watch cache gets 410 and re-lists. Whether version 1
    is that old depends on the control plane (a freshly started one still serves it, and nothing a client may
    do compacts its history), so the test skips, saying so, when no 410 came; the fake pins the re-list."""
    watch = backend.watch_pods(resource_version="1", timeout_s=10)
    ps = podset()
    backend.ensure_pods(ps)
    deadline = time.monotonic() + 60
    for _, state in watch:
        if state.name == ps.pod_name(0):
            break
        assert time.monotonic() < deadline, "no watch event for the new pod"
    watch.stop()
    if watch.relists == 0:
        pytest.skip("this API server still serves resourceVersion 1 (its history reaches back that far, as on a "
                    "freshly started control plane): no 410 to recover from; tests/backends covers the re-list")
    assert watch.relists >= 1


def test_restricted_namespace_rejects_unsafe_pods_and_fractional_gpus(backend, core):
    unsafe = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"unsafe-{RUN}"}, "spec": {
        "containers": [{"name": "c", "image": "busybox:1.36", "securityContext": {"privileged": True}}]}}
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod(NS, unsafe)
    assert err.value.status == 403 and "PodSecurity" in json.loads(err.value.body)["message"]
    fractional = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": f"frac-{RUN}"}, "spec": {
        "containers": [{"name": "c", "image": "busybox:1.36",
                        "resources": {"limits": {"example.com/gpu": "500m"}}}]}}
    with pytest.raises(ApiException) as err:
        core.create_namespaced_pod("default", fractional)
    assert err.value.status == 422


def test_priority_class_ownership(backend):
    sched = k8s.SchedulingV1Api(backend.api_client)
    foreign = f"gpt-{RUN}-foreign"
    sched.create_priority_class({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                 "metadata": {"name": foreign}, "value": 10})
    with pytest.raises(PriorityClassNotOwned):
        backend.ensure_priority_classes({foreign: 20})
    assert sched.read_priority_class(foreign).value == 10
    assert backend.ensure_priority_classes(CLASSES) == []


def test_a_job_starts_with_one_call_per_pod_and_binds_to_its_placement(backend, core, node):
    ps = podset()
    made = []
    original = backend.call.json

    def counting_json(fn, *args, **kwargs):
        made.append(fn.__name__)
        return original(fn, *args, **kwargs)

    backend.call.json = counting_json
    try:
        assert backend.start(ps, (node,)) == {ps.pod_name(0): "created"}
    finally:
        backend.call.json = original
    assert made == ["create_namespaced_pod"]
    pod = wait_for(lambda: (p := read(core, ps.pod_name(0))).spec.node_name and p, timeout=60, what="bound")
    assert pod.spec.node_name == node and not pod.spec.scheduling_gates

    gang = podset(pods=2)
    assert set(backend.start(gang, (node, node)).values()) == {"created"}
    for i in range(2):
        wait_for(lambda i=i: read(core, gang.pod_name(i)).spec.node_name == node, timeout=60, what="gang bound")


def test_starts_overlapped_through_one_backend_create_each_pod_once_and_adopt_on_a_second_run(backend, core, node):
    """What a pod worker does with a message's admissions: several starts at once on threads sharing one client
    (its connection pool and rate limit), then the same starts again at once, as when the message is delivered
    a second time after a worker died: the second run adopts what exists (409 AlreadyExists), no duplicate."""
    from concurrent.futures import ThreadPoolExecutor

    sets = [podset() for _ in range(6)] + [podset(pods=2)]

    def start_all():
        with ThreadPoolExecutor(len(sets)) as pool:
            return list(pool.map(lambda ps: backend.start(ps, (node,) * ps.pods), sets))

    assert [set(r.values()) for r in start_all()] == [{"created"}] * len(sets)
    assert [set(r.values()) <= {"adopted", "running"} for r in start_all()] == [True] * len(sets)
    ids = ",".join(str(ps.job_id) for ps in sets)
    names = sorted(p.metadata.name for p in core.list_namespaced_pod(
        NS, label_selector=f"gpu-portal.io/job-id in ({ids})").items)
    assert names == sorted(ps.pod_name(i) for ps in sets for i in range(ps.pods))
    for ps in sets:
        for i in range(ps.pods):
            wait_for(lambda ps=ps, i=i: read(core, ps.pod_name(i)).spec.node_name == node, timeout=60,
                     what="bound")


def test_quota_admission_comes_before_already_exists_and_start_reads_then_decides(backend, core, node):
    """A real API server answers a duplicate create 403 (not 409) once the namespace quota is full: the
    backend must not learn about existence by POSTing, and must adopt the pod all the same."""
    ns = f"{NS}-quota"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": ns, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    try:
        core.create_namespaced_resource_quota(ns, {"apiVersion": "v1", "kind": "ResourceQuota",
                                                   "metadata": {"name": "ceiling"}, "spec": {"hard": {"pods": "1"}}})
        wait_for(lambda: (core.read_namespaced_resource_quota("ceiling", ns).status.hard or {}).get("pods"),
                 timeout=60, what="the quota controller's first sync")
        ps = podset(namespace=ns)
        assert backend.ensure_pods(ps) == {ps.pod_name(0): "created"}  # gated, yet it fills the quota
        wait_for(lambda: (core.read_namespaced_resource_quota("ceiling", ns).status.used or {}).get("pods") == "1",
                 timeout=60, what="quota used")
        from scheduling.backends.kube.podspec import pod_manifest

        with pytest.raises(ApiException) as err:
            core.create_namespaced_pod(ns, pod_manifest(ps, 0))
        assert err.value.status == 403 and "exceeded quota" in json.loads(err.value.body)["message"]
        assert backend.start(ps, (node,)) == {ps.pod_name(0): "adopted"}
        wait_for(lambda: read_in(core, ns, ps.pod_name(0)).spec.node_name == node, timeout=60, what="bound")
        from scheduling.backends.base import QuotaExceeded

        with pytest.raises(QuotaExceeded):
            backend.start(podset(namespace=ns), (node,))
    finally:
        core.delete_namespace(ns, grace_period_seconds=0)


def read_in(core, ns, name):
    return core.read_namespaced_pod(name, ns)


def test_a_terminating_pod_reports_when_its_grace_ends(backend, core, node):
    from scheduling.backends.kube import pod_state

    ps = podset(termination_grace_s=20)
    backend.start(ps, (node,))
    wait_for(lambda: read(core, ps.pod_name(0)).status.phase == "Running", what="Running")
    deleted_at = time.time()
    assert backend.evict(job_id=ps.job_id, attempt=1, namespace=NS).status == "accepted"
    raw = backend.call.json(backend.core.read_namespaced_pod, ps.pod_name(0), NS)
    state = pod_state(raw)
    assert state.deleting and state.reason == "Evicted"
    # deletionTimestamp is when the grace period ends: the GPUs are held until then (or until the pod is gone)
    assert deleted_at + 10 < state.deletion_deadline <= deleted_at + 25


def test_a_gang_that_lost_a_pod_is_cleared_only_through_the_eviction_api(backend, core, node):
    """Someone else evicts pod 0 of a running gang (a drain) while a team's PDB covers pod 1: clearing the
    attempt must ask the Eviction API for pod 1 and take the 429, never DELETE it; once the budget allows it,
    pod 1 goes by eviction."""
    gang = podset(pods=2)
    backend.start(gang, (node, node))
    for i in range(2):
        wait_for(lambda i=i: read(core, gang.pod_name(i)).status.phase == "Running", what=f"pod {i} Running")
    policy = k8s.PolicyV1Api(backend.api_client)
    team = f"team-{gang.job_id}"
    policy.create_namespaced_pod_disruption_budget(NS, {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": team},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": {
            "gpu-portal.io/job-id": str(gang.job_id), "gpu-portal.io/pod-index": "1"}}}})
    wait_for(lambda: (s := policy.read_namespaced_pod_disruption_budget(team, NS).status) is not None
             and s.observed_generation == 1 and s.current_healthy == 1, timeout=60, what="PDB status")
    core.create_namespaced_pod_eviction(gang.pod_name(0), NS, {
        "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": gang.pod_name(0), "namespace": NS}})

    outcome = backend.remove_pods(job_id=gang.job_id, attempt=1, namespace=NS)
    assert outcome.status == "blocked" and outcome.pods == (gang.pod_name(1),), outcome
    assert read(core, gang.pod_name(1)).metadata.deletion_timestamp is None  # still running, not deleted
    again = backend.evict(job_id=gang.job_id, attempt=1, namespace=NS)
    assert again.status == "blocked" and again.partial, again

    policy.delete_namespaced_pod_disruption_budget(team, NS)
    outcome = wait_for(lambda: (o := backend.remove_pods(job_id=gang.job_id, attempt=1, namespace=NS)).status
                       != "blocked" and o, timeout=60, what="the eviction allowed once the PDB is gone")
    pod = read(core, gang.pod_name(1))
    assert pod.metadata.deletion_timestamp is not None
    assert any(c.type == "DisruptionTarget" for c in pod.status.conditions or [])  # evicted, not deleted


def test_a_quota_refusal_names_the_quota_as_read_and_sees_it_change(backend, core, node):
    """A 403 "exceeded quota" carries the namespace's quotas as read (name@resourceVersion, hard, used), the
    version stays put while nothing changes (so the refusal holds), a retry costs one create, and raising the
    quota gives a new version the portal can see."""
    from scheduling.backends.base import QuotaExceeded

    ns = f"{NS}-ceiling"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {
        "name": ns, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
    try:
        core.create_namespaced_resource_quota(ns, {"apiVersion": "v1", "kind": "ResourceQuota",
                                                   "metadata": {"name": "ceiling"}, "spec": {"hard": {"pods": "1"}}})
        wait_for(lambda: (core.read_namespaced_resource_quota("ceiling", ns).status.hard or {}).get("pods"),
                 timeout=60, what="the quota controller's first sync")
        first = podset(namespace=ns)
        backend.start(first, (node,))
        wait_for(lambda: (core.read_namespaced_resource_quota("ceiling", ns).status.used or {}).get("pods") == "1",
                 timeout=60, what="quota used")
        refused = podset(namespace=ns)
        with pytest.raises(QuotaExceeded) as err:
            backend.start(refused, (node,))
        version = backend.namespace_quota_version(ns)
        assert err.value.quota_version == version and version.startswith("ceiling@")
        assert err.value.quotas["ceiling"]["hard"]["pods"] == "1" and err.value.quotas["ceiling"]["used"]["pods"] == "1"
        assert backend.namespace_quota_version(ns) == version  # nothing changed: the refusal holds

        made = []
        original = backend.call.json

        def counting_json(fn, *args, **kwargs):
            made.append(fn.__name__)
            return original(fn, *args, **kwargs)

        backend.call.json = counting_json
        try:
            with pytest.raises(QuotaExceeded):
                backend.start(refused, (node,), fresh=False)  # a retry: one list, one create, the re-read
        finally:
            backend.call.json = original
        assert made.count("create_namespaced_pod") == 1, made

        core.patch_namespaced_resource_quota("ceiling", ns, {"spec": {"hard": {"pods": "2"}}})
        wait_for(lambda: backend.namespace_quota_version(ns) != version, timeout=30, what="a new quota version")
        wait_for(lambda: (core.read_namespaced_resource_quota("ceiling", ns).status.hard or {}).get("pods") == "2",
                 timeout=60, what="the raised quota in force")
        assert backend.start(refused, (node,), fresh=False) == {refused.pod_name(0): "created"}
    finally:
        core.delete_namespace(ns, grace_period_seconds=0)


def _started(backend, core, ps, node):
    backend.start(ps, (node,))
    return wait_for(lambda: (p := read(core, ps.pod_name(0))).status.phase == "Running" and p, what="Running")


def _log(backend, ps, needle):
    return wait_for(lambda: [ln for ln in backend.logs(job_id=ps.job_id, attempt=1, namespace=NS, tail_lines=20)
                             if needle in ln], timeout=60, what=f"a log line with {needle!r}")


def test_a_job_mounts_a_claim_of_its_namespace_read_write(backend, core, node):
    storage = k8s.StorageV1Api(backend.api_client)
    default = [c.metadata.name for c in storage.list_storage_class().items
               if (c.metadata.annotations or {}).get("storageclass.kubernetes.io/is-default-class") == "true"]
    if not default:
        pytest.skip("the cluster has no default StorageClass to provision the test's claim")
    core.create_namespaced_persistent_volume_claim(NS, {
        "apiVersion": "v1", "kind": "PersistentVolumeClaim", "metadata": {"name": "portal-test-data"},
        "spec": {"accessModes": ["ReadWriteOnce"], "resources": {"requests": {"storage": "16Mi"}}}})
    mount = Mount(source="scratch", volume="data-0", claim_name="portal-test-data", path="/data",
                  sub_path="checkpoints/job-1", read_only=False, checkpoint=True)
    ps = podset(command=("sh", "-c", "echo portal-probe > /data/probe && cat /data/probe; sleep 3600"),
                workload=PodWorkload(mounts=(mount,), env=(("PORTAL_CHECKPOINT_DIR", "/data"),)))
    pod = _started(backend, core, ps, node)  # accepted by Pod Security "restricted", bound, running
    [volume] = [v for v in pod.spec.volumes if v.name == "data-0"]
    assert volume.persistent_volume_claim.claim_name == "portal-test-data"
    assert pod.spec.containers[0].volume_mounts[0].sub_path == "checkpoints/job-1"
    if not NO_EXEC:  # the container wrote to the claim through the sub-path and read it back
        assert _log(backend, ps, "portal-probe")


def test_dev_shm_is_a_sized_memory_volume_counted_in_the_memory_request(backend, core, node):
    ps = podset(command=("sh", "-c", "df -k /dev/shm; sleep 3600"), memory_mib=32,
                workload=PodWorkload(shm_mb=16))
    pod = _started(backend, core, ps, node)
    [shm] = [v for v in pod.spec.volumes if v.name == "dshm"]
    assert shm.empty_dir.medium == "Memory" and shm.empty_dir.size_limit == "16Mi"
    resources = pod.spec.containers[0].resources
    assert resources.requests["memory"] == resources.limits["memory"] == "48Mi"
    if not NO_EXEC:  # the tmpfs is the size asked for (Kubernetes >= 1.22 sizes memory-backed volumes)
        [line] = _log(backend, ps, "/dev/shm")
        assert int(line.split()[1]) == 16 * 1024, line


# ------------------------------------------------------------------------------------------- multi-node jobs

# Rank 1 of a gang exits with CODE at once; the other ranks run (a collective that would wait for it forever).
RANK_1_FAILS = '[ "$NODE_RANK" = "1" ] && exit {code}; echo rank $NODE_RANK of $WORLD_SIZE; sleep 3600'


def service_of(core, name):
    try:
        return core.read_namespaced_service(name, NS)
    except ApiException as exc:
        if exc.status == 404:
            return None
        raise


def env_of(pod):
    return {e.name: e.value for e in pod.spec.containers[0].env or []}


def test_a_gang_gets_a_headless_service_and_the_rank_environment(backend, core, node):
    gang = podset(pods=2)
    backend.start(gang, (node, node))
    base = f"job-{gang.job_id}-a1"
    svc = service_of(core, base)
    assert svc is not None and svc.spec.cluster_ip == "None" and svc.spec.publish_not_ready_addresses is True
    assert svc.spec.selector == {"app.kubernetes.io/managed-by": "gpu-portal", "gpu-portal.io/installation": INSTALLATION,
                                 "gpu-portal.io/job-id": str(gang.job_id),
                                 "gpu-portal.io/attempt": "1"}
    for i in range(2):
        pod = wait_for(lambda i=i: (p := read(core, gang.pod_name(i))).status.phase == "Running" and p,
                       what=f"pod {i} Running")  # the restricted namespace admitted it
        assert (pod.spec.hostname, pod.spec.subdomain) == (gang.pod_name(i), base)
        env = env_of(pod)
        assert env["MASTER_ADDR"] == f"{gang.pod_name(0)}.{base}" and env["MASTER_PORT"] == "29500"
        assert (env["WORLD_SIZE"], env["NODE_RANK"], env["RANK"]) == ("2", str(i), str(i))
        assert env["PORTAL_JOB_ID"] == str(gang.job_id) and env["PORTAL_ATTEMPT"] == "1"
    backend.remove_pods(job_id=gang.job_id, attempt=1, namespace=NS)
    assert service_of(core, base) is None


def _failed_rank(backend, gang):
    """The attempt's states once rank 1 has failed (as the portal's sync reads them)."""
    return wait_for(lambda: next((s for s in backend.attempt_pods(job_id=gang.job_id, attempt=gang.attempt,
                                                                     namespace=NS) if s.phase == "Failed"), None),
                    what="rank 1 failed")


def test_one_failed_rank_ends_the_gang_and_its_peer_is_removed(backend, core, node):
    from engine.retries import FailedPod, decide

    gang = podset(pods=2, command=("sh", "-c", RANK_1_FAILS.format(code=1)))
    backend.start(gang, (node, node))
    failed = _failed_rank(backend, gang)
    assert (failed.index, failed.exit_code) == (1, 1)
    decision = decide(FailedPod(failed.index, failed.reason, failed.exit_code, failed.message), max_retries=0,
                      retry_on_exit_codes=(), retries_done=0)
    assert not decision.retry  # the job fails
    wait_for(lambda: read(core, gang.pod_name(0)).status.phase == "Running", what="rank 0 still running")
    outcome = backend.remove_pods(job_id=gang.job_id, attempt=1, namespace=NS)
    assert outcome.status == "accepted", outcome
    peer = read(core, gang.pod_name(0))
    assert peer.metadata.deletion_timestamp is not None  # it gives its node back
    assert service_of(core, f"job-{gang.job_id}-a1") is None


def test_a_listed_exit_code_is_retried_as_a_new_attempt(backend, core, node):
    from engine.retries import FailedPod, decide

    gang = podset(pods=2, command=("sh", "-c", RANK_1_FAILS.format(code=3)))
    backend.start(gang, (node, node))
    failed = _failed_rank(backend, gang)
    decision = decide(FailedPod(failed.index, failed.reason, failed.exit_code, failed.message), max_retries=1,
                      retry_on_exit_codes=(3,), retries_done=0)
    assert decision.retry and decision.cause == "exit_code" and decision.backoff_s == 30
    backend.remove_pods(job_id=gang.job_id, attempt=1, namespace=NS)
    retried = replace(gang, attempt=2, command=("sh", "-c", "echo rank $NODE_RANK retried; sleep 3600"))
    assert set(backend.start(retried, (node, node)).values()) == {"created"}
    for i in range(2):
        pod = wait_for(lambda i=i: (p := read(core, retried.pod_name(i))).status.phase == "Running" and p,
                       what=f"attempt 2 pod {i} Running")
        assert pod.metadata.name == f"job-{gang.job_id}-a2-{i}" and env_of(pod)["PORTAL_ATTEMPT"] == "2"
    assert service_of(core, f"job-{gang.job_id}-a2") is not None
    assert service_of(core, f"job-{gang.job_id}-a1") is None
    backend.remove_pods(job_id=gang.job_id, attempt=2, namespace=NS)


def test_a_department_secret_as_env_and_as_files(backend, core, node):
    """A Secret the portal owns (written by the backend before the pod) as an environment variable, and one
    that already exists in the namespace as read-only files, in one restricted pod without GPUs."""
    from workloads.podsecrets import OwnedSecret, PodSecrets, SecretEnv, SecretFiles

    core.create_namespaced_secret(NS, {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "lab-files"},
                                       "stringData": {"token.txt": f"file-{RUN}"}})
    secrets = PodSecrets(env=(SecretEnv(name="WANDB_API_KEY", secret="portal-secret-wandb", key="api_key"),),
                         files=(SecretFiles(secret="lab-files", path="/etc/secrets/lab"),),
                         owned=(OwnedSecret(name="portal-secret-wandb", data=(("api_key", f"env-{RUN}"),)),))
    script = ('echo "secret-env=$WANDB_API_KEY"; echo "secret-file=$(cat /etc/secrets/lab/token.txt)"; '
              "echo hello from the portal; sleep 3600")
    ps = podset(secrets=secrets, command=("sh", "-c", script))
    backend.start(ps, (node,))
    backend.start(ps, (node,), fresh=False)  # a retried start rewrites nothing and adopts the pod
    owned = core.read_namespaced_secret("portal-secret-wandb", NS)
    assert owned.metadata.labels["app.kubernetes.io/managed-by"] == "gpu-portal"
    pod = wait_for(lambda: (p := read(core, ps.pod_name(0))).status.phase == "Running" and p, what="Running")
    container = pod.spec.containers[0]
    [env] = [e for e in container.env if e.name == "WANDB_API_KEY"]
    assert env.value is None and env.value_from.secret_key_ref.name == "portal-secret-wandb"
    [volume] = [v for v in pod.spec.volumes or [] if v.secret]
    assert volume.secret.secret_name == "lab-files" and volume.secret.default_mode == 0o400
    assert [(m.mount_path, m.read_only) for m in container.volume_mounts if m.name == volume.name] == [
        ("/etc/secrets/lab", True)]
    if NO_CONTAINERS:
        return
    lines = wait_for(lambda: [ln for ln in backend.logs(job_id=ps.job_id, attempt=1, namespace=NS, tail_lines=20)
                              if ln.startswith("secret-")] or None, timeout=60, what="the secrets printed")
    assert f"secret-env=env-{RUN}" in lines and f"secret-file=file-{RUN}" in lines


def test_look_alikes_elsewhere_are_never_the_portals(backend, core, node):
    """A pod with this installation's labels in a namespace the portal does not use, and another
    installation's pod of the same job in the job's namespace: neither is read as the job's, and clearing the
    job's attempt touches neither."""
    from scheduling.backends.kube.podspec import pod_manifest

    ps = podset()
    backend.start(ps, (node,))
    elsewhere = f"{NS}-elsewhere"
    core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": elsewhere}})
    try:
        twin = pod_manifest(ps, 0, installation=backend.installation)
        twin["metadata"]["namespace"] = elsewhere
        core.create_namespaced_pod(elsewhere, twin)
        theirs = pod_manifest(ps, 0, installation=f"another-{RUN}")
        theirs["metadata"]["name"] = f"theirs-{ps.job_id}"
        core.create_namespaced_pod(NS, theirs)
        mine = sorted((p.namespace, p.name) for p in backend.inventory(namespaces={NS}).pods
                      if p.job_id == ps.job_id)
        assert mine == [(NS, ps.pod_name(0))]
        assert [p.name for p in backend.attempt_pods(job_id=ps.job_id, attempt=1, namespace=NS)] == [ps.pod_name(0)]
        backend.delete_pods(job_id=ps.job_id, attempt=1, namespace=NS, grace_period_s=0)
        assert core.read_namespaced_pod(theirs["metadata"]["name"], NS).metadata.deletion_timestamp is None
        assert core.read_namespaced_pod(ps.pod_name(0), elsewhere).metadata.deletion_timestamp is None
        core.delete_namespaced_pod(theirs["metadata"]["name"], NS, grace_period_seconds=0)
        assert [p.name for p in backend.attempt_pods(job_id=ps.job_id, attempt=1, namespace=NS)
                if not p.deleting] == []
    finally:
        core.delete_namespace(elsewhere, grace_period_seconds=0)


def test_a_job_of_two_roles_runs_each_role_with_its_own_size_and_is_removed_whole(backend, core, node):
    """docs/workloads.md, "Shapes": a leader and two workers of another command and size, admitted by the
    restricted namespace, each pod with its role, rank in role and the other role's host names; removed with
    its Service. (No GPU: the roles differ in CPU and memory, which every cluster has.)"""
    from scheduling.backends.base import PodRole

    labels = (("kubernetes.io/os", "linux"),)
    leader = PodRole(name="leader", pods=1, image="", command=(), gpus_per_pod=0, cpu_millicores=50, memory_mib=32,
                     node_labels=labels)
    worker = PodRole(name="worker", pods=2, image="busybox:1.36", command=("sh", "-c", "echo worker; sleep 3600"),
                     gpus_per_pod=0, cpu_millicores=25, memory_mib=16, node_labels=labels, restart_pod=True)
    job = podset(pods=3, roles=(leader, worker))
    backend.start(job, (node, node, node))
    base = f"job-{job.job_id}-a1"
    for i, (role, rank, cpu) in enumerate([("leader", 0, "50m"), ("worker", 0, "25m"), ("worker", 1, "25m")]):
        pod = wait_for(lambda i=i: (p := read(core, job.pod_name(i))).status.phase == "Running" and p,
                       what=f"pod {i} Running")
        assert pod.metadata.labels["gpu-portal.io/role"] == role
        assert pod.spec.containers[0].resources.requests["cpu"] == cpu
        env = env_of(pod)
        assert (env["PORTAL_ROLE"], env["PORTAL_ROLE_RANK"]) == (role, str(rank))
        assert env["PORTAL_ROLE_WORKER_HOSTS"] == f"{job.pod_name(1)}.{base},{job.pod_name(2)}.{base}"
    backend.remove_pods(job_id=job.job_id, attempt=1, namespace=NS)
    assert service_of(core, base) is None


def test_a_notice_reaches_the_running_container_through_the_downward_api_before_the_eviction(backend, core, node):
    """Notice before preemption as a real kubelet shows it: the pod mounts its notice annotation as a file
    (under the restricted profile), ``notify`` sets the annotation on the running pod without touching its
    spec, the container reads the notice from the file it was told of (the kubelet refreshes downward-API files
    on its own sync, within a minute or two), and only then is the pod evicted, still through the Eviction
    API."""
    from scheduling.backends.base import NOTICE_ANNOTATION

    script = ('while true; do echo "notice=$(cat "$PORTAL_NOTICE_FILE" 2>/dev/null)"; sleep 2; done & '
              "echo hello from the portal; wait")
    ps = podset(notice_s=120, notice_answer_url="https://portal.test/api/v1/jobs/1/checkpoint-written",
                notice_token="gpn_1_1_" + "a" * 64, command=("sh", "-c", script))
    backend.start(ps, (node,))
    pod = wait_for(lambda: (p := read(core, ps.pod_name(0))).status.phase == "Running" and p, what="Running")
    env = {e.name: e.value for e in pod.spec.containers[0].env}
    assert env["PORTAL_NOTICE_S"] == "120" and env["PORTAL_NOTICE_FILE"].startswith("/")
    assert NOTICE_ANNOTATION not in (pod.metadata.annotations or {})
    spec_before = pod.spec.to_dict()

    evict_at = '{"evict_at": "2026-12-01T12:02:00+00:00"}'
    assert backend.notify(job_id=ps.job_id, attempt=1, namespace=NS,
                          annotations={NOTICE_ANNOTATION: evict_at}) == (ps.pod_name(0),)
    told = read(core, ps.pod_name(0))
    assert told.metadata.annotations[NOTICE_ANNOTATION] == evict_at
    assert told.spec.to_dict() == spec_before and told.metadata.deletion_timestamp is None  # told, not evicted
    if not NO_CONTAINERS:
        wait_for(lambda: any("2026-12-01T12:02:00" in ln for ln in backend.logs(
            job_id=ps.job_id, attempt=1, namespace=NS, tail_lines=5)), timeout=180,
            what="the notice in the container's file")
    assert backend.evict(job_id=ps.job_id, attempt=1, namespace=NS).status == "accepted"
    gone = read(core, ps.pod_name(0))
    assert gone.metadata.deletion_timestamp is not None
    assert gone.metadata.annotations[NOTICE_ANNOTATION] == evict_at  # the notice stays on the record


def test_fractional_pods_of_both_mechanisms_are_accepted_gated_under_pod_security(backend, core):
    """A HAMi share (one GPU, its memory and compute) and time-slicing replicas (a shared resource) are valid pods
    of the restricted profile; created gated, they need neither HAMi nor the device plugin to be accepted."""
    hami = podset(job_id=9101, gpus_per_pod=1, sharing="hami", gpu_memory_mib=10240, gpu_cores=25)
    replicas = podset(job_id=9102, gpus_per_pod=1, sharing="replicas", gpu_replicas=1,
                      shared_resource="nvidia.com/gpu.shared")
    for ps in (hami, replicas):
        assert backend.ensure_pods(ps) == {ps.pod_name(0): "created"}
    limits = read(core, hami.pod_name(0)).spec.containers[0].resources.limits
    assert (limits["nvidia.com/gpu"], limits["nvidia.com/gpumem"], limits["nvidia.com/gpucores"]) == ("1", "10240", "25")
    assert read(core, replicas.pod_name(0)).spec.containers[0].resources.limits["nvidia.com/gpu.shared"] == "1"


def test_a_failed_worker_of_a_restart_pod_role_is_replaced_alone(backend, core, node):
    """docs/workloads.md, "Failure policy and the end of a job of roles": the failed pod is deleted and made
    again under its name (a new object) while the leader keeps running."""
    from scheduling.backends.base import PodRole

    labels = (("kubernetes.io/os", "linux"),)
    leader = PodRole(name="leader", pods=1, image="", command=(), gpus_per_pod=0, cpu_millicores=50, memory_mib=32,
                     node_labels=labels)
    worker = PodRole(name="worker", pods=1, image="busybox:1.36", command=("sh", "-c", "exit 3"),
                     gpus_per_pod=0, cpu_millicores=25, memory_mib=16, node_labels=labels, restart_pod=True)
    job = podset(pods=2, roles=(leader, worker))
    backend.start(job, (node, node))
    try:
        failed = wait_for(lambda: (p := read(core, job.pod_name(1))).status.phase == "Failed" and p,
                          what="worker Failed")
        running = wait_for(lambda: (p := read(core, job.pod_name(0))).status.phase == "Running" and p,
                           what="leader Running")
        wait_for(lambda: backend.replace_pod(job, 1, (node, node)), what="worker replaced once the old one is gone")
        again = read(core, job.pod_name(1))
        assert again.metadata.uid != failed.metadata.uid
        assert again.metadata.labels["gpu-portal.io/role"] == "worker"
        assert read(core, job.pod_name(0)).metadata.uid == running.metadata.uid
    finally:
        backend.remove_pods(job_id=job.job_id, attempt=1, namespace=NS)


def test_a_resizable_job_grows_and_shrinks_under_gates_budgets_and_the_eviction_api(backend, core, node):
    """A job of 1 to 3 pods (its own budget: 2 available) grows to 3 (the new ranks gated until both exist, then
    running with its PriorityClass, its budget at 2) and shrinks to 2 (rank 2 evicted through the Eviction
    API, asked again while the disruption controller has not seen the budget yet), each running pod told its
    size in its annotation (the size file)."""
    from scheduling.backends.base import SIZE_ANNOTATION

    one = podset(pods=1, min_pods=1, max_pods=3, pdb_min_available=2)
    backend.start(one, (node,))
    base = f"job-{one.job_id}-a1"
    assert one.pod_name(0) == f"{base}-0"  # numbered whatever its size: the names stay across resizes
    wait_for(lambda: read(core, one.pod_name(0)).status.phase == "Running", what="rank 0 Running")
    pdbs = k8s.PolicyV1Api(backend.api_client)
    assert pdbs.read_namespaced_pod_disruption_budget(base, NS).spec.min_available == 1

    three = replace(one, pods=3)
    assert backend.resize(three, (node,), (node, node, node)).status == "done"
    for i in range(3):
        pod = wait_for(lambda i=i: (p := read(core, one.pod_name(i))).status.phase == "Running" and p,
                       what=f"rank {i} Running")
        assert not pod.spec.scheduling_gates and pod.spec.priority_class_name == ELASTIC
        assert pod.spec.subdomain == base
        assert json.loads(pod.metadata.annotations[SIZE_ANNOTATION])["pods"] == 3
    assert env_of(read(core, one.pod_name(2)))["PORTAL_WORLD_SIZE"] == "3"
    assert pdbs.read_namespaced_pod_disruption_budget(base, NS).spec.min_available == 2

    two = replace(one, pods=2)
    wait_for(lambda: backend.resize(two, (node, node, node), (node, node)).status == "done", timeout=120,
             what="rank 2 evicted and gone")
    names = {p.metadata.name for p in core.list_namespaced_pod(NS).items if p.metadata.name.startswith(f"{base}-")}
    assert names == {one.pod_name(0), one.pod_name(1)}
    assert json.loads(read(core, one.pod_name(1)).metadata.annotations[SIZE_ANNOTATION])["pods"] == 2
    backend.remove_pods(job_id=one.job_id, attempt=1, namespace=NS)
