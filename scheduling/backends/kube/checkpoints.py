"""Deleting an expired checkpoint directory on a Kubernetes cluster: the portal cannot reach the volume
itself, so it runs a small restricted pod that mounts the claim and removes the directory.

One call per retention run, idempotent: no pod yet -> create it (and report "in progress"); the pod
succeeded -> delete it, done; it failed -> delete it and report why (the next run starts a new one)."""

from __future__ import annotations

from typing import Any

from scheduling.backends.base import BackendError

from .client import ApiError
from .podspec import checkpoint_cleanup_manifest, checkpoint_cleanup_name


class CleanupPending(BackendError):
    """The cleanup pod was started or still runs: the directory is not gone yet."""


def delete_checkpoint(backend: Any, *, namespace: str, claim_name: str, sub_path: str, job_id: int,
                      image: str) -> None:
    name = checkpoint_cleanup_name(job_id)
    try:
        pod = backend.call.json(backend.core.read_namespaced_pod, name, namespace)
    except ApiError as exc:
        if exc.status != 404:
            raise
        manifest = checkpoint_cleanup_manifest(namespace=namespace, claim_name=claim_name, sub_path=sub_path,
                                               job_id=job_id, image=image, run_as_user=backend.run_as_user)
        try:
            backend.call.json(backend.core.create_namespaced_pod, namespace, manifest)
        except ApiError as exc2:
            if exc2.status != 409:
                raise BackendError(f"cleanup pod {name} refused: {exc2.message}") from exc2
        raise CleanupPending(f"cleanup pod {name} started") from None
    phase = (pod.get("status") or {}).get("phase")
    if phase not in ("Succeeded", "Failed"):
        raise CleanupPending(f"cleanup pod {name} is {phase or 'pending'}")
    try:
        backend.call.json(backend.core.delete_namespaced_pod, name, namespace)
    except ApiError as exc:
        if exc.status != 404:
            raise
    if phase == "Failed":
        raise BackendError(f"cleanup pod {name} failed: {(pod.get('status') or {}).get('message') or 'see its log'}")


class CheckpointCleaning:
    """The backend's part that removes expired checkpoint directories."""

    # The image of the pod that deletes an expired checkpoint directory (CHECKPOINT_CLEANUP_IMAGE).
    checkpoint_cleanup_image = "busybox:1.36"

    def delete_checkpoint(self, *, namespace: str, claim_name: str, storage: str, sub_path: str, job_id: int) -> None:
        delete_checkpoint(self, namespace=namespace, claim_name=claim_name, sub_path=sub_path, job_id=job_id,
                          image=self.checkpoint_cleanup_image)
