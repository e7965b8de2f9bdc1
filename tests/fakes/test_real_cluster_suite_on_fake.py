"""The real-cluster suite (tests/kube) run against the fake API server with a stand-in scheduler and kubelet,
so that it cannot rot between runs on a real cluster: every scenario it drives must at least hold where the
fake enforces the same rules. With ``KUBE_TEST_NO_KUBELET`` and a log endpoint that fails as the API server's
proxy to a missing kubelet does, the logs must be reported unavailable, not fail."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from tests.fakes.k8s_api import FakeKube, FakeKubeServer

ROOT = Path(__file__).resolve().parents[2]
# The fake settles within its stand-in kubelet's tick (0.1 s): the suite's waits ask it every 0.05 s instead of
# every second, the same questions with the same deadlines (tests/kube/waiting.py).
ASK_OFTEN = {"KUBE_TEST_POLL_S": "0.05"}


@pytest.mark.parametrize("kubelet", [True, False], ids=["kubelet", "kubelet-less"])
def test_the_real_cluster_suite_passes_on_the_fake(tmp_path, kubelet):
    server = FakeKubeServer(FakeKube()).start()
    fake, stop = server.fake, threading.Event()
    try:
        fake.add_node("worker-0", gpus=8, labels={"gpu-type": "a100", "kubernetes.io/os": "linux"})
        fake.add_namespace("default", restricted=False)
        fake.add_storage_class("standard", default=True)  # as kind and k3s ship one
        fake.autopilot(stop, log_line="hello from the portal")
        # the stand-in kubelet binds and runs pods but not their commands
        env = {**os.environ, "KUBECONFIG": str(tmp_path / "kubeconfig"), "KUBE_TEST_NO_EXEC": "1",
               "KUBE_TEST_NO_CONTAINERS": "1", **ASK_OFTEN}
        if not kubelet:
            fake.fail_next(1000, status=500, path="/log$")
            env["KUBE_TEST_NO_KUBELET"] = "1"
        (tmp_path / "kubeconfig").write_text(
            "apiVersion: v1\nkind: Config\n"
            f"clusters: [{{name: fake, cluster: {{server: '{fake.url}'}}}}]\n"
            "users: [{name: u, user: {token: x}}]\n"
            "contexts: [{name: c, context: {cluster: fake, user: u}}]\ncurrent-context: c\n")
        run = subprocess.run([sys.executable, "-m", "pytest", "tests/kube/test_real_cluster.py",
                              "tests/kube/test_session_routes.py", "-q", "-p", "no:django", "-p",
                              "no:cacheprovider"], cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
        assert " passed" in run.stdout and "skipped" not in run.stdout.splitlines()[-1]
    finally:
        stop.set()
        server.stop()
