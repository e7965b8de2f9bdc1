"""gunicorn settings for the portal's web process (``gunicorn -c python:portal.gunicorn_conf``).

Prometheus multiprocess mode: every worker writes its metrics to PROMETHEUS_MULTIPROC_DIR and /metrics sums
them, so a counter no longer depends on which worker answers the scrape. The directory is emptied when the
server starts (stale files would be counted again) and a worker's files are marked dead when it exits.
"""

from __future__ import annotations

import os
import shutil

# Loopback by default: a host's portal is reached through its TLS proxy, never on every interface before one
# exists. The container image sets 0.0.0.0:8000 (the pod's network is its own).
bind = os.environ.get("GUNICORN_BIND", "127.0.0.1:8000")
workers = int(os.environ.get("GUNICORN_WORKERS", "3"))
accesslog = "-"
os.environ.setdefault("PROMETHEUS_MULTIPROC_DIR", "/tmp/portal-metrics")  # noqa: S108 - per-container tmpfs


def on_starting(server):
    path = os.environ["PROMETHEUS_MULTIPROC_DIR"]
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path, exist_ok=True)


def child_exit(server, worker):
    from prometheus_client import multiprocess

    multiprocess.mark_process_dead(worker.pid)
