"""A gang's rendezvous on Kubernetes: its headless Service (made with the attempt, before its pods, deleted with
them), the pods' stable DNS names, and the per-rank environment torchrun and DeepSpeed read."""

from __future__ import annotations

import pytest

from scheduling.backends.base import BackendError
from scheduling.backends.kube.podspec import pod_manifest, service_manifest
from tests.fakes.k8s_fixtures import INSTALLATION

NS = "team-a"


@pytest.fixture
def gpu_nodes(kube_fake):
    for i in range(2):
        kube_fake.add_node(f"gpu-{i}", gpus=8, labels={"gpu-type": "a100"})


def env_of(pod) -> dict[str, str]:
    return {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}


def test_a_gang_gets_a_headless_service_and_each_pod_its_rank(kube_backend, kube_fake, make_podset, gpu_nodes):
    gang = make_podset(pods=2, gpus_per_pod=4)
    kube_backend.start(gang, ("gpu-0", "gpu-1"))
    posts = [r.path.rsplit("/", 1)[-1] for r in kube_fake.requests if r.method == "POST"]
    assert posts[0] == "services"  # before the pods: pod 0's name resolves from the start
    svc = kube_fake.services[(NS, "job-42-a1")]
    assert svc["spec"]["clusterIP"] == "None" and svc["spec"]["publishNotReadyAddresses"] is True
    assert svc["spec"]["selector"] == {"app.kubernetes.io/managed-by": "gpu-portal",
                                       "gpu-portal.io/installation": INSTALLATION, "gpu-portal.io/job-id": "42",
                                       "gpu-portal.io/attempt": "1"}
    assert [p["port"] for p in svc["spec"]["ports"]] == [29500]
    for i in range(2):
        pod = kube_fake.pod(NS, f"job-42-a1-{i}")
        assert (pod["spec"]["hostname"], pod["spec"]["subdomain"]) == (f"job-42-a1-{i}", "job-42-a1")
        assert env_of(pod) == {
            "EPOCHS": "3", "PORTAL_JOB_ID": "42", "PORTAL_ATTEMPT": "1",
            "MASTER_ADDR": "job-42-a1-0.job-42-a1", "MASTER_PORT": "29500", "WORLD_SIZE": "2", "RANK": str(i),
            "NODE_RANK": str(i), "PORTAL_WORLD_SIZE": "2", "PORTAL_NODE_RANK": str(i), "PORTAL_NPROC_PER_NODE": "4"}
    assert kube_fake.service_endpoints(NS, "job-42-a1") == ["job-42-a1-0.job-42-a1", "job-42-a1-1.job-42-a1"]


def test_a_single_pod_gets_no_service_and_only_its_job_and_attempt(kube_backend, kube_fake, make_podset, gpu_nodes):
    kube_backend.start(make_podset(attempt=3), ("gpu-0",))
    assert kube_fake.services == {}
    pod = kube_fake.pod(NS, "job-42-a3")
    assert "hostname" not in pod["spec"] and "subdomain" not in pod["spec"]
    assert env_of(pod) == {"EPOCHS": "3", "PORTAL_JOB_ID": "42", "PORTAL_ATTEMPT": "3"}


def test_an_array_task_gets_its_array_id_index_and_count(kube_backend, kube_fake, make_podset, gpu_nodes):
    kube_backend.start(make_podset(array_id=7, array_index=12, array_count=64), ("gpu-0",))
    env = env_of(kube_fake.pod(NS, "job-42-a1"))
    assert {k: env[k] for k in ("PORTAL_ARRAY_ID", "PORTAL_ARRAY_INDEX", "PORTAL_ARRAY_COUNT")} == {
        "PORTAL_ARRAY_ID": "7", "PORTAL_ARRAY_INDEX": "12", "PORTAL_ARRAY_COUNT": "64"}


def test_the_service_goes_with_the_attempt(kube_backend, kube_fake, make_podset, gpu_nodes):
    gang = make_podset(pods=2)
    kube_backend.start(gang, ("gpu-0", "gpu-1"))
    kube_backend.remove_pods(job_id=42, attempt=1, namespace=NS)  # requeued, finished, failed
    assert kube_fake.services == {}
    kube_backend.remove_pods(job_id=42, attempt=1, namespace=NS)  # twice: 404 is fine
    retried = make_podset(pods=2, attempt=2)
    kube_backend.start(retried, ("gpu-0", "gpu-1"))
    assert set(kube_fake.services) == {(NS, "job-42-a2")}
    kube_backend.delete_pods(job_id=42, attempt=2, namespace=NS)  # cancelled
    kube_backend.delete_pods(job_id=42, attempt=2, namespace=NS)
    assert kube_fake.services == {}


def test_a_retried_start_adopts_its_service_but_not_someone_elses(kube_backend, kube_fake, make_podset, gpu_nodes):
    gang = make_podset(pods=2)
    kube_backend.ensure_pods(gang)
    kube_backend.ensure_pods(gang)  # the Service and the pods exist: adopted
    assert set(kube_fake.services) == {(NS, "job-42-a1")}
    foreign = service_manifest(make_podset(pods=2, job_id=7))
    foreign["metadata"]["labels"] = {"app": "theirs"}
    kube_fake.services[(NS, "job-7-a1")] = {**foreign, "metadata": {**foreign["metadata"], "namespace": NS}}
    with pytest.raises(BackendError, match="not this job attempt's"):
        kube_backend.start(make_podset(pods=2, job_id=7), ("gpu-0", "gpu-1"))
    assert kube_fake.pod(NS, "job-7-a1-0") is None  # no pod without its rendezvous


def test_the_manifests_are_restricted_and_name_the_rendezvous(make_podset):
    gang = make_podset(pods=3, gpus_per_pod=8, job_id=9, attempt=2)
    pod = pod_manifest(gang, 2)
    assert pod["spec"]["automountServiceAccountToken"] is False and not pod["spec"]["hostNetwork"]
    env = env_of(pod)
    assert env["MASTER_ADDR"] == "job-9-a2-0.job-9-a2" and env["NODE_RANK"] == "2" and env["WORLD_SIZE"] == "3"
    assert env["PORTAL_NPROC_PER_NODE"] == "8" and env["PORTAL_ATTEMPT"] == "2"
