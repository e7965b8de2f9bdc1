"""A gang's headless Service (its pods' DNS subdomain, docs/workloads.md "Multi-node training"): created with the
attempt, before its pods, and deleted with them; and the own PodDisruptionBudget of an attempt that failed. Both calls are idempotent: a Service that exists already is
adopted when it is this attempt's (409), one that is gone already is fine (404)."""

from __future__ import annotations

from typing import Any

from scheduling.backends.base import BackendError, InvalidPodSpec, PodSet

from .client import ApiError
from .podspec import attempt_base_name, service_manifest

# ``backend``: the KubernetesBackend calling (its rate-limited ``call`` and its ``core`` CoreV1Api); not imported
# here, so that this module stays below the backend.


def ensure_service(backend: Any, podset: PodSet) -> str:
    """Create the attempt's headless Service when it is a gang, or resizable (it may become one: its ranks find
    rank 0 through the Service); returns "created", "adopted" or "" (one pod)."""
    if podset.pods < 2 and podset.max_pods is None:
        return ""
    return create_or_adopt(backend, backend.core.create_namespaced_service, backend.core.read_namespaced_service,
                           podset, service_manifest(podset, backend.installation), "Service")


def create_or_adopt(backend: Any, create, read, podset: PodSet, manifest: dict[str, Any], kind: str) -> str:
    """Create an object of the attempt (``create``/``read``: the API's calls for its kind); "created", or
    "adopted" when a retried start finds the one it made before. Another's object of that name is an error."""
    name = manifest["metadata"]["name"]
    try:
        backend.call.json(create, podset.namespace, manifest)
        return "created"
    except ApiError as exc:
        if exc.status == 404:
            raise InvalidPodSpec(f"namespace {podset.namespace!r} not found: {exc.message}") from exc
        if exc.status != 409:
            raise
    existing = backend.call.json(read, name, podset.namespace)
    if not backend.owns(existing, job_id=podset.job_id, attempt=podset.attempt):
        raise BackendError(f"{kind} {podset.namespace}/{name} exists and is not this job attempt's")
    return "adopted"


def delete_service(backend: Any, *, job_id: int, attempt: int, namespace: str) -> None:
    """Delete the attempt's headless Service, if it has one."""
    delete_if_present(backend, backend.core.delete_namespaced_service, attempt_base_name(job_id, attempt), namespace)


def delete_own_pdb(backend: Any, *, job_id: int, attempt: int, namespace: str) -> None:
    """Delete the attempt's own PodDisruptionBudget (``pdb_min_available``), if it has one."""
    delete_if_present(backend, backend.policy.delete_namespaced_pod_disruption_budget,
                      attempt_base_name(job_id, attempt), namespace)


def delete_if_present(backend: Any, delete, name: str, namespace: str) -> None:
    """``delete`` (the API's call for the object's kind) the named object; one already gone is no error."""
    try:
        backend.call.json(delete, name, namespace)
    except ApiError as exc:
        if exc.status != 404:
            raise
