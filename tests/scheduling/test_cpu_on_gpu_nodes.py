"""CPU work on GPU nodes (docs/workloads.md, "CPU work on GPU nodes"): off by default; switched on for a cluster,
its GPU nodes offer their spare CPU and memory (beyond their GPU pods' requests and a reserve per GPU not held)
to one CPU pool, placements name the real node, and the pods are pinned there without the pool's labels."""

from __future__ import annotations

import pytest

from quotas.models import Flavor, FlavorKind, Quota, QuotaResource
from scheduling.backends.kube.podspec import pod_manifest
from scheduling.models import Job, JobState, Node
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.podsets import podset_for
from scheduling.services.snapshot import build_snapshot

pytestmark = pytest.mark.django_db

CORES, GIB = 64, 512  # each GPU node's allocatable: 4 GPUs, 64 cores, 512 GiB


@pytest.fixture
def cpu_lab(lab):
    """A CPU pool without a node of its own on the cluster; the GPU nodes report their cores and memory."""
    lab.cpu = Flavor.objects.create(name="cpu", kind=FlavorKind.CPU, resource_name="cpu", node_labels={"pool": "cpu"})
    Node.objects.filter(cluster=lab.cluster).update(cpu_millicores=CORES * 1000, memory_mib=GIB * 1024)
    Quota.objects.create(department=lab.vision, flavor=lab.cpu, resource=QuotaResource.CPU, nominal=512)
    return lab


def switch_on(lab, cores=4, gib=32):
    lab.cluster.cpu_on_gpu_nodes = lab.cpu
    lab.cluster.gpu_reserve_cores = cores
    lab.cluster.gpu_reserve_memory_gib = gib
    lab.cluster.save()


def submit(client_for, user, **fields):
    body = {"name": "prep", "image": "python:3.12", "command": ["python", "prep.py"], "flavor": "cpu", "gpus": 0,
            "cpu": "8", "memory": "16Gi", "pods": 1}
    body.update(fields)
    r = client_for(user).post("/api/v1/jobs", body, format="json")
    assert r.status_code == 201, r.json()
    return Job.objects.get(pk=r.json()["id"])


def run(go):
    go(run_cycle)
    go(sync_cluster)


def test_off_by_default_a_cpu_pool_without_nodes_is_refused_and_switched_on_is_offered(cpu_lab, client_for):
    body = {"name": "prep", "image": "python:3.12", "command": ["python", "prep.py"], "flavor": "cpu", "gpus": 0,
            "cpu": "8", "memory": "16Gi"}
    r = client_for(cpu_lab.alice).post("/api/v1/jobs", body, format="json")
    assert r.status_code == 400 and r.json()["error"]["fields"]["flavor"][0]["code"] == "no_nodes"
    switch_on(cpu_lab)
    assert client_for(cpu_lab.alice).post("/api/v1/jobs", body, format="json").status_code == 201


def test_a_data_role_larger_than_any_gpu_nodes_spare_is_a_400_on_its_cores(cpu_lab, client_for):
    switch_on(cpu_lab)
    r = client_for(cpu_lab.alice).post("/api/v1/jobs", {
        "name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "train.py"],
        "flavor": "a100-80gb", "roles": [
            {"name": "trainer", "pods": 1, "gpus": 2, "cpu": "8", "memory": "32Gi"},
            {"name": "data", "pods": 1, "cpu": "49", "memory": "8Gi", "flavor": "cpu"}]}, format="json")
    assert r.status_code == 400, r.json()
    assert r.json()["error"]["fields"]["roles.1.cpu"][0]["code"] == "exceeds_largest_node"


def test_switched_on_a_cpu_job_runs_on_a_gpu_nodes_spare_cpu_under_its_real_name(cpu_lab, client_for, go):
    switch_on(cpu_lab)
    job = submit(client_for, cpu_lab.alice, pods=2, cpu="40", memory="64Gi")
    run(go)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING, (job.state, job.reason_code, job.reason_message)
    assert sorted(job.placement) == ["n0", "n1"]  # 48 spare cores a node (64 - 4 GPUs x 4): one pod each


def test_the_reserve_of_the_gpus_a_gpu_job_frees_is_not_offered(cpu_lab, client_for, go):
    """With 2 GPUs of n0 held by a pod asking 8 cores, n0 offers 64 - 8 - 2 x 4 = 48 cores: a 49-core pod would
    take the reserve of the two free GPUs and waits."""
    switch_on(cpu_lab)
    r = client_for(cpu_lab.alice).post("/api/v1/jobs", {
        "name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "train.py"],
        "flavor": "a100-80gb", "gpus": 2, "pods": 2, "cpu": "8", "memory": "32Gi"}, format="json")
    assert r.status_code == 201
    run(go)
    snapshot, _ = build_snapshot(now=Job.objects.get(pk=r.json()["id"]).started_at)
    assert sorted(n.cpu_m for n in snapshot.nodes if n.name.endswith("+cpu")) == [48_000, 48_000]


