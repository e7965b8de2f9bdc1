"""A session's or service's route on Kubernetes (docs/sessions.md): a ClusterIP Service whose selector is the
attempt's pod labels, and, where the cluster has an ingress controller, an Ingress for the route's own host,
``s<job id>.<SESSION_DOMAIN>`` (each session and service an origin of its own), that asks the portal's
forward-auth endpoint before every request (nginx-ingress ``auth-url``) and hands the app neither the route's
cookie nor the ``Authorization`` header. Both are created
with the attempt, before its pod, and deleted with it; both calls are idempotent (409: adopted when it is this
attempt's; 404 on delete: gone already)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from portal.session_hosts import ROUTE_COOKIE, route_host
from scheduling.backends.base import PodSet

from .podspec import DEFAULT_INSTALLATION, attempt_base_name, attempt_labels
from .rendezvous import create_or_adopt, delete_if_present

ROUTE_PORT = 80
ROUTE_PORT_NAME = "http"


# Run by nginx in the route's location, after forward auth has read the request's credentials: the app gets the
# request without them. The route's cookie is cut out of the Cookie header (its first occurrence, with or
# without the __Host- prefix; the app's own cookies stay), and Authorization (a service key) is emptied.
STRIP_CREDENTIALS = (
    'proxy_set_header Authorization "";\n'
    "set $portal_app_cookie $http_cookie;\n"
    f'if ($portal_app_cookie ~* "^(.*?)(?:^|;\\s*)(?:__Host-)?{ROUTE_COOKIE}=[^;]*(.*)$") '
    '{ set $portal_app_cookie "$1$2"; }\n'
    "proxy_set_header Cookie $portal_app_cookie;\n"
)


@dataclass(frozen=True, slots=True)
class RouteConfig:
    """How routes reach the portal: ``domain`` the sessions' wildcard domain (job 42's Ingress rule is for
    ``s42.<domain>``), ``auth_url`` where the ingress controller reaches the portal's forward-auth endpoint,
    ``portal_url`` where a refused browser is sent (the job's page), ``ingress_class`` the IngressClass ("" : no
    Ingress), ``tls_secret`` the wildcard certificate's Secret in each department's namespace ("": no TLS
    section, the controller's default certificate), ``portal_service`` a Service in each department's namespace
    that reaches the portal (e.g. an ExternalName), for the route's own ``/s/<id>/_portal/`` paths ("": the
    operator routes those), ``strip_credentials`` whether the Ingress carries the snippet that strips them (the
    controller must allow snippet annotations)."""

    domain: str = "sessions.localhost"
    auth_url: str = "http://127.0.0.1:8000"
    portal_url: str = "http://127.0.0.1:8000"
    ingress_class: str = ""
    tls_secret: str = ""
    portal_service: str = ""
    strip_credentials: bool = True


def route_path(job_id: int) -> str:
    return f"/s/{job_id}/"


def selector(podset: PodSet, installation: str = DEFAULT_INSTALLATION) -> dict[str, str]:
    """The labels every pod of the attempt carries (pod_labels), and nothing another attempt's pod has."""
    return attempt_labels(podset.job_id, podset.attempt, installation)


def route_service_manifest(podset: PodSet, installation: str = DEFAULT_INSTALLATION) -> dict[str, Any]:
    labels = selector(podset, installation)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": attempt_base_name(podset.job_id, podset.attempt), "namespace": podset.namespace,
                     "labels": dict(labels)},
        "spec": {
            "type": "ClusterIP",
            "selector": dict(labels),
            "ports": [{"name": ROUTE_PORT_NAME, "port": ROUTE_PORT, "targetPort": int(podset.port or 0),
                       "protocol": "TCP"}],
        },
    }


def ingress_manifest(podset: PodSet, config: RouteConfig, installation: str = DEFAULT_INSTALLATION
                     ) -> dict[str, Any]:
    """The Ingress of the route's own host, behind nginx-ingress's forward auth: every request (a WebSocket's
    upgrade included) is first asked of ``/sessions/<id>/auth``; a refusal sends the browser to the job's page
    in the portal. ``mode=nginx``: nginx takes only 401/403 as refusals."""
    name = attempt_base_name(podset.job_id, podset.attempt)
    host = route_host(podset.job_id, config.domain)
    auth = f"{config.auth_url.rstrip('/')}/sessions/{podset.job_id}/auth?mode=nginx"
    paths: list[dict[str, Any]] = [{
        "path": route_path(podset.job_id),
        "pathType": "Prefix",
        "backend": {"service": {"name": name, "port": {"name": ROUTE_PORT_NAME}}},
    }]
    if config.portal_service:  # the connect code's exchange sets the route's cookie on this host: the portal's
        paths.append({"path": f"{route_path(podset.job_id)}_portal/", "pathType": "Prefix",
                      "backend": {"service": {"name": config.portal_service, "port": {"name": ROUTE_PORT_NAME}}}})
    annotations = {
        "nginx.ingress.kubernetes.io/auth-url": auth,
        "nginx.ingress.kubernetes.io/auth-signin": f"{config.portal_url.rstrip('/')}/jobs/{podset.job_id}/",
        "nginx.ingress.kubernetes.io/auth-response-headers": "X-Portal-User",
        # notebooks keep their kernels' WebSockets open for hours
        "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
        "nginx.ingress.kubernetes.io/proxy-send-timeout": "3600",
    }
    if config.strip_credentials:
        annotations["nginx.ingress.kubernetes.io/configuration-snippet"] = STRIP_CREDENTIALS
    spec: dict[str, Any] = {"ingressClassName": config.ingress_class,
                            "rules": [{"host": host, "http": {"paths": paths}}]}
    if config.tls_secret:
        spec["tls"] = [{"hosts": [host], "secretName": config.tls_secret}]
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": name, "namespace": podset.namespace, "labels": selector(podset, installation),
                     "annotations": annotations},
        "spec": spec,
    }


def ensure_route(backend: Any, podset: PodSet) -> dict[str, str]:
    """Create the attempt's Service (and Ingress, with an IngressClass configured); {} for a batch job."""
    if not podset.has_route:
        return {}
    config: RouteConfig = backend.routes
    done = {"service": create_or_adopt(backend, backend.core.create_namespaced_service,
                                       backend.core.read_namespaced_service, podset,
                                       route_service_manifest(podset, backend.installation), "Service")}
    if config.ingress_class:
        done["ingress"] = create_or_adopt(backend, backend.networking.create_namespaced_ingress,
                                          backend.networking.read_namespaced_ingress, podset,
                                          ingress_manifest(podset, config, backend.installation), "Ingress")
    return done


def delete_route(backend: Any, *, job_id: int, attempt: int, namespace: str) -> None:
    """Delete the attempt's Ingress, if it has one (its Service goes with the gang's, by the same name)."""
    if not backend.routes.ingress_class:
        return
    delete_if_present(backend, backend.networking.delete_namespaced_ingress, attempt_base_name(job_id, attempt),
                      namespace)
