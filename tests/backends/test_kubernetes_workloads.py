"""Data sources, checkpoints and /dev/shm as the Kubernetes adapter renders them, against the fake API server's
rules: only the restricted profile's volume types, a missing claim leaves the pod Pending with the scheduler's
event, /dev/shm is a sized memory emptyDir counted in the memory request, and an expired checkpoint is deleted
by a restricted cleanup pod."""

from __future__ import annotations

import json

import pytest

from scheduling.backends.base import BackendError
from scheduling.backends.kube.checkpoints import CleanupPending
from scheduling.backends.kube.podspec import (
    checkpoint_cleanup_manifest,
    checkpoint_cleanup_name,
    pod_manifest,
)
from tests.fakes.k8s_api import restricted_violations
from tests.fakes.k8s_fixtures import BASE_PODSET
from workloads.values import Mount, PodWorkload


def call(fake, method, path, body=None):
    """One request to the fake API server as the client would send it: (status, body)."""
    response = fake.handle(method, path, {"Content-Type": "application/json"},
                           json.dumps(body).encode() if body is not None else b"")
    return response.status, response.body


def workload(**kw) -> PodWorkload:
    return PodWorkload(
        mounts=(Mount(source="imagenet", volume="data-0", claim_name="imagenet-ro", path="/data"),
                Mount(source="scratch", volume="checkpoint", claim_name="scratch", path="/checkpoint",
                      sub_path="checkpoints/job-42", read_only=False, checkpoint=True)),
        env=(("PORTAL_CHECKPOINT_DIR", "/checkpoint"),), shm_mb=2048, **kw)


def test_sources_become_claims_and_shm_a_sized_memory_emptydir(make_podset):
    pod = pod_manifest(make_podset(workload=workload(), cpu_millicores=4000, memory_mib=16384), 0)
    spec, container = pod["spec"], pod["spec"]["containers"][0]
    assert spec["volumes"] == [
        {"name": "data-0", "persistentVolumeClaim": {"claimName": "imagenet-ro", "readOnly": True}},
        {"name": "checkpoint", "persistentVolumeClaim": {"claimName": "scratch"}},
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "2048Mi"}},
    ]
    assert container["volumeMounts"] == [
        {"name": "data-0", "mountPath": "/data", "readOnly": True},
        {"name": "checkpoint", "mountPath": "/checkpoint", "readOnly": False, "subPath": "checkpoints/job-42"},
        {"name": "dshm", "mountPath": "/dev/shm"},
    ]
    assert {"name": "PORTAL_CHECKPOINT_DIR", "value": "/checkpoint"} in container["env"]
    # the shared memory is charged to the container, so the pod asks for it on top of the job's memory
    assert container["resources"]["requests"]["memory"] == container["resources"]["limits"]["memory"] == "18432Mi"
    assert restricted_violations(spec) == []


def test_a_pod_without_workload_mounts_nothing(make_podset):
    pod = pod_manifest(make_podset(), 0)
    assert "volumes" not in pod["spec"] and "volumeMounts" not in pod["spec"]["containers"][0]
    assert pod["spec"]["containers"][0]["resources"]["limits"]["memory"] == "16384Mi"


@pytest.mark.parametrize("volume", [
    {"nfs": {"server": "nfs.lab", "path": "/export"}},
    {"hostPath": {"path": "/data"}},
    {"gitRepo": {"repository": "https://example.invalid/x"}},
])
def test_the_restricted_profile_refuses_other_volume_types(kube_fake, volume):
    body = pod_manifest(BASE_PODSET, 0)
    body["spec"]["volumes"] = [{"name": "v", **volume}]
    status, answer = call(kube_fake, "POST", "/api/v1/namespaces/team-a/pods", body)
    assert status == 403 and 'violates PodSecurity "restricted:latest"' in answer["message"]
    assert "restricted volume types" in answer["message"]


