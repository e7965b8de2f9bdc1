"""Build a KubernetesBackend from a Cluster row, settings and the Flavor table (how the inventory names node
resources). Only imported where a cluster uses Kubernetes (``scheduling.backends.get_backend``), so the client
and the models it imports here are loaded only then.

How a row reaches its cluster (first that is set):

* ``kubeconfig``: the path of a kubeconfig file, typically a Secret mounted into the portal's pods;
* ``kubeconfig_env``: the name of an environment variable whose value is a kubeconfig (YAML or JSON), typically
  set from a Secret with ``secretKeyRef``;
* ``in_cluster``: the service account of the pod the portal runs in;
* nothing: for the default cluster, the process-wide ``KUBECONFIG`` setting (else the in-cluster service account
  when there is one, else ``~/.kube/config``); any other cluster refuses to guess.

``context`` picks a context of the kubeconfig. The database holds only these references: the credentials stay
in the file or the environment, and a failure to load them is reported without their contents (the client
library's own message may quote the file, so only the exception's type is kept).
"""

from __future__ import annotations

import os

from django.conf import settings

from portal.installation import installation_id
from quotas.models import Flavor
from scheduling.backends.base import ClusterUnavailable
from scheduling.backends.kube import FlavorRule, KubernetesBackend
from scheduling.backends.kube.routes import RouteConfig


def flavor_rules():
    return tuple(
        FlavorRule(f.name, f.resource_name, tuple(sorted((str(k), str(v)) for k, v in (f.node_labels or {}).items())))
        for f in Flavor.objects.order_by("name")
    )


def connection_options(cluster) -> dict:
    """The client options a Cluster row's references resolve to (``cluster`` may be a bare name: the default
    cluster's settings). Raises ClusterUnavailable, without any credential in its message, when they cannot be
    resolved."""
    if isinstance(cluster, str):
        return {"kubeconfig": settings.KUBECONFIG or None}
    name = cluster.name
    context = cluster.context or None
    if cluster.kubeconfig:
        if not os.path.isfile(cluster.kubeconfig):
            raise ClusterUnavailable(f"cluster {name}: no kubeconfig file at {cluster.kubeconfig}")
        return {"kubeconfig": cluster.kubeconfig, "context": context}
    if cluster.kubeconfig_env:
        import yaml

        text = os.environ.get(cluster.kubeconfig_env)
        if not text:
            raise ClusterUnavailable(f"cluster {name}: the environment variable {cluster.kubeconfig_env} is not set")
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ClusterUnavailable(f"cluster {name}: the kubeconfig in {cluster.kubeconfig_env} is not valid "
                                     f"YAML ({type(exc).__name__})") from None
        if not isinstance(parsed, dict):
            raise ClusterUnavailable(f"cluster {name}: the kubeconfig in {cluster.kubeconfig_env} is not a mapping")
        return {"kubeconfig_dict": parsed, "context": context}
    if cluster.in_cluster:
        return {"in_cluster": True}
    if cluster.is_default:
        return {"kubeconfig": settings.KUBECONFIG or None, "context": context}
    raise ClusterUnavailable(f"cluster {name}: no kubeconfig, kubeconfig environment variable or in-cluster "
                             "access is configured")


def kubernetes_backend(cluster="default", **overrides):
    """The backend of a cluster (a Cluster row, or a name for the default cluster's settings)."""
    name = cluster if isinstance(cluster, str) else cluster.name
    options = {
        "name": name,
        "flavors": flavor_rules(),
        "qps": settings.KUBE_QPS,
        "burst": settings.KUBE_BURST,
        "connections": settings.KUBE_CONNECTIONS,
        "installation": installation_id(),
        "routes": RouteConfig(domain=settings.SESSION_DOMAIN,
                              auth_url=settings.SESSION_AUTH_URL or settings.PORTAL_URL,
                              portal_url=settings.PORTAL_URL, ingress_class=settings.SESSION_INGRESS_CLASS,
                              tls_secret=settings.SESSION_TLS_SECRET,
                              portal_service=settings.SESSION_PORTAL_SERVICE,
                              strip_credentials=settings.SESSION_INGRESS_STRIP),
    }
    if "host" not in overrides and "api_client" not in overrides:
        options.update(connection_options(cluster))
    options.update(overrides)
    try:
        backend = KubernetesBackend(**options)
    except ClusterUnavailable:
        raise
    except Exception as exc:  # noqa: BLE001 - the loader's message may quote the kubeconfig: keep its type only
        raise ClusterUnavailable(f"cluster {name}: its kubeconfig could not be loaded ({type(exc).__name__})") from None
    backend.checkpoint_cleanup_image = settings.CHECKPOINT_CLEANUP_IMAGE
    backend.read_mounts = dict(settings.CHECKPOINT_READ_MOUNTS)
    return backend
