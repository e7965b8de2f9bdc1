"""Creating a job attempt's pods and starting them on their nodes: gated creation (adopting what exists),
the admission's pinned creation, and ungating a gang only once every pod exists."""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from typing import Any

from scheduling.backends.base import BackendError, InvalidPodSpec, PodSet

from .client import ApiError
from .errors import GangIncomplete, PodNameTaken, backend_errors, is_patch_test_failure, is_quota_refusal
from .pdbs import DisruptionBudgets
from .podspec import (
    LABEL_POD_INDEX,
    admission_patch,
    fraction_annotations,
    hami_device_uuids,
    pinned_nodes,
    pod_manifest,
    ungate_patch,
    validate_podset,
)
from .quotas import NamespaceQuotas
from .rendezvous import ensure_service
from .routes import ensure_route
from .secrets import ensure_owned_secrets

log = logging.getLogger(__name__)


class PodCreation(DisruptionBudgets, NamespaceQuotas):
    """``ensure_pods`` (gated, adopting), ``start`` (the admission: pinned, all or none of a gang) and ``admit``."""

    @backend_errors
    def ensure_pods(self, podset: PodSet) -> dict[str, str]:  # type: ignore[override]
        """Create the attempt's gated pods (and its PDB if asked); adopt what already exists.

        Returns ``{pod name: "created" | "adopted"}`` (an extension of the interface, which returns None).
        """
        validate_podset(podset)
        self._ensure_secrets(podset)
        if podset.pdb_min_available is not None:
            self._ensure_pdb(podset)
        ensure_service(self, podset)
        ensure_route(self, podset)
        result: dict[str, str] = {}
        for index in range(podset.pods):
            manifest = pod_manifest(podset, index, cluster=self.name, tolerations=self.tolerations,
                                    run_as_user=self.run_as_user, gate=self.gate,
                                    installation=self.installation)
            name = manifest["metadata"]["name"]
            try:
                self.call.json(self.core.create_namespaced_pod, podset.namespace, manifest)
                result[name] = "created"
            except ApiError as exc:
                if exc.status == 409 and exc.reason == "AlreadyExists":
                    self._adopt(podset, index)
                    result[name] = "adopted"
                elif is_quota_refusal(exc):  # quota admission runs first: the pod may exist all the same
                    try:
                        pod = self.call.json(self.core.read_namespaced_pod, name, podset.namespace)
                    except ApiError as exc2:
                        if exc2.status == 404:
                            raise self._quota_exceeded(podset.namespace, exc) from exc
                        raise
                    self._check_adoptable(podset, index, pod)
                    result[name] = "adopted"
                elif exc.status == 404:
                    raise InvalidPodSpec(f"namespace {podset.namespace!r} not found: {exc.message}") from exc
                else:
                    raise
        return result

    def _adopt(self, podset: PodSet, index: int) -> None:
        name = podset.pod_name(index)
        try:
            pod = self.call.json(self.core.read_namespaced_pod, name, podset.namespace)
        except ApiError as exc:
            if exc.status == 404:  # deleted between our create and our read: let the caller retry
                raise BackendError(f"pod {name} vanished while adopting it; retry") from exc
            raise
        self._check_adoptable(podset, index, pod)
        log.info("adopted existing pod %s/%s", podset.namespace, name)

    def _ensure_secrets(self, podset: PodSet) -> None:
        ensure_owned_secrets(self.call, self.core, podset, installation=self.installation, seen=self.secrets_seen)

    # ------------------------------------------------------------------ starting (admission)

    @backend_errors
    def start(self, podset: PodSet, placement: tuple[str, ...], *, fresh: bool = True) -> dict[str, str]:
        """Run the admitted attempt on ``placement``: its pods are created here, each pinned to its node.

        * one pod: one POST of the pod, pinned and without a gate: kube-scheduler binds it at once;
        * a gang: every pod is POSTed gated (and pinned), then each gate is removed with a JSON patch built
          without a read (``test`` + ``remove``): no pod of the gang can start before all exist;
        * ``fresh`` (the first try of this admission): POST straight away. Otherwise (a retry, the reconciler)
          one list of the attempt's pods first, and only the missing ones are POSTed: the API server runs quota
          admission before its AlreadyExists check, so re-POSTing an existing pod would charge the namespace's
          ResourceQuota again (or get 403 once it is full) instead of a harmless 409;
        * 409 AlreadyExists or a 403 quota refusal: read the pod, then decide (adopt it, ungate it if needed);
          a quota refusal for a pod that does not exist raises :class:`QuotaExceeded` for the caller to back
          off with a visible reason.

        Returns ``{pod name: "created" | "adopted" | "running"}``.
        """
        validate_podset(podset)
        if len(placement) != podset.pods:
            raise ValueError(f"placement names {len(placement)} nodes for {podset.pods} pods")
        self._ensure_secrets(podset)
        existing = {} if fresh else self._attempt_pods(podset.namespace, podset.job_id, podset.attempt)
        if podset.pdb_min_available is not None:
            self._ensure_pdb(podset)
        ensure_service(self, podset)  # a gang's pods resolve each other through it from their first second
        ensure_route(self, podset)  # a session's or service's Service and Ingress, before its pod
        gang = podset.pods > 1
        notes = self._fraction_notes(podset, placement)  # a HAMi fraction's shared GPU, named at creation
        result: dict[str, str] = {}
        to_ungate: list[tuple[dict[str, Any] | None, int]] = []  # (pod as read, or None: created as we sent it)
        for index in range(podset.pods):
            name = podset.pod_name(index)
            pod = existing.get(index)
            if pod is None:
                pod = self._create_pinned(podset, index, placement[index], gated=gang, annotations=notes.get(index))
                result[name] = "created" if pod is None else "adopted"
            else:
                self._check_adoptable(podset, index, pod)
                result[name] = "adopted"
            if pod is None:
                if gang:
                    to_ungate.append((None, index))
            elif self.gate in [g.get("name") for g in (pod.get("spec") or {}).get("schedulingGates") or []]:
                to_ungate.append((pod, index))
            else:
                pinned = pinned_nodes(pod) - {placement[index]}
                if pinned:
                    raise BackendError(f"pod {podset.namespace}/{name} is already pinned to {sorted(pinned)}, "
                                       f"not {placement[index]}")
                result[name] = "running"
        for pod, index in to_ungate:
            if pod is None:
                self._ungate_created(podset, index, placement[index])
            else:
                self._ungate(pod, placement[index], notes.get(index))
        return result

    def _create_pinned(self, podset: PodSet, index: int, node: str, *, gated: bool,
                       annotations: dict[str, str] | None = None) -> dict[str, Any] | None:
        """POST the pod pinned to ``node`` (with ``annotations`` besides its own); None when created, else the
        existing pod as read (adopted)."""
        manifest = pod_manifest(podset, index, cluster=self.name, tolerations=self.tolerations,
                                run_as_user=self.run_as_user, gate=self.gate, node=node, gated=gated,
                                installation=self.installation)
        if annotations:
            manifest["metadata"]["annotations"].update(annotations)
        try:
            self.call.json(self.core.create_namespaced_pod, podset.namespace, manifest)
            return None
        except ApiError as exc:
            if exc.status == 404:
                raise InvalidPodSpec(f"namespace {podset.namespace!r} not found: {exc.message}") from exc
            if not (exc.status == 409 and exc.reason == "AlreadyExists") and not is_quota_refusal(exc):
                raise
            try:
                pod = self.call.json(self.core.read_namespaced_pod, podset.pod_name(index), podset.namespace)
            except ApiError as exc2:
                if exc2.status != 404:
                    raise
                if is_quota_refusal(exc):
                    raise self._quota_exceeded(podset.namespace, exc) from exc
                raise BackendError(f"pod {podset.pod_name(index)} vanished while adopting it; retry") from exc2
            self._check_adoptable(podset, index, pod)
            log.info("adopted existing pod %s/%s", podset.namespace, podset.pod_name(index))
            return pod

    def _check_adoptable(self, podset: PodSet, index: int, pod: Mapping[str, Any]) -> None:
        name = podset.pod_name(index)
        labels = pod["metadata"].get("labels") or {}
        if not self.owns(pod, job_id=podset.job_id, attempt=podset.attempt) or labels.get(LABEL_POD_INDEX) != str(index):
            raise PodNameTaken(f"pod {podset.namespace}/{name} exists and is not this job attempt's")
        if pod["metadata"].get("deletionTimestamp"):
            raise BackendError(f"pod {podset.namespace}/{name} is being deleted; retry as a new attempt")

    def _ungate_created(self, podset: PodSet, index: int, node: str) -> None:
        """Remove the gate of a pod we created (gated, pinned) in this call: one PATCH, no read. Anything else
        (the test op fails: someone changed the pod) falls back to reading and :meth:`_ungate`."""
        name = podset.pod_name(index)
        if self._patch_admitted(podset.namespace, name, ungate_patch(self.gate)) is None:
            return
        pod = self.call.json(self.core.read_namespaced_pod, name, podset.namespace)
        self._ungate(pod, node)

    def _patch_admitted(self, namespace: str, name: str, ops: list[dict[str, Any]]) -> ApiError | None:
        """PATCH a pod being admitted: None when it took, the conflict when someone changed the pod first
        (409, or a failed test op) and the caller should read it again. A pod that is gone fails the gang."""
        try:
            self.call.json(self.core.patch_namespaced_pod, name, namespace, ops)
            return None
        except ApiError as exc:
            if exc.status == 404:
                raise GangIncomplete(f"pod {namespace}/{name} vanished during admission") from exc
            if not (exc.status == 409 or is_patch_test_failure(exc)):
                raise
            return exc

    # ------------------------------------------------------------------ admitting

    @backend_errors
    def admit(self, podset: PodSet, placement: tuple[str, ...]) -> None:
        if len(placement) != podset.pods:
            raise ValueError(f"placement names {len(placement)} nodes for {podset.pods} pods")
        pods = self._attempt_pods(podset.namespace, podset.job_id, podset.attempt)
        missing = [podset.pod_name(i) for i in range(podset.pods) if i not in pods]
        if missing:
            raise GangIncomplete(f"job {podset.job_id} attempt {podset.attempt}: missing pods {missing}")
        notes = self._fraction_notes(podset, placement)
        for index in range(podset.pods):
            self._ungate(pods[index], placement[index], notes.get(index))

    def _fraction_notes(self, podset: PodSet, placement: tuple[str, ...]) -> dict[int, dict[str, str]]:
        """Per GPU pod of a HAMi fraction, the annotations that name its shared GPU (``fraction_annotations``),
        from the portal's pods already running on its node (one list per node); none for other jobs."""
        if podset.sharing != "hami" or not podset.gpu_devices:
            return {}
        gpu_pods = [i for i in range(podset.pods) if podset.for_pod(i).gpus_per_pod]
        known: dict[str, dict[int, str]] = {}
        out = {}
        for index, device in zip(gpu_pods, podset.gpu_devices, strict=False):
            node = placement[index]
            if node not in known:
                listed = self.call.json(self.core.list_pod_for_all_namespaces, field_selector=f"spec.nodeName={node}",
                                        label_selector=self.selector)
                known[node] = hami_device_uuids(listed.get("items") or [])
            out[index] = fraction_annotations(device, known[node])
        return out

    def _ungate(self, pod: dict[str, Any], node: str, annotations: dict[str, str] | None = None) -> None:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        for attempt in range(self.conflict_retries + 1):
            ops = admission_patch(pod, node, gate=self.gate, annotations=annotations)
            if not ops:
                return  # gate already gone: admitted before (or by a previous run of this task)
            if pod["metadata"].get("deletionTimestamp"):
                raise BackendError(f"pod {namespace}/{name} is being deleted; cannot admit it")
            pinned = pinned_nodes(pod) - {node}
            if pinned:
                raise BackendError(f"pod {namespace}/{name} is already pinned to {sorted(pinned)}, not {node}")
            conflict = self._patch_admitted(namespace, name, ops)
            if conflict is None:
                return
            if attempt == self.conflict_retries:
                raise BackendError(
                    f"pod {namespace}/{name}: still conflicting after {attempt + 1} tries") from conflict
            log.info("stale pod %s/%s while ungating (%s); re-reading", namespace, name, conflict)
            self.sleep(min(1.0, 0.05 * 2**attempt) * (0.5 + random.random()))  # noqa: S311
            try:
                pod = self.call.json(self.core.read_namespaced_pod, name, namespace)
            except ApiError as exc2:
                if exc2.status == 404:
                    raise GangIncomplete(f"pod {namespace}/{name} vanished during admission") from exc2
                raise
