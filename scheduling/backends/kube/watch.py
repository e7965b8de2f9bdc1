"""Watching the portal's pods: list, then stream changes; re-list on 410 Gone, back off on outages."""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Iterable, Iterator
from typing import Any

from kubernetes.watch.watch import iter_resp_lines

from scheduling.backends.base import ClusterUnavailable, PodState

from .client import TRANSPORT_ERRORS, ApiError
from .connection import KubeConnection

log = logging.getLogger(__name__)


class PodWatching(KubeConnection):
    """``watch_pods``."""

    def watch_pods(
        self,
        resource_version: str | None = None,
        *,
        known: Iterable[PodState] = (),
        timeout_s: int | None = None,
        max_failures: int = 5,
        stop: threading.Event | None = None,
    ) -> PodWatch:
        """Watch this installation's pods (its label selector, all namespaces: the caller keeps only those in
        the namespaces of their jobs): iterate to get ``(event_type, PodState)``.

        ``event_type`` is ``ADDED`` / ``MODIFIED`` / ``DELETED``. Without ``resource_version`` it starts with a
        list (every current pod as ``ADDED``). On 410 Gone (resourceVersion too old) it re-lists: current pods
        come as ``ADDED``/``MODIFIED`` and pods seen before (or passed in ``known``) that vanished meanwhile as
        ``DELETED``; then it resumes. Server-side timeouts reconnect from the last resourceVersion (kept in
        ``.resource_version`` for the caller to persist). Transport errors back off exponentially; after
        ``max_failures`` consecutive failures :class:`ClusterUnavailable` is raised. Set ``stop`` (or call
        ``.stop()``) to end the iteration.
        """
        return PodWatch(self, resource_version, known=known, timeout_s=timeout_s or self.watch_timeout_s,
                        max_failures=max_failures, stop=stop)


class PodWatch:
    """Iterator over ``(event_type, PodState)`` of the portal's pods; see :meth:`KubernetesBackend.watch_pods`."""

    def __init__(self, backend: PodWatching, resource_version: str | None, *, known: Iterable[PodState],
                 timeout_s: int, max_failures: int, stop: threading.Event | None) -> None:
        self.backend = backend
        self.resource_version = resource_version or ""
        self.timeout_s = int(timeout_s)
        self.max_failures = max_failures
        self.stop_event = stop or threading.Event()
        self.relists = 0
        self._known: dict[tuple[str, str], PodState] = {(p.namespace, p.name): p for p in known}
        self._resp: Any = None

    def stop(self) -> None:
        self.stop_event.set()
        resp = self._resp
        if resp is not None:
            try:
                resp.shutdown()  # unblock a read in progress (urllib3 >= 2.3)
            except Exception:  # noqa: BLE001, S110 - best effort
                pass

    def __iter__(self) -> Iterator[tuple[str, PodState]]:
        return self._events()

    def _relist(self) -> Iterator[tuple[str, PodState]]:
        backend = self.backend
        items, rv = backend.call.list_all(backend.core.list_pod_for_all_namespaces, label_selector=backend.selector,
                                          page_size=backend.page_size)
        self.relists += 1
        current: dict[tuple[str, str], PodState] = {}
        for pod in items:
            state = backend.pod_state(pod)
            if state is not None:
                current[(state.namespace, state.name)] = state
        previous, self._known = self._known, current
        self.resource_version = rv
        for key, state in sorted(previous.items()):
            if key not in current:
                yield "DELETED", state
        for key, state in sorted(current.items()):
            yield ("MODIFIED" if key in previous else "ADDED"), state

    def _backoff(self, failures: int, exc: BaseException) -> None:
        if failures > self.max_failures:
            raise ClusterUnavailable(f"pod watch failed {failures} times in a row: {exc}") from exc
        delay = min(30.0, 0.5 * 2 ** (failures - 1))
        log.warning("pod watch interrupted (%s); retrying in %.1fs", exc, delay)
        self.backend.sleep(delay)

    def _events(self) -> Iterator[tuple[str, PodState]]:
        backend = self.backend
        failures = 0
        try:
            if not self.resource_version:
                yield from self._relist()
            while not self.stop_event.is_set():
                started = time.monotonic()
                got_events = False
                expired = False
                try:
                    self._resp = backend.call.raw(
                        backend.core.list_pod_for_all_namespaces, label_selector=backend.selector, watch=True,
                        resource_version=self.resource_version, allow_watch_bookmarks=True,
                        timeout_seconds=self.timeout_s, read_timeout_s=self.timeout_s + 10,
                    )
                    for line in iter_resp_lines(self._resp):
                        if self.stop_event.is_set():
                            return
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        kind, obj = event.get("type"), event.get("object") or {}
                        if kind == "ERROR":
                            if obj.get("code") == 410:
                                expired = True
                                break
                            raise ClusterUnavailable(f"watch error: {obj.get('message')}")
                        rv = (obj.get("metadata") or {}).get("resourceVersion")
                        if rv:
                            self.resource_version = rv
                        got_events = True
                        if kind == "BOOKMARK":
                            continue
                        state = backend.pod_state(obj)
                        if state is None:
                            continue
                        key = (state.namespace, state.name)
                        if kind == "DELETED":
                            self._known.pop(key, None)
                        else:
                            self._known[key] = state
                        failures = 0
                        yield kind, state
                except ApiError as exc:
                    if exc.status != 410:
                        raise exc.to_backend_error() from exc
                    expired = True
                except (ClusterUnavailable, ValueError, *TRANSPORT_ERRORS) as exc:
                    if self.stop_event.is_set():
                        return
                    failures += 1
                    self._backoff(failures, exc)
                    continue
                finally:
                    if self._resp is not None:
                        self._resp.release_conn()
                        self._resp = None
                if expired:
                    log.info("pod watch resourceVersion %s expired (410); re-listing", self.resource_version)
                    yield from self._relist()
                elif not got_events and time.monotonic() - started < 1.0:
                    # A stream that closes at once without events: do not hammer the API server.
                    failures += 1
                    self._backoff(failures, ClusterUnavailable("watch closed immediately"))
        except ApiError as exc:
            raise exc.to_backend_error() from exc
