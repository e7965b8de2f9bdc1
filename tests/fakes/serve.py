"""The fake Kubernetes API server as a process of its own, with its stand-in kube-scheduler and kubelet running:
what ``make bench-e2e-kube`` targets (``--fake-kube``) to measure the portal's own CPU on the Kubernetes path
without a cluster, and what a developer can point a portal at by hand.

    python -m tests.fakes.serve --port 8861 --nodes 40 --gpus 8 --node-label gpu-type=a100 \\
        --kubeconfig /tmp/fake-kube.yaml
    KUBECONFIG=/tmp/fake-kube.yaml SCHEDULING_BACKEND=kubernetes python manage.py ...

It speaks the REST paths the official client calls and enforces the rules ``tests/fakes/k8s_api.py`` lists;
every ungated pod is bound to a node it fits and started (its command is not run: a pod runs until it is
deleted). It keeps only the last requests it served (a long benchmark would otherwise grow it without end),
answers until SIGTERM or SIGINT, and prints ``ready <url>`` once it listens.
"""

from __future__ import annotations

import argparse
import collections
import signal
import sys
import threading
from pathlib import Path

from tests.fakes.k8s_api import FakeKube, FakeKubeServer

KUBECONFIG = """apiVersion: v1
kind: Config
clusters: [{{name: fake, cluster: {{server: '{url}'}}}}]
users: [{{name: u, user: {{token: x}}}}]
contexts: [{{name: c, context: {{cluster: fake, user: u}}}}]
current-context: c
"""


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, default=0, help="0: any free port (printed)")
    ap.add_argument("--nodes", type=int, default=40)
    ap.add_argument("--gpus", type=int, default=8, help="GPUs per node")
    ap.add_argument("--gpu-resource", default="nvidia.com/gpu")
    ap.add_argument("--node-label", default="gpu-type=a100", help="key=value every node carries ('' for none)")
    ap.add_argument("--kubeconfig", default="", help="write a kubeconfig pointing at the server here")
    ap.add_argument("--history", type=int, default=20000, help="watch events kept (older watches get 410 Gone)")
    ap.add_argument("--every-s", type=float, default=0.05, help="the stand-in scheduler's and kubelet's period")
    args = ap.parse_args(argv)
    if args.nodes < 0 or args.gpus < 0 or args.port < 0:
        ap.error("--nodes, --gpus and --port must not be negative")
    labels = dict([args.node_label.split("=", 1)]) if "=" in args.node_label else {}
    if args.node_label and not labels:
        ap.error("--node-label must be key=value")

    fake = FakeKube(history=args.history)
    fake.requests = collections.deque(maxlen=1000)  # type: ignore[assignment] - append and iterate are all it needs
    for i in range(args.nodes):
        fake.add_node(f"gpu-{i:03d}", gpus=args.gpus, resource=args.gpu_resource,
                      labels={**labels, "kubernetes.io/os": "linux"}, cpu="256", memory="2Ti")
    fake.add_namespace("default", restricted=False)
    server = FakeKubeServer(fake).start(args.port)
    stop = threading.Event()
    fake.autopilot(stop, every_s=args.every_s)
    if args.kubeconfig:
        Path(args.kubeconfig).write_text(KUBECONFIG.format(url=server.url))
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    print(f"ready {server.url}", flush=True)
    stop.wait()
    server.stop()
    sys.exit(0)


if __name__ == "__main__":
    main()
