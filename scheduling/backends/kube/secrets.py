"""The Secrets the portal owns in a job's namespace (a department's ``value`` secrets), written before the
job's pods are created so that a pod never waits for one of them.

Idempotent, as everything the backend does: create; on 409 AlreadyExists read it, and replace it (carrying the
resourceVersion read, so a concurrent writer gets 409 Conflict and we read again) only when its data or type
differ. A Secret of that name the portal did not make (no managed-by label), or another installation made, is
never touched. Nothing here logs or raises with a value in it: messages name the Secret only.

A process remembers for a while (``RECHECK_S``) each Secret it wrote or found up to date, by a digest of its
contents: a department's Secret is the same for all of its jobs, and writing it again before every start cost a
POST answered 409 (and a read) per job. A changed secret has another digest, so it is written at once; one
deleted behind the portal's back is written again within ``RECHECK_S`` (its pods wait for it meanwhile, as they
would for any Secret, and start once it is there).
"""

from __future__ import annotations

import base64
import hashlib
import logging
import time
from collections.abc import Callable
from typing import Any

from scheduling.backends.base import MANAGED_BY, BackendError, InvalidPodSpec, PodSet
from workloads.podsecrets import OwnedSecret

from .client import ApiError, KubeCaller
from .errors import backend_errors
from .podspec import DEFAULT_INSTALLATION, LABEL_INSTALLATION, LABEL_MANAGED_BY, identity_labels

log = logging.getLogger(__name__)

LABEL_SECRET = "gpu-portal.io/department-secret"
ANNOTATION_VERSION = "gpu-portal.io/secret-version"
CONFLICT_RETRIES = 5
RECHECK_S = 300.0


def secret_manifest(owned: OwnedSecret, namespace: str, installation: str = DEFAULT_INSTALLATION) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Secret",
        "metadata": {"name": owned.name, "namespace": namespace,
                     "labels": {**identity_labels(installation), LABEL_SECRET: "true"},
                     "annotations": {ANNOTATION_VERSION: str(owned.version)}},
        "type": owned.type,
        "data": {k: base64.b64encode(v.encode()).decode() for k, v in owned.data},
    }


class SecretsSeen:
    """The Secrets a process wrote or found up to date lately: ``(namespace, name) -> (digest, when)``."""

    def __init__(self, *, recheck_s: float = RECHECK_S, clock: Callable[[], float] = time.monotonic) -> None:
        self.recheck_s = recheck_s
        self.clock = clock
        self._seen: dict[tuple[str, str], tuple[str, float]] = {}

    def fresh(self, namespace: str, name: str, digest: str) -> bool:
        seen = self._seen.get((namespace, name))
        return seen is not None and seen[0] == digest and self.clock() - seen[1] < self.recheck_s

    def note(self, namespace: str, name: str, digest: str) -> None:
        self._seen[(namespace, name)] = (digest, self.clock())

    def forget(self, namespace: str, name: str) -> None:
        self._seen.pop((namespace, name), None)


def _digest(manifest: dict[str, Any]) -> str:
    body = repr((manifest["type"], sorted(manifest["data"].items()), sorted(manifest["metadata"]["labels"].items())))
    return hashlib.sha256(body.encode()).hexdigest()


def ensure_owned_secrets(call: KubeCaller, core: Any, podset: PodSet, *, installation: str = DEFAULT_INSTALLATION,
                         seen: SecretsSeen | None = None) -> list[str]:
    """Create or bring up to date every Secret the portal owns that the podset's pods use (those ``seen`` lately
    as they are now are skipped). Returns the names written (created or replaced)."""
    written = []
    for owned in podset.secrets.owned:
        manifest = secret_manifest(owned, podset.namespace, installation)
        digest = _digest(manifest)
        if seen is not None and seen.fresh(podset.namespace, owned.name, digest):
            continue
        if _ensure_one(call, core, podset.namespace, manifest, installation):
            written.append(owned.name)
        if seen is not None:
            seen.note(podset.namespace, owned.name, digest)
    return written


def _theirs(existing: dict[str, Any], installation: str) -> bool:
    """Someone else's Secret: not the portal's, or another installation's. One of the portal's without any
    installation label was written before installations had one: it is taken over (and labelled)."""
    labels = (existing.get("metadata") or {}).get("labels") or {}
    return labels.get(LABEL_MANAGED_BY) != MANAGED_BY or labels.get(LABEL_INSTALLATION, installation) != installation


def _ensure_one(call: KubeCaller, core: Any, namespace: str, manifest: dict[str, Any],
                installation: str = DEFAULT_INSTALLATION) -> bool:
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
        if _theirs(existing, installation):
            raise InvalidPodSpec(f"Secret {namespace}/{name} exists and is not this portal's; rename the "
                                 "department secret or remove that Secret")
        if (existing.get("type", "Opaque") == manifest["type"] and (existing.get("data") or {}) == manifest["data"]
                and labels.get(LABEL_INSTALLATION) == installation):
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


def delete_owned_secret(call: KubeCaller, core: Any, namespace: str, name: str,
                        installation: str = DEFAULT_INSTALLATION) -> bool:
    """Delete the portal's Secret ``name`` (a department secret deleted in the portal); a Secret of that name
    the portal did not write, or none at all, is left alone."""
    try:
        existing = call.json(core.read_namespaced_secret, name, namespace)
    except ApiError as exc:
        if exc.status == 404:
            return False
        raise
    if _theirs(existing, installation):
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

    @backend_errors
    def delete_owned_secret(self, *, namespace: str, name: str) -> bool:
        self.secrets_seen.forget(namespace, name)
        return delete_owned_secret(self.call, self.core, namespace, name, self.installation)
