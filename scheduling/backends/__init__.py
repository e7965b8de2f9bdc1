"""Cluster backends behind one interface: one backend per Cluster row, built from that row.

A row says which kind of backend it is (``simulated`` or ``kubernetes``) and how to reach it (a kubeconfig path,
an environment variable holding a kubeconfig, a context, or the in-cluster service account: see
``factory.py``). ``SCHEDULING_BACKEND=kubernetes`` keeps its older meaning for the default cluster: that
cluster is the Kubernetes cluster of ``KUBECONFIG`` even where its row says ``simulated``.
"""

from __future__ import annotations

import threading

from .base import ClusterBackend, ClusterUnavailable

_cache: dict[str, ClusterBackend] = {}
# What each cached backend was built from: a row whose connection settings changed gets a new backend.
_built_from: dict[str, tuple] = {}
_lock = threading.Lock()


def _row(cluster):
    """The Cluster row for a name (None when no such row: a backend for the name alone, of the default kind)."""
    if not isinstance(cluster, str):
        return cluster
    from scheduling.models import Cluster  # this package is importable without Django set up

    return Cluster.objects.filter(name=cluster).first()


def cluster_kind(row) -> str:
    """``simulated`` or ``kubernetes`` for a Cluster row (None: a cluster without a row)."""
    from django.conf import settings

    if row is not None and row.backend == "kubernetes":
        return "kubernetes"
    if settings.SCHEDULING_BACKEND == "kubernetes" and (row is None or row.is_default):
        return "kubernetes"
    return "simulated"


def _fingerprint(row) -> tuple:
    kind = cluster_kind(row)
    if row is None:
        return (kind,)
    return (kind, row.kubeconfig, row.kubeconfig_env, row.context, row.in_cluster)


def get_backend(cluster="default") -> ClusterBackend:
    """The backend of a cluster (a name or a Cluster row). Built on first use and kept while the row's
    connection settings stay the same; each cluster has its own client (Kubernetes) or its own pods and nodes
    (simulated)."""
    # The backends are imported when first used: the Kubernetes client only where a cluster uses it, and the
    # simulated backend (which reads models) only once Django's apps are ready; this package itself stays
    # importable without Django set up (the pure Kubernetes suites).
    name = cluster if isinstance(cluster, str) else cluster.name
    with _lock:
        if name in _cache and name not in _built_from:
            return _cache[name]  # set up by hand (tests, a one-off script): used as it is
    row = _row(cluster)
    fingerprint = _fingerprint(row)
    with _lock:
        if name in _cache and _built_from.get(name) == fingerprint:
            return _cache[name]
        old = _cache.pop(name, None)
        _built_from.pop(name, None)
    if old is not None and hasattr(old, "close"):
        old.close()
    if fingerprint[0] == "kubernetes":
        from .factory import kubernetes_backend  # the Kubernetes client only where a cluster uses it

        backend: ClusterBackend = kubernetes_backend(row if row is not None else name)
    else:
        from .simulated import SimulatedBackend  # reads models: only once Django's apps are ready

        backend = SimulatedBackend(name)
    with _lock:
        _cache[name] = backend
        _built_from[name] = fingerprint
    return backend


def _kind_flag(cluster, attr: str) -> bool:
    """A backend class property without building the backend (the web process may have no cluster
    credentials): the cached instance's, else the class of the cluster's kind."""
    name = cluster if isinstance(cluster, str) else cluster.name
    if name in _cache:
        return bool(getattr(_cache[name], attr))
    if cluster_kind(_row(cluster)) == "kubernetes":
        from .kube import KubernetesBackend  # the Kubernetes client only where a cluster uses it

        return bool(getattr(KubernetesBackend, attr))
    from .simulated import SimulatedBackend  # reads models: only once Django's apps are ready

    return bool(getattr(SimulatedBackend, attr))


def creates_pods_at_admission(cluster="default") -> bool:
    return _kind_flag(cluster, "creates_pods_at_admission")


def owns_inventory(cluster="default") -> bool:
    return _kind_flag(cluster, "owns_inventory")


def reset_backends() -> None:
    with _lock:
        _cache.clear()
        _built_from.clear()


def speedup_of(cluster="default", *, has_route: bool = False) -> float:
    """Seconds of a job's time that pass per wall-clock second on a cluster (a name or a Cluster row; None: the
    default cluster): 1 on a real cluster, ``SIM_SPEEDUP`` on the simulated one for batch work. A session or a
    service (``has_route``) runs on the wall's clock everywhere: people work in it and call it. Everything a
    job does (run time, GPU idle time, settlement, estimates) is measured in its own time, this factor times
    the wall's; a cluster whose backend cannot be built now (no kubeconfig yet) counts as 1."""
    if has_route:
        return 1.0
    try:
        backend = get_backend(cluster if cluster is not None else "default")
    except ClusterUnavailable:
        return 1.0
    return float(getattr(backend, "speedup", 1.0) or 1.0)