def test_memory_reserve_holds_too(cpu_lab, client_for, go):
    switch_on(cpu_lab, gib=64)  # 512 - 4 x 64 = 256 GiB spare, less the pod's 1 GiB of /dev/shm
    job = submit(client_for, cpu_lab.alice, memory="250Gi")
    job2 = submit(client_for, cpu_lab.alice, memory="250Gi")
    job3 = submit(client_for, cpu_lab.alice, memory="8Gi")
    run(go)
    for j in (job, job2, job3):
        j.refresh_from_db()
    assert sorted(job.placement + job2.placement) == ["n0", "n1"]
    assert job3.state == JobState.QUEUED and not job3.placement  # 5 GiB left on each


def test_running_cpu_pods_on_a_gpu_node_count_in_the_next_cycle(cpu_lab, client_for, go):
    switch_on(cpu_lab)
    first = submit(client_for, cpu_lab.alice, pods=2, cpu="48")
    run(go)
    second = submit(client_for, cpu_lab.alice, cpu="1")
    run(go)
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.state == JobState.RUNNING and sorted(first.placement) == ["n0", "n1"]
    assert second.state == JobState.QUEUED and not second.placement


def test_gpu_pods_requests_and_reserve_leave_the_node_within_its_allocatable(cpu_lab, client_for, go):
    """A GPU job asking for more CPU than the reserve per GPU keeps what it asks; CPU work takes only the
    rest, and the GPU job admitted after CPU work still fits beside it."""
    switch_on(cpu_lab)
    r = client_for(cpu_lab.alice).post("/api/v1/jobs", {
        "name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "train.py"],
        "flavor": "a100-80gb", "gpus": 2, "pods": 1, "cpu": "24", "memory": "100Gi"}, format="json")
    assert r.status_code == 201, r.json()
    run(go)
    gpu = Job.objects.get(pk=r.json()["id"])
    assert gpu.state == JobState.RUNNING
    node = gpu.placement[0]
    snapshot, _ = build_snapshot(now=gpu.started_at)
    twin = next(n for n in snapshot.nodes if n.name == node + "+cpu")
    # 64 cores - 24 asked by the GPU pod - 2 free GPUs x 4; 512 GiB - (100 + 1 of /dev/shm) - 2 x 32
    assert (twin.cpu_m, twin.memory_mib, twin.kind, twin.flavor) == (32_000, 347 * 1024, "cpu", "cpu")
    other = submit(client_for, cpu_lab.alice, pods=1, cpu="48")
    cpu_job = submit(client_for, cpu_lab.alice, pods=1, cpu="32", memory="300Gi")
    run(go)
    other.refresh_from_db()
    cpu_job.refresh_from_db()
    assert other.placement == [next(n.name for n in cpu_lab.nodes if n.name != node)]
    assert cpu_job.placement == [node]
    late = client_for(cpu_lab.alice).post("/api/v1/jobs", {
        "name": "train2", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "train.py"],
        "flavor": "a100-80gb", "gpus": 2, "pods": 1, "cpu": "8", "memory": "64Gi"}, format="json")
    run(go)
    late_job = Job.objects.get(pk=late.json()["id"])
    assert late_job.state == JobState.RUNNING
    for name in ("n0", "n1"):  # every node's requests within what it has
        on = [(j, i) for j in Job.objects.filter(state=JobState.RUNNING) for i, n in enumerate(j.placement) if n == name]
        assert sum(j.cpu_millicores for j, _ in on) <= CORES * 1000
        assert sum(j.memory_mib + j.shm_mb for j, _ in on) <= GIB * 1024


def test_the_pod_on_a_gpu_node_is_pinned_by_name_without_the_pool_labels_and_asks_no_gpu(cpu_lab, client_for, go):
    switch_on(cpu_lab)
    job = submit(client_for, cpu_lab.alice)
    run(go)
    job.refresh_from_db()
    podset = podset_for(job)
    assert podset.on_gpu_nodes == (0,)
    pod = pod_manifest(podset, 0, node=job.placement[0])
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert terms["nodeSelectorTerms"] == [{"matchFields": [{"key": "metadata.name", "operator": "In",
                                                            "values": [job.placement[0]]}]}]
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["spec"]["tolerations"]
    requests = pod["spec"]["containers"][0]["resources"]["requests"]
    assert requests == {"cpu": "8000m", "memory": "17408Mi"}  # (16 GiB and its 1 GiB /dev/shm)


