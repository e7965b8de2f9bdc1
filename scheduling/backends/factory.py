"""Build a KubernetesBackend from settings and the Flavor table (how the inventory names node resources)."""

from __future__ import annotations

from django.conf import settings


def flavor_rules():
    # Inside the functions: the Kubernetes client is imported only when a cluster uses it, and this module
    # is importable before Django's apps are ready.
    from quotas.models import Flavor
    from scheduling.backends.kube import FlavorRule

    return tuple(
        FlavorRule(f.name, f.resource_name, tuple(sorted((str(k), str(v)) for k, v in (f.node_labels or {}).items())))
        for f in Flavor.objects.order_by("name")
    )


def kubernetes_backend(cluster: str = "default", **overrides):
    from scheduling.backends.kube import KubernetesBackend

    options = {
        "name": cluster,
        "kubeconfig": settings.KUBECONFIG or None,
        "flavors": flavor_rules(),
        "qps": settings.KUBE_QPS,
        "burst": settings.KUBE_BURST,
    }
    options.update(overrides)
    return KubernetesBackend(**options)
