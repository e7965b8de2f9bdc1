"""Cluster backends behind one interface, chosen in settings (SCHEDULING_BACKEND)."""

from __future__ import annotations

from django.conf import settings

from .base import ClusterBackend

_cache: dict[str, ClusterBackend] = {}


def get_backend(cluster: str = "default") -> ClusterBackend:
    # The backends are imported when first used: the Kubernetes client only where a cluster uses it, and the
    # simulated backend (which reads models) only once Django's apps are ready; this package itself stays
    # importable without Django set up (the pure Kubernetes suites).
    if cluster not in _cache:
        if settings.SCHEDULING_BACKEND == "kubernetes":
            from .factory import kubernetes_backend

            _cache[cluster] = kubernetes_backend(cluster)
        else:
            from .simulated import SimulatedBackend

            _cache[cluster] = SimulatedBackend(cluster)
    return _cache[cluster]


def _kind_flag(cluster: str, attr: str) -> bool:
    """A backend class property without building the backend (the web process may have no cluster
    credentials): the cached instance's, else the configured backend class's."""
    if cluster in _cache:
        return bool(getattr(_cache[cluster], attr))
    if settings.SCHEDULING_BACKEND == "kubernetes":
        from .kube import KubernetesBackend

        return bool(getattr(KubernetesBackend, attr))
    from .simulated import SimulatedBackend

    return bool(getattr(SimulatedBackend, attr))


def creates_pods_at_admission(cluster: str = "default") -> bool:
    return _kind_flag(cluster, "creates_pods_at_admission")


def owns_inventory(cluster: str = "default") -> bool:
    return _kind_flag(cluster, "owns_inventory")


def reset_backends() -> None:
    _cache.clear()
