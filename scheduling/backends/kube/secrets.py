"""The Secrets the portal owns in a job's namespace (a department's ``value`` secrets), written before the
job's pods are created so that a pod never waits for one of them.

Idempotent, as everything the backend does: create; on 409 AlreadyExists read it, and replace it (carrying the
resourceVersion read, so a concurrent writer gets 409 Conflict and we read again) only when its data or type
differ. A Secret of that name the portal did not make (no managed-by label) is never touched. Nothing here
logs or raises with a value in it: messages name the Secret only.
"""

from __future__ import annotations

import base64
import logging
from typing import Any

from scheduling.backends.base import MANAGED_BY, BackendError, InvalidPodSpec, PodSet
from workloads.podsecrets import OwnedSecret

from .client import ApiError, KubeCaller
from .errors import _mapped
from .podspec import LABEL_MANAGED_BY

log = logging.getLogger(__name__)

LABEL_SECRET = "gpu-portal.io/department-secret"
ANNOTATION_VERSION = "gpu-portal.io/secret-version"
CONFLICT_RETRIES = 5


def secret_manifest(owned: OwnedSecret, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": owned.name, "namespace": namespace,
                     "labels": {LABEL_MANAGED_BY: MANAGED_BY, LABEL_SECRET: "true"},
                     "annotations": {ANNOTATION_VERSION: str(owned.version)}},
        "type": owned.type,
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in owned.data},
    }


def ensure_owned_secrets(call: KubeCaller, core: Any, podset: PodSet) -> list[str]:
    """Create or bring up to date every Secret the portal owns that the podset's pods use. Returns the names
    written (created or replaced)."""
    written = []
    for owned in podset.secrets.owned:
        if _ensure_one(call, core, podset.namespace, secret_manifest(owned, podset.namespace)):
            written.append(owned.name)
    return written


def _ensure_one(call: KubeCaller, core: Any, namespace: str, manifest: dict[str, Any]) -> bool:
    name = manifest["metadata"]["name"]
    try:
        call.json(core.create_namespaced_secret, namespace, manifest)
        log.info("created Secret %s/%s", namespace, name)
        return True
    except ApiError as exc:
        if exc.status == 404:
            raise InvalidPodSpec(f"namespace {namespace!r} not found (Secret {name})") from None
        if not (exc.status == 409 and exc.reason == "AlreadyExists"):
            raise InvalidPodSpec(f"Secret {namespace}/{name} refused: {exc.status} {exc.reason}") from None
    for _ in range(CONFLICT_RETRIES):
        existing = call.json(core.read_namespaced_secret, name, namespace)
        labels = (existing.get("metadata") or {}).get("labels") or {}
        if labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
            raise InvalidPodSpec(f"Secret {namespace}/{name} exists and is not the portal's; rename the "
                                 "department secret or remove that Secret")
        if existing.get("type", "Opaque") == manifest["type"] and (existing.get("data") or {}) == manifest["data"]:
            return False
        if existing.get("type", "Opaque") != manifest["type"]:  # the type is immutable: make it again
            call.json(core.delete_namespaced_secret, name, namespace)
            try:
                call.json(core.create_namespaced_secret, namespace, manifest)
                return True
            except ApiError as exc:
                if exc.status == 409:
                    continue
                raise InvalidPodSpec(f"Secret {namespace}/{name} refused: {exc.status} {exc.reason}") from None
        body = {**manifest, "metadata": {**manifest["metadata"],
                                         "resourceVersion": existing["metadata"]["resourceVersion"]}}
        try:
            call.json(core.replace_namespaced_secret, name, namespace, body)
            log.info("updated Secret %s/%s", namespace, name)
            return True
        except ApiError as exc:
            if exc.status == 404:  # deleted between our read and our write: create it again
                try:
                    call.json(core.create_namespaced_secret, namespace, manifest)
                    return True
                except ApiError:
                    continue
            if exc.status != 409:
                raise InvalidPodSpec(f"Secret {namespace}/{name} refused: {exc.status} {exc.reason}") from None
    raise BackendError(f"Secret {namespace}/{name} keeps changing under us; retry")


def delete_owned_secret(call: KubeCaller, core: Any, namespace: str, name: str) -> bool:
    """Delete the portal's Secret ``name`` (a department secret deleted in the portal); a Secret of that name
    the portal did not write, or none at all, is left alone."""
    try:
        existing = call.json(core.read_namespaced_secret, name, namespace)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    if ((existing.get("metadata") or {}).get("labels") or {}).get(LABEL_MANAGED_BY) != MANAGED_BY:
        return False
    try:
        call.json(core.delete_namespaced_secret, name, namespace)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    log.info("deleted Secret %s/%s", namespace, name)
    return True


class OwnedSecrets:
    """The backend's part that removes the Secrets it wrote for department secrets deleted since."""

    @_mapped
    def delete_owned_secret(self, *, namespace: str, name: str) -> bool:
        return delete_owned_secret(self.call, self.core, namespace, name)
