"""CPU work on GPU nodes on Kubernetes (docs/workloads.md, "CPU work on GPU nodes"), against the fake API server:
the inventory reports a GPU node's cores and memory less what others' pods request; a data worker placed on a
GPU node is pinned there by name without its CPU pool's labels, tolerates the GPU taint, asks for no GPU, and
kube-scheduler binds it there beside the trainer."""

from __future__ import annotations

import pytest

from scheduling.backends.base import PodRole

NS = "team-a"
GPU_TAINT = {"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"}
TRAINER = PodRole(name="trainer", pods=2, image="", command=(), gpus_per_pod=4, cpu_millicores=16000,
                  memory_mib=65536, node_labels=(("gpu-type", "a100"),))
DATA = PodRole(name="data", pods=2, image="registry.lab/loader:1", command=("python", "loader.py"), gpus_per_pod=0,
               cpu_millicores=20000, memory_mib=32768, node_labels=(("pool", "cpu"),), restart_pod=True)


@pytest.fixture
def gpu_nodes(kube_fake):
    for i in range(2):
        kube_fake.add_node(f"gpu-{i}", gpus=4, labels={"gpu-type": "a100"}, taints=[GPU_TAINT], cpu="64",
                           memory="512Gi")


def test_the_inventory_reports_a_gpu_nodes_cores_and_memory_less_others_requests(kube_backend, kube_fake,
                                                                                  gpu_nodes):
    kube_fake.add_foreign_pod("monitoring", "dcgm-exporter", node="gpu-0")
    res = kube_fake.pods[("monitoring", "dcgm-exporter")]["spec"]["containers"][0]["resources"]
    res["requests"].update(cpu="1500m", memory="2Gi")
    nodes = {n.name: (n.cpu_m, n.memory_mib) for n in kube_backend.inventory().nodes}
    assert nodes == {"gpu-0": (62_500, 510 * 1024), "gpu-1": (64_000, 512 * 1024)}


@pytest.mark.parametrize("lent", [True, False])
def test_data_workers_on_gpu_nodes_are_bound_there_only_when_placed_as_such(kube_backend, kube_fake, make_podset,
                                                                           gpu_nodes, lent):
    podset = make_podset(pods=4, gpus_per_pod=4, roles=(TRAINER, DATA), on_gpu_nodes=(2, 3) if lent else ())
    kube_backend.start(podset, ("gpu-0", "gpu-1", "gpu-0", "gpu-1"))
    bound = {i: kube_fake.schedule(NS, f"job-42-a1-{i}") for i in range(4)}
    assert (bound[0], bound[1]) == ("gpu-0", "gpu-1")
    worker = kube_fake.pod(NS, "job-42-a1-2")
    main = worker["spec"]["containers"][0]
    assert "nvidia.com/gpu" not in main["resources"]["limits"] and main["resources"]["requests"]["cpu"] == "20000m"
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in worker["spec"]["tolerations"]
    if lent:  # pinned by name alone: the GPU node has no "pool: cpu" label
        assert (bound[2], bound[3]) == ("gpu-0", "gpu-1")
        terms = worker["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
        assert all("matchExpressions" not in t for t in terms["nodeSelectorTerms"])
    else:  # a CPU pool's pod keeps its pool's labels, which no GPU node carries
        assert (bound[2], bound[3]) == (None, None)
