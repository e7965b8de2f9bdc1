"""Follow the portal's pods in the clusters and move their jobs (the Kubernetes backends' status feed).

Without ``--cluster`` it watches every Kubernetes cluster registered, one thread each (clusters registered
later are picked up within a minute). One active watcher per cluster: each thread waits for that cluster's
"pod-watcher-<name>" lock, so running the command on several hosts gives a hot standby, not duplicate work, and
one cluster that is down only stalls its own thread. A watch that expires (410 Gone) re-lists and resumes; a
restart re-lists, and the reconciler covers anything missed while no watcher ran.
"""

from __future__ import annotations

import logging
import queue
import signal
import threading

from django.conf import settings
from django.core.management.base import BaseCommand
from django.db import close_old_connections, connection

from portal import dispatch
from portal.heartbeat import touch
from scheduling.backends import cluster_kind, get_backend
from scheduling.backends.base import ClusterUnavailable, PodState
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


# Most events applied together: a burst (a cycle's admissions starting) is applied in one read of its jobs and a
# few transactions, not a read and a transaction per event.
BATCH_MAX = 200
_END = object()  # the stream ended (stopped, or the server closed it): the watch starts again


def watch(*, cluster: str, stop: threading.Event, max_events: int = 0) -> int:
    """Apply one cluster's pod events until ``stop`` is set (or ``max_events``); returns the number applied.
    Only jobs bound to that cluster move.

    A thread reads the stream (HTTP and JSON only, no database) while this one applies what has arrived: every
    event waiting when the last batch was done, in order, as one batch (``apply_events``). A quiet cluster
    gets each event alone, at once; a busy one gets its events in bursts, for one query and one notification
    message a burst instead of one each."""
    n = 0
    while not stop.is_set():
        stream = None
        try:
            row = Cluster.objects.filter(name=cluster).first()
            backend = get_backend(row if row is not None else cluster)
            # The stream's own stop: ending this stream (to start another) must not end the command.
            stream = backend.watch_pods(stop=threading.Event())
            events: queue.SimpleQueue = queue.SimpleQueue()
            threading.Thread(target=_read, args=(stream, events), name=f"watch-read-{cluster}", daemon=True).start()
            while not stop.is_set():
                try:
                    first = events.get(timeout=1.0)
                except queue.Empty:
                    continue
                batch = drain(events, first, limit=max_events - n if max_events else BATCH_MAX)
                ended = batch and (batch[-1] is _END or isinstance(batch[-1], BaseException))
                items = batch[:-1] if ended else batch
                if items:
                    if not connection.in_atomic_block:  # drop a connection the database closed while we waited
                        close_old_connections()
                    apply_events(items, cluster=cluster, row=row)
                    n += len(items)
                if max_events and n >= max_events:
                    return n
                if ended:
                    if batch[-1] is not _END:
                        raise batch[-1]
                    break
        except ClusterUnavailable as exc:
            log.warning("cluster %s unreachable (%s); retrying in 10 s", cluster, exc)
            stop.wait(10)
        except Exception:  # noqa: BLE001 - keep watching; the reconciler repairs what was missed
            if max_events:  # a bounded run (tests, one-shot) reports the failure instead of retrying
                raise
            log.exception("pod watch failed; restarting in 5 s")
            stop.wait(5)
        finally:
            if stream is not None:
                stream.stop()  # the reader's read in progress ends with it
    return n


def _read(stream, events: queue.SimpleQueue) -> None:
    """The reader thread: every event of ``stream`` into ``events``, then ``_END`` (or the exception it raised)."""
    try:
        for item in stream:
            events.put(item)
    except BaseException as exc:  # noqa: BLE001 - handed to the applying thread, which decides
        events.put(exc)
    else:
        events.put(_END)


def drain(events: queue.SimpleQueue, first, *, limit: int = BATCH_MAX) -> list:
    """``first`` and whatever else is waiting in ``events`` (never blocking), up to ``limit`` events; the
    stream's end (or failure) closes a batch."""
    batch = [first]
    while batch[-1] is not _END and not isinstance(batch[-1], BaseException) and len(batch) < max(1, limit):
        try:
            batch.append(events.get_nowait())
        except queue.Empty:
            break
    return batch


def apply_events(items: list[tuple[str, PodState]], *, cluster: str, row: Cluster | None) -> None:
    """Apply a batch of watch events in order: the states of consecutive ADDED/MODIFIED events in one
    ``apply_pod_states`` (a pod's latest state only: what a sync listing then would have read), each DELETED
    on its own after the states before it. The notifications of the batch's transactions go as one message."""
    pending: dict[tuple[str, str], PodState] = {}

    def flush() -> None:
        if pending:
            apply_pod_states(list(pending.values()), cluster=row)
            pending.clear()

    with dispatch.coalesced():
        for kind, state in items:
            if kind == "DELETED":  # an eviction finished, or someone deleted the pod: act now
                flush()
                apply_pod_deleted(state=state, cluster=cluster)
            else:
                pending.pop((state.namespace, state.name), None)
                pending[(state.namespace, state.name)] = state
        flush()
