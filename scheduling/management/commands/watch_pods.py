"""Follow the portal's pods in the clusters and move their jobs (the Kubernetes backends' status feed).

Without ``--cluster`` it watches every Kubernetes cluster registered, one thread each (clusters registered
later are picked up within a minute). One active watcher per cluster: each thread waits for that cluster's
"pod-watcher-<name>" lock, so running the command on several hosts gives a hot standby, not duplicate work, and
one cluster that is down only stalls its own thread. A watch that expires (410 Gone) re-lists and resumes; a
restart re-lists, and the reconciler covers anything missed while no watcher ran.
"""

from __future__ import annotations

import logging
import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections, connection

from portal.heartbeat import touch
from scheduling.backends import cluster_kind, get_backend
from scheduling.backends.base import ClusterUnavailable
from scheduling.models import Cluster
from scheduling.services.locks import exclusive
from scheduling.services.pod_states import apply_pod_deleted, apply_pod_states

log = logging.getLogger(__name__)


class Command(BaseCommand):
    help = "Watch the portal's pods and apply their states to jobs (one active instance at a time)."

    def add_arguments(self, parser):
        parser.add_argument("--cluster", default=None, help="Watch only this cluster (default: every Kubernetes "
                                                              "cluster, one thread each).")
        parser.add_argument("--max-events", type=int, default=0, help="Stop after N events (tests).")
        parser.add_argument("--lock-wait-s", type=float, default=5.0, help="Seconds between lock attempts.")

    def handle(self, *args, cluster, max_events, lock_wait_s, **options):
        stop = threading.Event()
        _keep_alive(stop)
        for sig in (signal.SIGTERM, signal.SIGINT):
            try:
                signal.signal(sig, lambda *_: stop.set())
            except ValueError:  # not the main thread (tests)
                pass
        if cluster is not None:
            self.watch_one(cluster, stop, max_events, lock_wait_s)
            return
        threads: dict[str, threading.Thread] = {}
        while not stop.is_set():  # a thread per Kubernetes cluster, new clusters picked up as they come
            close_old_connections()
            for row in Cluster.objects.order_by("name"):
                if cluster_kind(row) == "kubernetes" and not (row.name in threads and threads[row.name].is_alive()):
                    threads[row.name] = threading.Thread(
                        target=self.watch_one, args=(row.name, stop, max_events, lock_wait_s),
                        name=f"watch-{row.name}", daemon=True)
                    threads[row.name].start()
            if max_events:
                for t in threads.values():
                    t.join()
                return
            stop.wait(60)

    def watch_one(self, cluster: str, stop: threading.Event, max_events: int, lock_wait_s: float) -> None:
        try:
            while not stop.is_set():
                with exclusive(f"pod-watcher-{cluster}") as acquired:
                    if acquired:
                        self.stdout.write(f"watching pods of cluster {cluster!r}")
                        n = watch(cluster=cluster, stop=stop, max_events=max_events)
                        self.stdout.write(f"watch of {cluster!r} ended after {n} events")
                        if max_events:
                            return
                        continue
                stop.wait(lock_wait_s)
        finally:
            if threading.current_thread() is not threading.main_thread():
                connection.close()


def _keep_alive(stop: threading.Event) -> None:
    """Touch DATA_DIR/watcher.alive every 10 s while the command runs (its liveness probe reads the age)."""
    path = str(settings.DATA_DIR / "watcher.alive")

    def beat():
        while not stop.wait(10):
            touch(path)

    touch(path)
    threading.Thread(target=beat, name="watcher-heartbeat", daemon=True).start()


def watch(*, cluster: str, stop: threading.Event, max_events: int = 0) -> int:
    """Apply one cluster's pod events until ``stop`` is set (or ``max_events``); returns the number applied.
    Only jobs bound to that cluster move."""
    n = 0
    while not stop.is_set():
        try:
            row = Cluster.objects.filter(name=cluster).first()
            backend = get_backend(row if row is not None else cluster)
            stream = backend.watch_pods(stop=stop)
            for kind, state in stream:
                if not connection.in_atomic_block:  # drop a connection the database closed while we waited
                    close_old_connections()
                if kind == "DELETED":  # an eviction finished, or someone deleted the pod: act now
                    apply_pod_deleted(state=state, cluster=cluster)
                else:
                    apply_pod_states([state], cluster=row)
                n += 1
                if max_events and n >= max_events:
                    stream.stop()
                    return n
        except ClusterUnavailable as exc:
            log.warning("cluster %s unreachable (%s); retrying in 10 s", cluster, exc)
            stop.wait(10)
        except Exception:  # noqa: BLE001 - keep watching; the reconciler repairs what was missed
            if max_events:  # a bounded run (tests, one-shot) reports the failure instead of retrying
                raise
            log.exception("pod watch failed; restarting in 5 s")
            stop.wait(5)
    return n
