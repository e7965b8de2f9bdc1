"""Plumbing around the official ``kubernetes`` client: configuration, throttling, timeouts, error mapping.

Every call goes through :class:`KubeCaller`, which

* waits on a token bucket (``qps`` / ``burst``, like client-go's rate limiter: the Python client has none);
* passes a ``(connect, read)`` timeout on every request, and disables urllib3's silent retries (the caller
  decides: Celery retries with back-off, the watcher re-connects);
* asks for the raw response (``_preload_content=False``) and decodes JSON itself: plain dicts, and no model
  deserialisation cost on cluster-wide lists;
* turns transport failures and 5xx into :class:`ClusterUnavailable`; 4xx come back as :class:`ApiError` for
  the caller to interpret (404 gone, 409 exists/conflict, 429 PDB, 422 invalid).
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from scheduling.backends.base import BackendError, ClusterUnavailable, InvalidPodSpec


@dataclass
class ApiError(Exception):
    """A 4xx answer from the API server, with the fields of its ``Status`` body."""

    status: int
    reason: str = ""
    message: str = ""
    causes: tuple[dict[str, Any], ...] = ()

    def __str__(self) -> str:
        return f"{self.status} {self.reason}: {self.message}"

    @classmethod
    def from_exception(cls, exc: ApiException) -> ApiError:
        reason, message, causes = str(exc.reason or ""), "", ()
        try:
            body = json.loads(exc.body or "{}")
        except (TypeError, ValueError):
            body = {}
        if isinstance(body, dict):
            reason = body.get("reason") or reason
            message = body.get("message") or ""
            causes = tuple((body.get("details") or {}).get("causes") or ())
        return cls(status=int(exc.status or 0), reason=reason, message=message or str(exc.reason or ""),
                   causes=causes)

    def to_backend_error(self) -> BackendError:
        """The generic mapping for answers the caller did not handle itself."""
        if self.status in (400, 403, 422):
            return InvalidPodSpec(str(self))
        if self.status == 429:  # API priority & fairness throttling (not an eviction): back off
            return ClusterUnavailable(str(self))
        return BackendError(str(self))


class TokenBucket:
    """Client-side rate limit: ``qps`` tokens per second, at most ``burst`` saved up. ``qps <= 0`` disables it."""

    def __init__(self, qps: float, burst: int, *, clock: Callable[[], float] = time.monotonic,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.qps = float(qps)
        self.burst = max(1, int(burst))
        self._tokens = float(self.burst)
        self._clock = clock
        self._sleep = sleep
        self._last = clock()
        self._lock = threading.Lock()

    def acquire(self) -> None:
        if self.qps <= 0:
            return
        with self._lock:
            now = self._clock()
            self._tokens = min(self.burst, self._tokens + (now - self._last) * self.qps)
            self._last = now
            self._tokens -= 1.0
            wait = -self._tokens / self.qps if self._tokens < 0 else 0.0
        if wait > 0:
            self._sleep(wait)


def build_api_client(
    *,
    api_client: k8s.ApiClient | None = None,
    kubeconfig: str | None = None,
    kubeconfig_dict: dict[str, Any] | None = None,
    context: str | None = None,
    in_cluster: bool | None = None,
    host: str | None = None,
    connections: int | None = None,
) -> k8s.ApiClient:
    """An ``ApiClient`` from (first match): an explicit client; ``host`` (tests, the fake API, no auth); an
    explicit kubeconfig path; a kubeconfig already parsed (read from an environment variable); in-cluster
    service-account config; the default kubeconfig (``$KUBECONFIG``).

    Clients built here do not retry silently (urllib3 ``retries=False``): a dead API server surfaces at once.
    ``connections``: how many HTTP connections the client keeps open (urllib3's pool size; the library's default
    is 5 per CPU): requests beyond it still go out at once, but each on a connection opened and closed for it
    (a TLS handshake each), so it should cover the calls a process makes at once (overlapping admissions).
    """
    if api_client is not None:
        return api_client
    cfg = k8s.Configuration()
    if host is not None:
        cfg.host = host
    elif kubeconfig:
        k8s_config.load_kube_config(config_file=kubeconfig, context=context, client_configuration=cfg)
    elif kubeconfig_dict is not None:
        k8s_config.load_kube_config_from_dict(kubeconfig_dict, context=context, client_configuration=cfg)
    elif in_cluster or in_cluster is None and _in_cluster_available():
        k8s_config.load_incluster_config(client_configuration=cfg)
    else:
        k8s_config.load_kube_config(context=context, client_configuration=cfg)
    cfg.retries = False
    if connections is not None:
        cfg.connection_pool_maxsize = max(1, int(connections))
    return k8s.ApiClient(cfg)


def _in_cluster_available() -> bool:
    import os

    return bool(os.environ.get("KUBERNETES_SERVICE_HOST")) and os.path.exists(
        "/var/run/secrets/kubernetes.io/serviceaccount/token"
    )


TRANSPORT_ERRORS: tuple[type[BaseException], ...] = (urllib3.exceptions.HTTPError, OSError, TimeoutError)


class KubeCaller:
    """Throttled, time-limited calls returning decoded JSON (or the raw response for streams)."""

    def __init__(self, bucket: TokenBucket, *, connect_timeout_s: float, timeout_s: float) -> None:
        self.bucket = bucket
        self.connect_timeout_s = connect_timeout_s
        self.timeout_s = timeout_s

    def raw(self, fn: Callable[..., Any], *args: Any, read_timeout_s: float | None = None, **kwargs: Any) -> Any:
        """Issue the request; return the urllib3 response (2xx) or raise ApiError / ClusterUnavailable."""
        self.bucket.acquire()
        read = self.timeout_s if read_timeout_s is None else read_timeout_s
        try:
            return fn(*args, _preload_content=False, _request_timeout=(self.connect_timeout_s, read), **kwargs)
        except ApiException as exc:
            if not exc.status or exc.status >= 500:
                detail = ApiError.from_exception(exc).message if exc.status else ""
                detail = "" if detail == str(exc.reason or "") else f" ({detail})"
                raise ClusterUnavailable(
                    f"Kubernetes API {exc.status or 'unreachable'}: {exc.reason}{detail}") from exc
            raise ApiError.from_exception(exc) from exc
        except TRANSPORT_ERRORS as exc:
            raise ClusterUnavailable(f"Kubernetes API unreachable: {type(exc).__name__}: {exc}") from exc

    def json(self, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> dict[str, Any]:
        resp = self.raw(fn, *args, **kwargs)
        try:
            data = resp.data
        except TRANSPORT_ERRORS as exc:
            raise ClusterUnavailable(f"Kubernetes API read failed: {exc}") from exc
        finally:
            resp.release_conn()
        if not data:
            return {}
        try:
            return json.loads(data)
        except ValueError as exc:
            raise ClusterUnavailable(f"Kubernetes API returned invalid JSON: {exc}") from exc

    def list_all(self, fn: Callable[..., Any], *args: Any, page_size: int = 500, **kwargs: Any) -> tuple[
        list[dict[str, Any]], str
    ]:
        """All items of a (paginated) list and the list's resourceVersion; one request per ``page_size`` items."""
        items: list[dict[str, Any]] = []
        token: str | None = None
        rv = ""
        while True:
            extra = {"_continue": token} if token else {}
            page = self.json(fn, *args, limit=page_size, **extra, **kwargs)
            items.extend(page.get("items") or [])
            meta = page.get("metadata") or {}
            rv = rv or meta.get("resourceVersion", "")
            token = meta.get("continue")
            if not token:
                return items, rv
