"""Several real clusters at once: ``KUBECONFIGS=a.yaml:b.yaml pytest -m kube tests/kube`` (paths separated by
``:``, as in ``KUBECONFIG``; one kubeconfig per cluster). Skipped unless at least two are given. Each cluster
gets its own namespace ``gpu-portal-fed-<random>`` and PriorityClasses, deleted afterwards; no GPUs needed.

What it checks where only a real API server can: each backend, built from its own kubeconfig, creates its pods
on its own cluster, lists only that cluster's pods, and a retried create adopts the pod instead of making a
second one (what a worker restart does).
"""

from __future__ import annotations

import os
import uuid

import pytest

PATHS = [p for p in os.environ.get("KUBECONFIGS", "").split(os.pathsep) if p]

pytestmark = [
    pytest.mark.kube,
    pytest.mark.skipif(len(PATHS) < 2, reason="needs two clusters: set KUBECONFIGS=a.yaml:b.yaml"),
]

RUN = uuid.uuid4().hex[:6]
NS = f"gpu-portal-fed-{RUN}"
CLASSES = {f"gpf-{RUN}-realtime": 1000000, f"gpf-{RUN}-elastic": 100000, f"gpf-{RUN}-backfill": 1000}


@pytest.fixture(scope="module")
def backends():
    from kubernetes import client as k8s
    from kubernetes.client.exceptions import ApiException

    from scheduling.backends.kube import KubernetesBackend

    made = []
    for i, path in enumerate(PATHS):
        b = KubernetesBackend(name=f"cluster-{i}", kubeconfig=path, qps=20, burst=40, timeout_s=15,
                              installation=f"gpu-portal-test-{RUN}")
        k8s.CoreV1Api(b.api_client).create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": NS, "labels": {"pod-security.kubernetes.io/enforce": "restricted"}}})
        b.ensure_priority_classes(CLASSES)
        made.append(b)
    yield made
    for b in made:
        k8s.CoreV1Api(b.api_client).delete_namespace(NS, grace_period_seconds=0)
        for name in CLASSES:
            try:
                k8s.SchedulingV1Api(b.api_client).delete_priority_class(name)
            except ApiException:
                pass
        b.close()


def podset(job_id: int):
    from scheduling.backends.base import PodSet

    return PodSet(job_id=job_id, attempt=1, namespace=NS, department="vision", job_name="several clusters",
                  owner="tester", image="busybox:1.36", command=("sh", "-c", "sleep 3600"), env=(), pods=1,
                  gpus_per_pod=0, gpu_resource="nvidia.com/gpu", node_labels=(("kubernetes.io/os", "linux"),),
                  cpu_millicores=50, memory_mib=32, tier="elastic", priority_class=f"gpf-{RUN}-elastic",
                  max_runtime_s=600, termination_grace_s=5)


def test_each_cluster_gets_and_lists_only_its_own_pods(backends):
    ids = [990_000 + i for i in range(len(backends))]
    for b, job_id in zip(backends, ids, strict=True):
        b.ensure_pods(podset(job_id))
        b.ensure_pods(podset(job_id))  # a restarted worker's retry: adopted, not a second pod
    for b, job_id in zip(backends, ids, strict=True):
        mine = sorted(p.name for p in b.list_pods() if p.namespace == NS)
        assert mine == [f"job-{job_id}-a1"], (b.name, mine)