def test_a_cpu_pods_pool_node_keeps_its_labels(cpu_lab, client_for, go):
    switch_on(cpu_lab)
    Node.objects.create(cluster=cpu_lab.cluster, name="c0", flavor=cpu_lab.cpu, gpus=0, cpu_millicores=16000,
                        memory_mib=65536, labels={"pool": "cpu"})
    job = submit(client_for, cpu_lab.alice, cpu="12")  # best fit: the CPU node (16 cores) before 48 spare
    run(go)
    job.refresh_from_db()
    assert job.placement == ["c0"]
    podset = podset_for(job)
    assert podset.on_gpu_nodes == ()
    pod = pod_manifest(podset, 0, node="c0")
    term = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"] == [{"key": "pool", "operator": "In", "values": ["cpu"]}]


def test_a_jobs_data_workers_run_beside_its_trainers_on_the_gpu_nodes(cpu_lab, client_for, go):
    switch_on(cpu_lab)
    r = client_for(cpu_lab.alice).post("/api/v1/jobs", {
        "name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "train.py"],
        "flavor": "a100-80gb", "roles": [
            {"name": "trainer", "pods": 2, "gpus": 4, "cpu": "16", "memory": "64Gi"},
            {"name": "data", "pods": 4, "cpu": "20", "memory": "32Gi", "flavor": "cpu"}]}, format="json")
    assert r.status_code == 201, r.json()
    run(go)
    job = Job.objects.get(pk=r.json()["id"])
    assert job.state == JobState.RUNNING, (job.state, job.reason_code, job.reason_message)
    # every GPU held: 64 - 16 = 48 cores left beside each trainer, two 20-core data workers on each node
    assert sorted(job.placement[:2]) == ["n0", "n1"] and sorted(job.placement[2:]) == ["n0", "n0", "n1", "n1"]
    podset = podset_for(job)
    assert podset.on_gpu_nodes == (2, 3, 4, 5)
    trainer = pod_manifest(podset, 0, node=job.placement[0])
    term = trainer["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    assert term["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "gpu-type", "operator": "In", "values": ["a100"]}]
    worker = pod_manifest(podset, 2, node=job.placement[2])
    assert "matchExpressions" not in str(worker["spec"]["affinity"])
    assert "nvidia.com/gpu" not in worker["spec"]["containers"][0]["resources"]["limits"]


def test_a_fraction_of_a_gpu_keeps_the_rest_of_its_gpus_reserve(cpu_lab, client_for, go):
    """Two notebooks of half an A100 each on one node hold one GPU between them: the node's other three GPUs
    and none of the shared one are still reserved (64 - 2 x 4 cores asked - 3 x 4 cores kept = 44)."""
    from quotas.models import GpuSharing

    cpu_lab.a100.sharing = GpuSharing.HAMI
    cpu_lab.a100.save()
    switch_on(cpu_lab)
    ids = []
    for name in ("nb1", "nb2"):
        r = client_for(cpu_lab.alice).post("/api/v1/jobs", {
            "name": name, "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "nb.py"],
            "flavor": "a100-80gb", "gpu_memory_gib": 40, "gpu_cores": 50, "cpu": "4", "memory": "16Gi"},
            format="json")
        assert r.status_code == 201, r.json()
        ids.append(r.json()["id"])
    run(go)
    jobs = list(Job.objects.filter(pk__in=ids))
    assert all(j.state == JobState.RUNNING for j in jobs)
    assert jobs[0].placement == jobs[1].placement and jobs[0].gpu_devices == jobs[1].gpu_devices
    snapshot, _ = build_snapshot(now=jobs[0].started_at)
    twin = next(n for n in snapshot.nodes if n.name == jobs[0].placement[0] + "+cpu")
    assert twin.cpu_m == 64_000 - 2 * 4000 - 3 * 4000


def test_a_maintenance_window_naming_a_gpu_node_closes_its_spare_cpu_too(cpu_lab, client_for, go):
    """A window names the GPU node, not its CPU twin: the twin is closed with it (the node is being serviced)."""
    from datetime import timedelta

    from django.utils import timezone

    from scheduling.models import MaintenanceWindow

    switch_on(cpu_lab)
    now = timezone.now()
    MaintenanceWindow.objects.create(cluster=cpu_lab.cluster, nodes=["n0"], start=now - timedelta(days=1),
                                     end=now + timedelta(days=30), reason="firmware")
    job = submit(client_for, cpu_lab.alice, pods=2, cpu="40", memory="64Gi")  # one pod per node's spare
    run(go)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED, (job.state, job.placement)
    one = submit(client_for, cpu_lab.alice, pods=1, cpu="40", memory="64Gi")
    run(go)
    one.refresh_from_db()
    assert one.state == JobState.RUNNING and one.placement == ["n1"], (one.state, one.reason_message)