def test_a_claim_missing_from_the_namespace_leaves_the_pod_pending_with_an_event(kube_backend, kube_fake,
                                                                                  make_podset):
    kube_fake.add_node("gpu-0", gpus=8, labels={"gpu-type": "a100"})
    kube_fake.add_pvc("team-a", "scratch", volume_name="pv-scratch")  # the checkpoint claim exists, imagenet not
    podset = make_podset(workload=workload())
    kube_backend.start(podset, ("gpu-0",))  # the API server accepts the pod: claims are checked at scheduling
    assert kube_fake.pod("team-a", "job-42-a1") is not None
    assert kube_fake.schedule("team-a", "job-42-a1") is None
    pod = kube_fake.pod("team-a", "job-42-a1")
    assert pod["status"]["phase"] == "Pending" and not pod["spec"].get("nodeName")
    cond = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert cond["reason"] == "Unschedulable" and 'persistentvolumeclaim "imagenet-ro" not found' in cond["message"]
    [event] = [e for e in kube_fake.events if e["involvedObject"]["name"] == "job-42-a1"]
    assert event["reason"] == "FailedScheduling" and 'persistentvolumeclaim "imagenet-ro" not found' in event["message"]
    # once the admin creates the claim, the same pod schedules
    kube_fake.add_pvc("team-a", "imagenet-ro", access_modes=("ReadOnlyMany",), volume_name="pv-imagenet")
    assert kube_fake.schedule("team-a", "job-42-a1") == "gpu-0"


def test_claims_are_served_like_the_api_server(kube_fake):
    kube_fake.add_storage_class("standard", default=True)
    status, claim = call(kube_fake, "POST", "/api/v1/namespaces/team-a/persistentvolumeclaims", {
        "metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
                                               "resources": {"requests": {"storage": "16Mi"}}}})
    assert status == 201 and claim["spec"]["storageClassName"] == "standard" and claim["status"]["phase"] == "Bound"
    status, again = call(kube_fake, "POST", "/api/v1/namespaces/team-a/persistentvolumeclaims", {
        "metadata": {"name": "data"}, "spec": {"accessModes": ["ReadWriteOnce"],
                                               "resources": {"requests": {"storage": "16Mi"}}}})
    assert status == 409
    status, bad = call(kube_fake, "POST", "/api/v1/namespaces/team-a/persistentvolumeclaims", {"metadata": {"name": "x"},
                                                                                       "spec": {}})
    assert status == 422
    status, listed = call(kube_fake, "GET", "/api/v1/namespaces/team-a/persistentvolumeclaims")
    assert [c["metadata"]["name"] for c in listed["items"]] == ["data"]


def test_an_expired_checkpoint_is_deleted_by_a_restricted_cleanup_pod(kube_backend, kube_fake):
    kube_fake.add_node("cpu-0", gpus=0)
    kube_fake.add_pvc("team-a", "scratch", volume_name="pv-scratch")
    args = {"namespace": "team-a", "claim_name": "scratch", "storage": "c/scratch",
            "sub_path": "jobs/checkpoints/job-42", "job_id": 42}
    with pytest.raises(CleanupPending):  # first run: the pod is created
        kube_backend.delete_checkpoint(**args)
    name = checkpoint_cleanup_name(42)
    pod = kube_fake.pod("team-a", name)
    assert pod["spec"]["containers"][0]["command"] == ["rm", "-rf", "--", "/volume/jobs/checkpoints/job-42"]
    assert restricted_violations(pod["spec"]) == []
    with pytest.raises(CleanupPending):  # still running: nothing to report yet
        kube_backend.delete_checkpoint(**args)
    kube_fake.run("team-a", name)
    kube_fake.terminate("team-a", name, exit_code=0)
    kube_backend.delete_checkpoint(**args)  # done: the pod is removed and the call returns
    assert kube_fake.pod("team-a", name) is None or kube_fake.pod("team-a", name)["metadata"].get("deletionTimestamp")


def test_a_failed_cleanup_is_reported(kube_backend, kube_fake):
    kube_fake.add_node("cpu-0", gpus=0)
    kube_fake.add_pvc("team-a", "scratch", volume_name="pv-scratch")
    args = {"namespace": "team-a", "claim_name": "scratch", "storage": "c/scratch", "sub_path": "c/job-7",
            "job_id": 7}
    with pytest.raises(CleanupPending):
        kube_backend.delete_checkpoint(**args)
    kube_fake.run("team-a", checkpoint_cleanup_name(7))
    kube_fake.terminate("team-a", checkpoint_cleanup_name(7), exit_code=1)
    with pytest.raises(BackendError, match="failed"):
        kube_backend.delete_checkpoint(**args)


@pytest.mark.parametrize("sub_path", ["", "/etc", "a/../../b", ".."])
def test_the_cleanup_pod_refuses_a_path_outside_the_claim(sub_path):
    with pytest.raises(BackendError):
        checkpoint_cleanup_manifest(namespace="n", claim_name="c", sub_path=sub_path, job_id=1, image="busybox")
