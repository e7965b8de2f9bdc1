"""A session's or service's route on Kubernetes (docs/sessions.md): a ClusterIP Service whose selector is the
attempt's pod labels, and, where the cluster has an ingress controller, an Ingress for ``/s/<job id>/`` that
asks the portal's forward-auth endpoint before every request (nginx-ingress ``auth-url``). Both are created
with the attempt, before its pod, and deleted with it; both calls are idempotent (409: adopted when it is this
attempt's; 404 on delete: gone already)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

from scheduling.backends.base import MANAGED_BY, PodSet

from .podspec import LABEL_ATTEMPT, LABEL_JOB_ID, LABEL_MANAGED_BY, attempt_base_name
from .rendezvous import create_or_adopt, delete_if_present

ROUTE_PORT = 80
ROUTE_PORT_NAME = "http"


@dataclass(frozen=True, slots=True)
class RouteConfig:
    """How routes reach the portal: ``url`` the sessions' public address (its host names the Ingress rule),
    ``auth_url`` where the ingress controller reaches the portal's forward-auth endpoint, ``portal_url`` where a
    refused browser is sent (the job's page), ``ingress_class`` the IngressClass ("" : no Ingress)."""

    url: str = "http://127.0.0.1:8001"
    auth_url: str = "http://127.0.0.1:8000"
    portal_url: str = "http://127.0.0.1:8000"
    ingress_class: str = ""


def route_path(job_id: int) -> str:
    return f"/s/{job_id}/"


def selector(podset: PodSet) -> dict[str, str]:
    """The labels every pod of the attempt carries (pod_labels), and nothing another attempt's pod has."""
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_JOB_ID: str(podset.job_id), LABEL_ATTEMPT: str(podset.attempt)}


def route_service_manifest(podset: PodSet) -> dict[str, Any]:
    labels = selector(podset)
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


def ingress_manifest(podset: PodSet, config: RouteConfig) -> dict[str, Any]:
    """The Ingress of ``/s/<job id>/`` on the sessions' host, behind nginx-ingress's forward auth: every
    request (a WebSocket's upgrade included) is first asked of ``/sessions/<id>/auth``; a refusal sends the
    browser to the job's page in the portal. ``mode=nginx``: nginx takes only 401/403 as refusals."""
    name = attempt_base_name(podset.job_id, podset.attempt)
    host = urlsplit(config.url).hostname or ""
    auth = f"{config.auth_url.rstrip('/')}/sessions/{podset.job_id}/auth?mode=nginx"
    rule: dict[str, Any] = {"http": {"paths": [{
        "path": route_path(podset.job_id),
        "pathType": "Prefix",
        "backend": {"service": {"name": name, "port": {"name": ROUTE_PORT_NAME}}},
    }]}}
    if host and not _is_ip(host):
        rule["host"] = host
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {
            "name": name,
            "namespace": podset.namespace,
            "labels": selector(podset),
            "annotations": {
                "nginx.ingress.kubernetes.io/auth-url": auth,
                "nginx.ingress.kubernetes.io/auth-signin": f"{config.portal_url.rstrip('/')}/jobs/{podset.job_id}/",
                "nginx.ingress.kubernetes.io/auth-response-headers": "X-Portal-User",
                # notebooks keep their kernels' WebSockets open for hours
                "nginx.ingress.kubernetes.io/proxy-read-timeout": "3600",
                "nginx.ingress.kubernetes.io/proxy-send-timeout": "3600",
            },
        },
        "spec": {"ingressClassName": config.ingress_class, "rules": [rule]},
    }


def _is_ip(host: str) -> bool:
    return host.replace(".", "").isdigit() or ":" in host


def ensure_route(backend: Any, podset: PodSet) -> dict[str, str]:
    """Create the attempt's Service (and Ingress, with an IngressClass configured); {} for a batch job."""
    if not podset.has_route:
        return {}
    config: RouteConfig = backend.routes
    done = {"service": create_or_adopt(backend, backend.core.create_namespaced_service,
                                       backend.core.read_namespaced_service, podset,
                                       route_service_manifest(podset), "Service")}
    if config.ingress_class:
        done["ingress"] = create_or_adopt(backend, backend.networking.create_namespaced_ingress,
                                          backend.networking.read_namespaced_ingress, podset,
                                          ingress_manifest(podset, config), "Ingress")
    return done


def delete_route(backend: Any, *, job_id: int, attempt: int, namespace: str) -> None:
    """Delete the attempt's Ingress, if it has one (its Service goes with the gang's, by the same name)."""
    if not backend.routes.ingress_class:
        return
    delete_if_present(backend, backend.networking.delete_namespaced_ingress, attempt_base_name(job_id, attempt),
                      namespace)
