"""The Kubernetes half of ``benchmarks.e2e --backend kubernetes``: the bare scheduler's own rate on the same
control plane (the baseline), the job namespaces of one run, and when each portal job's pod was bound.

Everything here talks to the cluster named by ``KUBECONFIG`` with the official client; nothing runs without it.
"""

from __future__ import annotations

import math
import os
import subprocess
import sys
import tempfile
import time
from datetime import datetime
from pathlib import Path

from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from benchmarks.workers import drain

MANAGED = "app.kubernetes.io/managed-by=gpu-portal"


def api(kubeconfig: str) -> k8s.CoreV1Api:
    cfg = k8s.Configuration()
    k8s_config.load_kube_config(config_file=kubeconfig, client_configuration=cfg)
    return k8s.CoreV1Api(k8s.ApiClient(cfg))


def start_fake(root: Path, *, port: int, nodes: int, gpu_resource: str, node_label: str) -> subprocess.Popen:
    """The fake API server as a process (``tests.fakes.serve``), with ``KUBECONFIG`` of this process (and so of
    every process of the stack) pointing at it once it listens."""
    kubeconfig = Path(tempfile.mkdtemp(prefix="fake-kube-")) / "kubeconfig"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.fakes.serve", "--port", str(port), "--nodes", str(nodes), "--gpu-resource",
         gpu_resource, "--node-label", node_label, "--kubeconfig", str(kubeconfig)],
        cwd=root, stdout=subprocess.PIPE, text=True)
    line = proc.stdout.readline() if proc.stdout else ""
    if not line.startswith("ready "):
        proc.kill()
        raise SystemExit(f"the fake API server did not start (port {port} taken?): {line!r}")
    os.environ["KUBECONFIG"] = str(kubeconfig)
    return proc


def create_namespaces(core: k8s.CoreV1Api, names: list[str]) -> None:
    for name in names:
        core.create_namespace({"apiVersion": "v1", "kind": "Namespace", "metadata": {
            "name": name, "labels": {"pod-security.kubernetes.io/enforce": "restricted",
                                     "app.kubernetes.io/part-of": "gpu-portal-bench"}}})


def delete_namespaces(core: k8s.CoreV1Api, names: list[str]) -> None:
    for name in names:
        try:
            core.delete_namespace(name, grace_period_seconds=0)
        except ApiException as exc:
            if exc.status != 404:
                raise


def _bare_pod(name: str, *, image: str, seconds: int, gpu_resource: str, node_label: tuple[str, str] | None):
    amounts = {"cpu": "10m", "memory": "16Mi", gpu_resource: "1"}
    spec = {
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": 0,
        "automountServiceAccountToken": False,
        "securityContext": {"runAsNonRoot": True, "runAsUser": 1000, "seccompProfile": {"type": "RuntimeDefault"}},
        "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}],
        "containers": [{
            "name": "main", "image": image, "command": ["sh", "-c", f"sleep {seconds}"],
            "resources": {"requests": amounts, "limits": amounts},
            "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
        }],
    }
    if node_label:
        spec["nodeSelector"] = {node_label[0]: node_label[1]}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"bench": "bare"}}, "spec": spec}


def _scheduled_at(pod) -> float | None:
    for cond in (pod.status.conditions or []) if pod.status else []:
        if cond.type == "PodScheduled" and cond.status == "True" and cond.last_transition_time:
            return cond.last_transition_time.timestamp()
    return None


def bare_scheduler_rate(core: k8s.CoreV1Api, *, namespace: str, pods: int, clients: int, image: str, seconds: int,
                        gpu_resource: str, node_label: tuple[str, str] | None, timeout: float) -> dict:
    """Create ``pods`` plain 1-GPU pods (no gates, no portal) from ``clients`` threads and measure how fast
    kube-scheduler binds them: pods/s from the first create to the last PodScheduled=True."""
    start = float(math.floor(time.time()))  # lastTransitionTime has whole seconds: compare like with like

    def create(name):
        core.create_namespaced_pod(namespace, _bare_pod(name, image=image, seconds=seconds,
                                                        gpu_resource=gpu_resource, node_label=node_label))

    drain([f"bare-{i:05d}" for i in range(pods)], create, threads=clients)
    bound: list[float] = []
    while time.time() - start < timeout:
        items = core.list_namespaced_pod(namespace, label_selector="bench=bare").items
        bound = [t for t in (_scheduled_at(p) for p in items) if t is not None]
        if len(bound) >= pods:
            break
        time.sleep(1)
    last = max(bound, default=start)
    return {"pods": pods, "bound": len(bound), "seconds": max(1e-9, last - start),
            "per_s": len(bound) / max(1e-9, last - start)}


def delete_and_wait(core: k8s.CoreV1Api, namespace: str, selector: str, timeout: float = 300) -> None:
    core.delete_collection_namespaced_pod(namespace, label_selector=selector, grace_period_seconds=0)
    end = time.time() + timeout
    while time.time() < end and core.list_namespaced_pod(namespace, label_selector=selector).items:
        time.sleep(1)


def portal_bind_times(core: k8s.CoreV1Api, namespaces: list[str]) -> dict[int, float]:
    """Job id -> when its first attempt's pod 0 was bound (PodScheduled=True), from one list per namespace."""
    out: dict[int, float] = {}
    for ns in namespaces:
        for pod in core.list_namespaced_pod(ns, label_selector=MANAGED).items:
            labels = pod.metadata.labels or {}
            if labels.get("gpu-portal.io/pod-index", "0") != "0":
                continue
            at = _scheduled_at(pod)
            if at is not None:
                job = int(labels["gpu-portal.io/job-id"])
                out[job] = min(at, out.get(job, at))
    return out


def ts(dt: datetime) -> float:
    return dt.timestamp()
