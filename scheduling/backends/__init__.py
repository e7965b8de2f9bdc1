"""Cluster backends behind one interface, chosen in settings (SCHEDULING_BACKEND)."""

from __future__ import annotations

from django.conf import settings

from .base import ClusterBackend

_cache: dict[str, ClusterBackend] = {}


def get_backend(cluster: str = "default") -> ClusterBackend:
    if cluster not in _cache:
        if settings.SCHEDULING_BACKEND == "kubernetes":
            from .factory import kubernetes_backend

            _cache[cluster] = kubernetes_backend(cluster)
        else:
            from .simulated import SimulatedBackend

            _cache[cluster] = SimulatedBackend(cluster)
    return _cache[cluster]


def reset_backends() -> None:
    _cache.clear()
