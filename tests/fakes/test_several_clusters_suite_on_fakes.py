"""The several-clusters suite (tests/kube/test_several_clusters.py) run against two fake API servers, each with a
stand-in scheduler and kubelet, so that it cannot rot between runs on real clusters. A file apart from the
single-cluster runs (``test_real_cluster_suite_on_fake.py``), so that ``--dist loadfile`` can run it beside
them: each waits mostly on a pytest of its own in a subprocess."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from tests.fakes.k8s_api import FakeKube, FakeKubeServer
from tests.fakes.test_real_cluster_suite_on_fake import ASK_OFTEN, ROOT


def test_the_several_clusters_suite_passes_on_two_fakes(tmp_path):
    servers = [FakeKubeServer(FakeKube()).start() for _ in range(2)]
    stop = threading.Event()
    try:
        paths = []
        for i, server in enumerate(servers):
            fake = server.fake
            fake.add_node("worker-0", gpus=8, labels={"kubernetes.io/os": "linux"})
            fake.autopilot(stop)
            path = tmp_path / f"kubeconfig-{i}"
            path.write_text(
                "apiVersion: v1\nkind: Config\n"
                f"clusters: [{{name: fake, cluster: {{server: '{fake.url}'}}}}]\n"
                "users: [{name: u, user: {token: x}}]\n"
                "contexts: [{name: c, context: {cluster: fake, user: u}}]\ncurrent-context: c\n")
            paths.append(str(path))
        env = {**os.environ, "KUBECONFIGS": os.pathsep.join(paths), **ASK_OFTEN}
        env.pop("KUBECONFIG", None)
        run = subprocess.run([sys.executable, "-m", "pytest", "tests/kube/test_several_clusters.py", "-q", "-p",
                              "no:django", "-p", "no:cacheprovider"], cwd=ROOT, env=env, capture_output=True,
                             text=True, timeout=300)
        assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
        assert "1 passed" in run.stdout
        for server in servers:  # each fake was asked for its own pod (twice: created, then adopted)
            assert server.fake.count("POST", "/namespaces/gpu-portal-fed-[0-9a-f]+/pods$") == 2
    finally:
        stop.set()
        for server in servers:
            server.stop()
