"""A job of two roles on Kubernetes (docs/workloads.md, "Shapes"): each role's pods with their own image, command,
requests and limits and node affinity (the data workers on the CPU pool, asking for no GPU), under the namespace's
restricted Pod Security profile, which the fake API server enforces; and every pod's role in its labels and env."""

from __future__ import annotations

import pytest

from scheduling.backends.base import PodRole

NS = "team-a"
TRAINER = PodRole(name="trainer", pods=2, image="", command=(), gpus_per_pod=4, cpu_millicores=16000,
                  memory_mib=65536, node_labels=(("gpu-type", "a100"),))
DATA = PodRole(name="data", pods=2, image="registry.lab/loader:1", command=("python", "loader.py"), gpus_per_pod=0,
               cpu_millicores=4000, memory_mib=8192, node_labels=(("pool", "cpu"),), restart_pod=True)


@pytest.fixture
def nodes(kube_fake):
    for i in range(2):
        kube_fake.add_node(f"gpu-{i}", gpus=8, labels={"gpu-type": "a100"})
    kube_fake.add_node("cpu-0", labels={"pool": "cpu"}, cpu="32", memory="128Gi")


def env_of(pod) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def affinity_labels(pod) -> dict[str, str]:
    terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]
    return {e["key"]: e["values"][0] for t in terms["nodeSelectorTerms"] for e in t.get("matchExpressions", [])}


def test_each_role_gets_its_own_pods(kube_backend, kube_fake, make_podset, nodes):
    podset = make_podset(pods=4, gpus_per_pod=4, roles=(TRAINER, DATA))
    kube_backend.start(podset, ("gpu-0", "gpu-1", "cpu-0", "cpu-0"))
    trainers = [kube_fake.pod(NS, f"job-42-a1-{i}") for i in (0, 1)]
    workers = [kube_fake.pod(NS, f"job-42-a1-{i}") for i in (2, 3)]
    for pod in trainers:
        main = pod["spec"]["containers"][0]
        assert main["resources"]["limits"]["nvidia.com/gpu"] == "4"
        assert main["resources"]["requests"]["cpu"] == "16000m"
        assert main["image"] == podset.image and main["command"] == list(podset.command)
        assert pod["metadata"]["labels"]["gpu-portal.io/role"] == "trainer"
        assert affinity_labels(pod) == {"gpu-type": "a100"}
    for rank, pod in enumerate(workers):
        main = pod["spec"]["containers"][0]
        assert "nvidia.com/gpu" not in main["resources"]["limits"]
        assert main["resources"]["requests"] == {"cpu": "4000m", "memory": "8192Mi"} == main["resources"]["limits"]
        assert main["image"] == "registry.lab/loader:1" and main["command"] == ["python", "loader.py"]
        assert pod["metadata"]["labels"]["gpu-portal.io/role"] == "data"
        assert affinity_labels(pod) == {"pool": "cpu"}
        env = env_of(pod)
        assert (env["PORTAL_ROLE"], env["PORTAL_ROLE_RANK"], env["PORTAL_ROLE_SIZE"]) == ("data", str(rank), "2")
        assert env["PORTAL_ROLE_TRAINER_HOSTS"] == "job-42-a1-0.job-42-a1,job-42-a1-1.job-42-a1"
        assert "MASTER_ADDR" not in env
        # the restricted profile holds for every role (the fake refuses anything else with a 403)
        sc = main["securityContext"]
        assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}
        assert pod["spec"]["automountServiceAccountToken"] is False
    env = env_of(trainers[1])
    assert (env["WORLD_SIZE"], env["RANK"], env["MASTER_ADDR"]) == ("2", "1", "job-42-a1-0.job-42-a1")
    assert env["PORTAL_ROLE_DATA_HOSTS"] == "job-42-a1-2.job-42-a1,job-42-a1-3.job-42-a1"
    assert kube_fake.service_endpoints(NS, "job-42-a1") == [f"job-42-a1-{i}.job-42-a1" for i in range(4)]


def test_a_failed_data_worker_is_replaced_alone_under_its_name(kube_backend, kube_fake, make_podset, nodes):
    podset = make_podset(pods=4, gpus_per_pod=4, roles=(TRAINER, DATA))
    placement = ("gpu-0", "gpu-1", "cpu-0", "cpu-0")
    kube_backend.start(podset, placement)
    before = {i: kube_fake.pod(NS, f"job-42-a1-{i}")["metadata"]["uid"] for i in range(4)}
    kube_fake.terminate(NS, "job-42-a1-3", exit_code=1, reason="Error")
    assert kube_backend.replace_pod(podset, 3, placement) is True
    pod = kube_fake.pod(NS, "job-42-a1-3")
    assert pod["metadata"]["uid"] != before[3] and pod["status"].get("phase") != "Failed"
    assert "schedulingGates" not in pod["spec"] or not pod["spec"]["schedulingGates"]  # ungated on its node
    assert env_of(pod)["PORTAL_ROLE_RANK"] == "1" and pod["metadata"]["labels"]["gpu-portal.io/role"] == "data"
    assert {i: kube_fake.pod(NS, f"job-42-a1-{i}")["metadata"]["uid"] for i in range(3)} == {
        i: before[i] for i in range(3)}  # the others untouched


def test_one_pod_is_deleted_at_once_and_a_missing_one_is_fine(kube_backend, kube_fake, make_podset, nodes):
    podset = make_podset(pods=4, gpus_per_pod=4, roles=(TRAINER, DATA))
    placement = ("gpu-0", "gpu-1", "cpu-0", "cpu-0")
    kube_backend.start(podset, placement)
    assert kube_backend.delete_pod(job_id=42, attempt=1, namespace=NS, index=5) is True  # none such: gone
    assert kube_backend.delete_pod(job_id=42, attempt=1, namespace=NS, index=2) is True  # grace 0: gone at once
    assert kube_fake.pod(NS, "job-42-a1-2") is None
