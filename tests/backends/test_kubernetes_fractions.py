"""Fractional GPUs on Kubernetes (docs/fractions.md): a HAMi fraction asks for one GPU with its memory and compute
share and names its shared GPU the way HAMi reads it (``nvidia.com/use-gpuuuid`` for a GPU already shared, keeping
off the node's shared GPUs with ``nvidia.com/nouse-gpuuuid`` when it opens one); a replica fraction asks for the
shared resource; both under the restricted Pod Security profile, which the fake API server enforces."""

from __future__ import annotations

import pytest

from scheduling.backends.kube.podspec import (
    ANNOTATION_GPU_DEVICE,
    HAMI_ALLOCATED,
    HAMI_NOUSE_UUID,
    HAMI_USE_UUID,
)

NS = "team-a"
HAMI = {"gpus_per_pod": 1, "sharing": "hami", "gpu_memory_mib": 20480, "gpu_cores": 30}


@pytest.fixture
def nodes(kube_fake):
    kube_fake.add_node("gpu-0", gpus=8, labels={"gpu-type": "a100"})
    kube_fake.add_node("t4-0", gpus=0, labels={"gpu-type": "a100"}, extra={"nvidia.com/gpu.shared": 8})


def limits(pod) -> dict:
    return pod["spec"]["containers"][0]["resources"]["limits"]


def test_a_hami_fraction_asks_for_one_gpu_its_memory_and_compute(kube_backend, kube_fake, make_podset, nodes):
    podset = make_podset(**HAMI, gpu_devices=(0,))
    kube_backend.start(podset, ("gpu-0",))
    pod = kube_fake.pod(NS, "job-42-a1")
    assert limits(pod) == pod["spec"]["containers"][0]["resources"]["requests"]
    assert (limits(pod)["nvidia.com/gpu"], limits(pod)["nvidia.com/gpumem"], limits(pod)["nvidia.com/gpucores"]) == (
        "1", "20480", "30")
    notes = pod["metadata"]["annotations"]
    assert notes[ANNOTATION_GPU_DEVICE] == "0"
    assert HAMI_USE_UUID not in notes and HAMI_NOUSE_UUID not in notes  # the node shares nothing yet
    sc = pod["spec"]["containers"][0]["securityContext"]
    assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"] == {"drop": ["ALL"]}


def test_the_next_fraction_names_the_shared_gpu_by_its_uuid(kube_backend, kube_fake, make_podset, nodes):
    kube_backend.start(make_podset(**HAMI, gpu_devices=(0,)), ("gpu-0",))
    # HAMi records the device it gave the first pod
    kube_fake._mutate_pod(NS, "job-42-a1", lambda p: p["metadata"]["annotations"].update(
        {HAMI_ALLOCATED: "GPU-aaaa-1111,NVIDIA,20480,30:;"}))
    kube_fake.bind(NS, "job-42-a1")
    kube_backend.start(make_podset(**HAMI, job_id=43, gpu_devices=(0,)), ("gpu-0",))
    assert kube_fake.pod(NS, "job-43-a1")["metadata"]["annotations"][HAMI_USE_UUID] == "GPU-aaaa-1111"
    # a fraction that opens another GPU keeps off the shared one
    kube_backend.start(make_podset(**HAMI, job_id=44, gpu_devices=(1,)), ("gpu-0",))
    notes = kube_fake.pod(NS, "job-44-a1")["metadata"]["annotations"]
    assert notes[HAMI_NOUSE_UUID] == "GPU-aaaa-1111" and HAMI_USE_UUID not in notes


def test_a_replica_fraction_asks_for_the_shared_resource(kube_backend, kube_fake, make_podset, nodes):
    podset = make_podset(gpus_per_pod=1, sharing="replicas", gpu_replicas=2, shared_resource="nvidia.com/gpu.shared")
    kube_backend.start(podset, ("t4-0",))
    pod = kube_fake.pod(NS, "job-42-a1")
    assert limits(pod)["nvidia.com/gpu.shared"] == "2" and "nvidia.com/gpu" not in limits(pod)
    assert kube_fake.bind(NS, "job-42-a1") == "t4-0"


def test_the_fake_refuses_a_share_of_several_gpus(raw_api, kube_fake, make_podset, nodes):
    from kubernetes import client as k8s

    from scheduling.backends.kube.podspec import pod_manifest

    manifest = pod_manifest(make_podset(**HAMI), 0, node="gpu-0", gated=False)
    manifest["spec"]["containers"][0]["resources"] = {"limits": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1024"},
                                                      "requests": {"nvidia.com/gpu": "2", "nvidia.com/gpumem": "1024"}}
    with pytest.raises(k8s.ApiException) as exc:
        k8s.CoreV1Api(raw_api).create_namespaced_pod(NS, manifest)
    assert exc.value.status == 422 and "exactly 1 GPU" in exc.value.body


def test_a_hami_node_counts_its_registered_gpus_not_their_split_units(kube_backend, kube_fake):
    import json

    # HAMi advertises each of the node's 2 GPUs as 10 units of nvidia.com/gpu (deviceSplitCount)
    kube_fake.add_node("hami-0", gpus=20, labels={"gpu-type": "a100"})
    kube_fake.nodes["hami-0"]["metadata"]["annotations"] = {"hami.io/node-nvidia-register": json.dumps(
        [{"id": "GPU-aaaa", "index": 0, "count": 10, "devmem": 81920}, {"id": "GPU-bbbb", "index": 1, "count": 10,
                                                                        "devmem": 81920}])}
    kube_fake.add_node("legacy-0", gpus=30, labels={"gpu-type": "a100"})
    kube_fake.nodes["legacy-0"]["metadata"]["annotations"] = {
        "hami.io/node-nvidia-register": "GPU-1,10,81920,100,NVIDIA-A100,0,true:GPU-2,10,81920,100,NVIDIA-A100,0,true:"
                                        "GPU-3,10,81920,100,NVIDIA-A100,0,true:"}
    kube_fake.add_node("plain-0", gpus=8, labels={"gpu-type": "a100"})
    gpus = {n.name: n.gpus for n in kube_backend.inventory().nodes}
    assert (gpus["hami-0"], gpus["legacy-0"], gpus["plain-0"]) == (2, 3, 8)
