"""Stopping an attempt's pods: evictions through the Eviction API (never a DELETE that bypasses a
PodDisruptionBudget), clearing an ended attempt, and deleting a cancelled one."""

from __future__ import annotations

from scheduling.backends.base import (
    EVERY_OBJECT,
    AttemptObjects,
    BackendError,
    ClusterUnavailable,
    EvictionOutcome,
)

from .client import ApiError
from .connection import KubeConnection
from .errors import MULTIPLE_PDBS, backend_errors
from .rendezvous import delete_own_pdb, delete_service
from .routes import delete_route

TERMINAL_PHASES = ("Succeeded", "Failed")


def stop_pod(conn: KubeConnection, pod: dict, namespace: str, *, partial: bool) -> bool | EvictionOutcome:
    """Ask one pod to go: an eviction when it runs (its PodDisruptionBudgets decide), a DELETE when it ended or
    was never bound (nothing runs in it to disrupt). True: asked; False: already gone; an outcome "blocked"
    when a budget refuses (``partial``: some of the attempt's pods are gone already). A conflict is an error
    to retry."""
    name = pod["metadata"]["name"]
    runs = ((pod.get("status") or {}).get("phase") not in TERMINAL_PHASES
            and not pod["metadata"].get("deletionTimestamp") and (pod.get("spec") or {}).get("nodeName"))
    try:
        if runs:
            body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
            conn.call.json(conn.core.create_namespaced_pod_eviction, name, namespace, body)
        else:
            conn.call.json(conn.core.delete_namespaced_pod, name, namespace)
    except ApiError as exc:
        if exc.status == 404:
            return False
        if exc.status == 429:
            causes = "; ".join(c.get("message", "") for c in exc.causes if c.get("message"))
            return EvictionOutcome("blocked", pods=(name,), message=causes or exc.message, partial=partial)
        if exc.status == 409:
            raise BackendError(f"eviction of {namespace}/{name} conflicted; retry") from exc
        raise
    except ClusterUnavailable as exc:
        if MULTIPLE_PDBS not in str(exc):
            raise
        # the 500 of a pod under several budgets: a refusal no retry cures until someone changes them
        return EvictionOutcome("blocked", pods=(name,), message=f"{namespace}/{name}: {MULTIPLE_PDBS}",
                               partial=partial)
    return True


