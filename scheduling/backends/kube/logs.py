"""Reading an attempt's log from the API server (which proxies the node's kubelet)."""

from __future__ import annotations

import math
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

from kubernetes.watch.watch import iter_resp_lines

from scheduling.backends.base import ClusterUnavailable, LogsUnavailable

from .client import TRANSPORT_ERRORS, ApiError
from .connection import KubeConnection
from .errors import backend_errors
from .podspec import MAIN_CONTAINER

# Seconds asked beyond ``since``: clocks of nodes and of the portal disagree by a little, and a line that the
# margin brings back again is dropped by its stamp.
SINCE_MARGIN_S = 120


class PodLogs(KubeConnection):
    """``logs``: the attempt's first pod's main container, read lazily."""

    @backend_errors
    def logs(
        self,
        *,
        job_id: int,
        attempt: int,
        namespace: str,
        tail_lines: int | None = 200,
        follow: bool = False,
        follow_idle_timeout_s: float = 300.0,
        pod: int = 0,
        timestamps: bool = False,
        since: datetime | None = None,
    ) -> Iterator[str]:
        """Lines of the main container of the attempt's pod ``pod`` (its index). The request is made now (errors
        raise here: :class:`LogsUnavailable` when there is no such pod or it has not started); lines are read
        lazily. With ``follow`` the iterator ends when the pod ends or after ``follow_idle_timeout_s`` without
        output. ``since`` is sent as ``sinceSeconds`` (this client has no ``sinceTime``), counted on this
        machine's clock with SINCE_MARGIN_S more for the node's clock being ahead: the caller filters by the
        stamps."""
        pods = self._attempt_pods(namespace, job_id, attempt)
        if pod not in pods:
            raise LogsUnavailable(f"job {job_id} attempt {attempt} has no pod {pod} in {namespace}")
        name = pods[pod]["metadata"]["name"]
        kwargs: dict[str, Any] = {"container": MAIN_CONTAINER, "follow": follow}
        if tail_lines is not None and tail_lines >= 0:
            kwargs["tail_lines"] = int(tail_lines)
        if timestamps:
            kwargs["timestamps"] = True
        if since is not None:
            kwargs["since_seconds"] = max(1, math.ceil(time.time() - since.timestamp() + SINCE_MARGIN_S))
        try:
            resp = self.call.raw(self.core.read_namespaced_pod_log, name, namespace,
                                 read_timeout_s=follow_idle_timeout_s if follow else None, **kwargs)
        except ApiError as exc:
            if exc.status in (400, 404):
                raise LogsUnavailable(exc.message or str(exc)) from exc
            raise
        except ClusterUnavailable as exc:
            # The API server proxies logs from the node's kubelet; a kubelet that does not answer (down, no
            # logs endpoint, a kubelet-less test control plane) comes back as a 5xx on this one call, while
            # the list just above worked: the logs are unavailable, the cluster is not.
            raise LogsUnavailable(f"logs of {namespace}/{name} are unavailable: {exc}") from exc
        return self._log_lines(resp)

    @staticmethod
    def _log_lines(resp: Any) -> Iterator[str]:
        try:
            yield from iter_resp_lines(resp)
        except TRANSPORT_ERRORS:
            return  # idle follow timed out or the stream was cut: the caller may call again
        finally:
            resp.release_conn()
