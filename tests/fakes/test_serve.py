"""The fake API server as a process (what ``make bench-e2e-kube FAKE_KUBE=1`` targets): it listens, writes a
kubeconfig the official client loads, serves its nodes, binds and starts an ungated pod by itself, and ends on
SIGTERM; bad arguments are refused with a message."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from kubernetes import client as k8s
from kubernetes import config as k8s_config

from tests.kube.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]


def test_the_fake_runs_as_a_process_the_official_client_reaches(tmp_path):
    kubeconfig = tmp_path / "kubeconfig"
    proc = subprocess.Popen([sys.executable, "-m", "tests.fakes.serve", "--nodes", "2", "--gpus", "4",
                             "--kubeconfig", str(kubeconfig)], cwd=ROOT, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().startswith("ready http://127.0.0.1:")
        cfg = k8s.Configuration()
        k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
        core = k8s.CoreV1Api(k8s.ApiClient(cfg))
        nodes = core.list_node().items
        assert [(n.metadata.name, n.status.allocatable["nvidia.com/gpu"]) for n in nodes] == [
            ("gpu-000", "4"), ("gpu-001", "4")]
        amounts = {"nvidia.com/gpu": "1"}
        core.create_namespaced_pod("default", {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p"},
                                               "spec": {"containers": [{"name": "c", "image": "busybox",
                                                                        "resources": {"requests": amounts,
                                                                                      "limits": amounts}}]}})
        pod = wait_for(lambda: (p := core.read_namespaced_pod("p", "default")).status.phase == "Running" and p,
                       timeout=30, step=0.1, what="the stand-in scheduler and kubelet")
        assert pod.spec.node_name in ("gpu-000", "gpu-001")
    finally:
        proc.terminate()
        assert proc.wait(30) == 0


def test_bad_arguments_are_refused():
    run = subprocess.run([sys.executable, "-m", "tests.fakes.serve", "--node-label", "no-equals-sign"], cwd=ROOT,
                         capture_output=True, text=True, timeout=60)
    assert run.returncode == 2 and "--node-label must be key=value" in run.stderr