class PodEviction(KubeConnection):
    """``evict``, ``remove_pods`` and ``delete_pods``."""

    @backend_errors
    def notify(self, *, job_id: int, attempt: int, namespace: str, annotations) -> tuple[str, ...]:
        """Set ``annotations`` on each of the attempt's pods that still runs (a JSON patch of ``metadata.
        annotations`` only: the spec is untouched, so no immutability rule is in play); the kubelet then updates
        the downward-API file in the running container. A pod gone meanwhile is skipped."""
        told: list[str] = []
        for _, pod in sorted(self._attempt_pods(namespace, job_id, attempt).items()):
            name = pod["metadata"]["name"]
            if pod["metadata"].get("deletionTimestamp") or (pod.get("status") or {}).get("phase") in TERMINAL_PHASES:
                continue
            ops: list[dict] = []
            if pod["metadata"].get("annotations") is None:
                ops.append({"op": "add", "path": "/metadata/annotations", "value": {}})
            ops += [{"op": "add", "path": "/metadata/annotations/" + k.replace("~", "~0").replace("/", "~1"),
                     "value": v} for k, v in sorted(annotations.items())]
            try:
                self.call.json(self.core.patch_namespaced_pod, name, namespace, ops)
                told.append(name)
            except ApiError as exc:
                if exc.status != 404:
                    raise
        return tuple(told)

    @backend_errors
    def evict(self, *, job_id: int, attempt: int, namespace: str) -> EvictionOutcome:
        """POST an Eviction (policy/v1) per pod, in index order; stop at the first 429 (a PDB forbids it).

        Never falls back to DELETE: a blocked eviction is reported as ``blocked`` and the next cycle decides
        again. So is the 500 the API answers for a pod selected by more than one PDB (a misconfiguration no
        retry cures). Pods already terminating count as accepted.
        """
        pods = self._attempt_pods(namespace, job_id, attempt)
        accepted: list[str] = []
        gone: list[str] = []
        for index in sorted(pods):
            name = pods[index]["metadata"]["name"]
            if pods[index]["metadata"].get("deletionTimestamp"):
                accepted.append(name)
                continue
            body = {"apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": name, "namespace": namespace}}
            try:
                self.call.json(self.core.create_namespaced_pod_eviction, name, namespace, body)
                accepted.append(name)
            except ApiError as exc:
                if exc.status == 404:
                    gone.append(name)
                elif exc.status == 429:
                    causes = "; ".join(c.get("message", "") for c in exc.causes if c.get("message"))
                    note = f" (already evicted: {', '.join(accepted)})" if accepted else ""
                    return EvictionOutcome("blocked", pods=(name,), message=(causes or exc.message) + note,
                                          partial=bool(accepted or gone))
                elif exc.status == 409:  # the pod changed under the eviction: transient
                    raise BackendError(f"eviction of {namespace}/{name} conflicted; retry") from exc
                else:
                    raise
            except ClusterUnavailable as exc:
                if MULTIPLE_PDBS not in str(exc):
                    raise
                # 500, but not a failing server: the pod is selected by several PDBs, which the Eviction API
                # never supports; retrying cannot help until someone changes the PDBs.
                note = f" (already evicted: {', '.join(accepted)})" if accepted else ""
                return EvictionOutcome("blocked", pods=(name,), message=f"{namespace}/{name}: {MULTIPLE_PDBS}" + note,
                                       partial=bool(accepted or gone))
        if accepted:
            return EvictionOutcome("accepted", pods=tuple(accepted))
        return EvictionOutcome("gone", pods=tuple(gone))

    @backend_errors
    def remove_pods(self, *, job_id: int, attempt: int, namespace: str, failed: bool = False,
                    objects: AttemptObjects = EVERY_OBJECT) -> EvictionOutcome:
        """Clear an ended attempt's pods without bypassing a PodDisruptionBudget: a pod that no longer runs
        (finished, terminating, or never bound to a node) is deleted; one that still runs is evicted through
        the Eviction API, in index order, stopping at the first refusal (429, or the 500 of a pod under several
        PDBs), which is reported ``blocked`` with ``partial`` when other pods already went. The attempt's own
        PDB is deleted only once no pod of it is left running, so it guards its pods until then; except for an
        attempt that ``failed`` (one of its pods did): its own PDB guarded a run that is over, and counting the
        failed pod out it would allow no eviction ever, so it goes first (other people's PDBs still hold)."""
        if failed and objects.budget:
            delete_own_pdb(self, job_id=job_id, attempt=attempt, namespace=namespace)
        pods = self._attempt_pods(namespace, job_id, attempt)
        removed: list[str] = []
        for index in sorted(pods):
            stopped = stop_pod(self, pods[index], namespace, partial=bool(removed) or len(pods) < max(pods) + 1)
            if stopped is True:
                removed.append(pods[index]["metadata"]["name"])
            elif stopped is not False:
                return stopped
        self._delete_objects(job_id=job_id, attempt=attempt, namespace=namespace, objects=objects,
                             budget=objects.budget and not failed)
        return EvictionOutcome("accepted" if removed else "gone", pods=tuple(removed))

    @backend_errors
    def delete_pods(self, *, job_id: int, attempt: int, namespace: str, grace_period_s: int | None = None,
                    objects: AttemptObjects = EVERY_OBJECT) -> None:
        pods = self._attempt_pods(namespace, job_id, attempt)
        extra = {} if grace_period_s is None else {"grace_period_seconds": grace_period_s}
        for index in sorted(pods):
            try:
                self.call.json(self.core.delete_namespaced_pod, pods[index]["metadata"]["name"], namespace, **extra)
            except ApiError as exc:
                if exc.status != 404:
                    raise
        self._delete_objects(job_id=job_id, attempt=attempt, namespace=namespace, objects=objects,
                             budget=objects.budget)

    def delete_pod(self, *, job_id: int, attempt: int, namespace: str, index: int) -> bool:
        """Delete pod ``index`` at once (grace 0: it has failed, nothing runs in it); True once the API server
        no longer has it. A pod of the same name cannot be created before that."""
        pod = self._attempt_pods(namespace, job_id, attempt).get(index)
        if pod is None:
            return True
        try:
            self.call.json(self.core.delete_namespaced_pod, pod["metadata"]["name"], namespace,
                           grace_period_seconds=0)
        except ApiError as exc:
            if exc.status != 404:
                raise
            return True
        return index not in self._attempt_pods(namespace, job_id, attempt)

    def _delete_objects(self, *, job_id: int, attempt: int, namespace: str, objects: AttemptObjects,
                        budget: bool) -> None:
        """The attempt's objects besides its pods, only the kinds it has: a DELETE of one it never had is a
        404 the API server answers for nothing (one per ended attempt and kind)."""
        if objects.service:
            delete_service(self, job_id=job_id, attempt=attempt, namespace=namespace)
        if objects.route:
            delete_route(self, job_id=job_id, attempt=attempt, namespace=namespace)
        if budget:
            delete_own_pdb(self, job_id=job_id, attempt=attempt, namespace=namespace)
