"""Resizing a running attempt (a resizable job, docs/workloads.md "Resizable jobs"): pods added under the same
rules as an admission's (created gated and pinned, ungated only once every new one exists, the tier's
PriorityClass from the pod set), pods removed through the Eviction API, highest ranks first, never deleted
around a PodDisruptionBudget; the job's own budget follows the size, and every running pod is told the new
size through its size file (an annotation: a running container's environment cannot change)."""

from __future__ import annotations

import logging
from typing import Any

from scheduling.backends.base import (
    SIZE_ANNOTATION,
    BackendError,
    EvictionOutcome,
    PodSet,
)

from .client import ApiError
from .connection import KubeConnection
from .errors import backend_errors
from .eviction import stop_pod
from .podspec import attempt_base_name, pdb_min_available, size_text, validate_podset

log = logging.getLogger(__name__)

class PodResizing(KubeConnection):
    """``resize``: grow (gated creation, then ungating) or shrink (evictions, highest rank first). Uses the
    creation and eviction parts of the backend (``_create_pinned``, ``_ungate``, ``notify``)."""

    @backend_errors
    def resize(self, podset: PodSet, before: tuple[str, ...], after: tuple[str, ...]) -> EvictionOutcome:
        validate_podset(podset)
        if len(after) != podset.pods:
            raise ValueError(f"placement names {len(after)} nodes for {podset.pods} pods")
        if len(after) > len(before):
            outcome = self._grow(podset, len(before), after)
        else:
            outcome = self._shrink(podset, len(after))
        if outcome.status == "done":
            self.notify(job_id=podset.job_id, attempt=podset.attempt, namespace=podset.namespace,  # type: ignore[attr-defined]
                        annotations={SIZE_ANNOTATION: size_text(podset)})
        return outcome

    def _grow(self, podset: PodSet, first: int, after: tuple[str, ...]) -> EvictionOutcome:
        """Create ranks ``first``.. gated and pinned (adopting what a previous try made), then ungate them all;
        the budget widens once they exist."""
        pods = self._attempt_pods(podset.namespace, podset.job_id, podset.attempt)
        if 0 not in pods:
            raise BackendError(f"job {podset.job_id} attempt {podset.attempt}: no pod to grow from")
        to_ungate: list[tuple[dict[str, Any] | None, int]] = []
        for index in range(first, len(after)):
            pod = pods.get(index)
            if pod is None:
                pod = self._create_pinned(podset, index, after[index], gated=True)  # type: ignore[attr-defined]
            else:
                self._check_adoptable(podset, index, pod)  # type: ignore[attr-defined]
            to_ungate.append((pod, index))
        for pod, index in to_ungate:  # every new rank exists now: none starts before all do
            if pod is None:
                self._ungate_created(podset, index, after[index])  # type: ignore[attr-defined]
            else:
                self._ungate(pod, after[index])  # type: ignore[attr-defined]
        self._follow_size(podset)
        return EvictionOutcome("done", pods=tuple(podset.pod_name(i) for i in range(first, len(after))))

    def _shrink(self, podset: PodSet, size: int) -> EvictionOutcome:
        """Narrow the job's own budget to the new size first (else it would refuse the portal's own shrink),
        then evict the ranks from ``size`` on, highest first; "pending" while some are terminating, "blocked"
        at the first refusal (another budget), "done" once they are all gone."""
        self._follow_size(podset)
        pods = self._attempt_pods(podset.namespace, podset.job_id, podset.attempt)
        leaving = sorted((i for i in pods if i >= size), reverse=True)
        if not leaving:
            return EvictionOutcome("done")
        asked: list[str] = []
        for index in leaving:
            pod = pods[index]
            if pod["metadata"].get("deletionTimestamp"):  # (already on its way out)
                asked.append(pod["metadata"]["name"])
                continue
            stopped = stop_pod(self, pod, podset.namespace, partial=bool(asked))
            if stopped is True:
                asked.append(pod["metadata"]["name"])
            elif stopped is not False:
                return stopped
        left = [i for i in self._attempt_pods(podset.namespace, podset.job_id, podset.attempt) if i >= size]
        return EvictionOutcome("pending" if left else "done", pods=tuple(asked))

    def _follow_size(self, podset: PodSet) -> None:
        """The job's own budget at its new size (``pdb_min_available``), read then written with its
        resourceVersion (a 409 is retried by the caller's next try). Nothing without a budget of its own."""
        if podset.pdb_min_available is None:
            return
        name = attempt_base_name(podset.job_id, podset.attempt)
        try:
            pdb = self.call.json(self.policy.read_namespaced_pod_disruption_budget, name, podset.namespace)
        except ApiError as exc:
            if exc.status != 404:
                raise
            self._ensure_pdb(podset)  # type: ignore[attr-defined]
            return
        wanted = pdb_min_available(podset)
        if (pdb.get("spec") or {}).get("minAvailable") == wanted:
            return
        body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {**pdb["metadata"]}, "spec": {**pdb["spec"], "minAvailable": wanted}}
        body.pop("status", None)
        try:
            self.call.json(self.policy.replace_namespaced_pod_disruption_budget, name, podset.namespace, body)
        except ApiError as exc:
            if exc.status == 409:
                raise BackendError(f"PodDisruptionBudget {podset.namespace}/{name} changed meanwhile; retry") from exc
            raise
