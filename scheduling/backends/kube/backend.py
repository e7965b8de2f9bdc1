"""``KubernetesBackend``: the portal's jobs as gated pods on a real cluster, within the API server's rules
(unique pod names, scheduling gates only removed, affinity only narrowed while gated, evictions through the
Eviction API; the full list is at the top of tests/fakes/k8s_api.py).

The backend is stateless apart from its HTTP client: every method reads what it needs from the API server and
is safe to run twice (Celery retries, worker crashes). It imports nothing from Django; the portal wires it in
(``SCHEDULING_BACKEND=kubernetes``) and calls the methods of :class:`scheduling.backends.base.ClusterBackend`
plus :meth:`KubernetesBackend.watch_pods`, :meth:`KubernetesBackend.list_pods` and
:meth:`KubernetesBackend.disruption_budgets`.
"""

from __future__ import annotations

import functools
import json
import logging
import random
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, replace
from decimal import Decimal, InvalidOperation
from typing import Any, TypeVar

from kubernetes import client as k8s
from kubernetes.utils.quantity import parse_quantity
from kubernetes.watch.watch import iter_resp_lines

from scheduling.backends.base import (
    MANAGED_BY,
    BackendError,
    BudgetCoverage,
    ClusterBackend,
    ClusterUnavailable,
    EvictionOutcome,
    InvalidPodSpec,
    Inventory,
    LogsUnavailable,
    PodSet,
    PodState,
    QuotaExceeded,
)
from scheduling.core.types import DisruptionBudget, Node

from .client import _TRANSPORT_ERRORS, ApiError, KubeCaller, TokenBucket, build_api_client
from .podspec import (
    ADMISSION_GATE,
    DEFAULT_TOLERATIONS,
    LABEL_ATTEMPT,
    LABEL_JOB_ID,
    LABEL_MANAGED_BY,
    LABEL_POD_INDEX,
    MAIN_CONTAINER,
    PORTAL_SELECTOR,
    admission_patch,
    attempt_base_name,
    attempt_selector,
    is_ours,
    pdb_manifest,
    pinned_nodes,
    pod_manifest,
    ungate_patch,
    validate_podset,
)
from .secrets import delete_owned_secret, ensure_owned_secrets
from .status import pod_state

log = logging.getLogger(__name__)

TERMINAL_PHASES = ("Succeeded", "Failed")
NOT_TERMINAL = "status.phase!=Succeeded,status.phase!=Failed"
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-", "amd.com/gpu", "gpu.intel.com/")
SYSTEM_PRIORITY_PREFIX = "system-"
# The Eviction API's answer (500) for a pod selected by more than one PodDisruptionBudget (eviction.go).
MULTIPLE_PDBS = "more than one PodDisruptionBudget"
# The ResourceQuota admission plugin's 403 (it runs before the AlreadyExists check of storage).
EXCEEDED_QUOTA = "exceeded quota"


def _is_quota_refusal(err: ApiError) -> bool:
    return err.status == 403 and EXCEEDED_QUOTA in err.message


class GangIncomplete(BackendError):
    """Not every pod of a gang exists (yet): nothing was ungated. Retry after ``ensure_pods``."""


class PodNameTaken(BackendError):
    """A pod with the portal's deterministic name exists but is not the portal's (or not this attempt's)."""


class PriorityClassNotOwned(BackendError):
    """A PriorityClass the portal should manage exists, differs, and is not labelled as the portal's."""


@dataclass(frozen=True, slots=True)
class FlavorRule:
    """``resource`` on nodes carrying all ``labels`` is the portal flavor ``flavor``.

    Example: ``FlavorRule("a100-80gb", "nvidia.com/gpu", (("gpu-type", "a100"),))`` and
    ``FlavorRule("a100-mig-3g.40gb", "nvidia.com/mig-3g.40gb", (("gpu-type", "a100"),))``.
    """

    flavor: str
    resource: str
    labels: tuple[tuple[str, str], ...] = ()

    def matches(self, resource: str, node_labels: Mapping[str, str]) -> bool:
        return resource == self.resource and all(node_labels.get(k) == v for k, v in self.labels)


F = TypeVar("F", bound=Callable[..., Any])


def _mapped(fn: F) -> F:
    """Public methods never leak ``ApiError``: unhandled 4xx become ``BackendError`` subclasses."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except ApiError as exc:
            raise exc.to_backend_error() from exc

    return wrapper  # type: ignore[return-value]


def _quantity(value: Any) -> Decimal:
    try:
        return parse_quantity(value)
    except (ValueError, TypeError, InvalidOperation):
        return Decimal(0)


def pod_request(pod: Mapping[str, Any], resource: str) -> int:
    """Effective request of ``resource`` by a pod: max(sum over containers, any init container), as the
    scheduler counts it. Extended resources have requests == limits, so limits stand in for absent requests."""

    def one(container: Mapping[str, Any]) -> Decimal:
        res = container.get("resources") or {}
        amount = (res.get("requests") or {}).get(resource)
        if amount is None:
            amount = (res.get("limits") or {}).get(resource)
        return _quantity(amount) if amount is not None else Decimal(0)

    spec = pod.get("spec") or {}
    total = sum((one(c) for c in spec.get("containers") or []), Decimal(0))
    init = max((one(c) for c in spec.get("initContainers") or []), default=Decimal(0))
    return int(max(total, init))


def _tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        op = tol.get("operator", "Equal")
        if op == "Exists" and (not tol.get("key") or tol.get("key") == taint.get("key")):
            return True
        if op == "Equal" and tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def selector_matches(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """A ``metav1.LabelSelector`` as the Eviction API applies a PDB's: a null selector selects no pod, an
    empty one (``{}``) every pod of the namespace (policy/v1); matchLabels and matchExpressions are ANDed.
    A requirement the API server could not parse makes the selector invalid, which matches nothing."""
    if selector is None:
        return False
    for key, value in (selector.get("matchLabels") or {}).items():
        if labels.get(key) != value:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), set(expr.get("values") or ())
        if op == "In":
            ok = key in labels and labels[key] in values
        elif op == "NotIn":
            ok = key not in labels or labels[key] not in values
        elif op == "Exists":
            ok = key in labels
        elif op == "DoesNotExist":
            ok = key not in labels
        else:
            return False
        if not ok:
            return False
    return True


def _pdb_allows(pdb: Mapping[str, Any]) -> int:
    """Disruptions a PDB allows now, as the Eviction API decides: none while its status lags its spec
    (``observedGeneration < generation`` answers 429), none when negative (403), else ``disruptionsAllowed``."""
    meta, status = pdb.get("metadata") or {}, pdb.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return 0
    return max(0, int(status.get("disruptionsAllowed") or 0))


def _with_gpus(state: PodState | None, pod: Mapping[str, Any]) -> PodState | None:
    """The pod's GPU request (the first GPU-like resource of its main container), for what a terminating pod
    still holds on its node."""
    if state is None:
        return None
    for container in (pod.get("spec") or {}).get("containers") or []:
        for resource in sorted((container.get("resources") or {}).get("limits") or {}):
            if resource.startswith(GPU_RESOURCE_PREFIXES):
                return replace(state, gpus=pod_request(pod, resource), gpu_resource=resource)
    return state


def _is_patch_test_failure(err: ApiError) -> bool:
    return err.status == 422 and "test" in err.message.lower()


class KubernetesBackend(ClusterBackend):
    """One Kubernetes cluster behind the portal's ``ClusterBackend`` interface.

    The portal creates a job's pods when it admits the job (:meth:`start`), never while it is queued: a gated
    pod counts against its namespace's ResourceQuota, so a long queue would fill the quota (docs/kubernetes.md).

    Configuration (first match): ``api_client`` (any configured ``kubernetes.client.ApiClient``), ``host``
    (plain URL, no auth: tests), ``kubeconfig`` path (+ ``context``), in-cluster service account,
    ``$KUBECONFIG``/``~/.kube/config``.

    ``flavors`` maps (resource name, node labels) to portal flavor names for the inventory; without rules a
    flavor is derived from the node's ``gpu-type`` label (``a100`` or ``a100-mig-3g.40gb``).
    """

    def __init__(
        self,
        *,
        name: str = "default",
        api_client: k8s.ApiClient | None = None,
        host: str | None = None,
        kubeconfig: str | None = None,
        kubeconfig_dict: dict[str, Any] | None = None,
        context: str | None = None,
        in_cluster: bool | None = None,
        flavors: Sequence[FlavorRule] = (),
        qps: float = 20.0,
        burst: int = 40,
        timeout_s: float = 10.0,
        connect_timeout_s: float = 3.0,
        watch_timeout_s: int = 300,
        conflict_retries: int = 5,
        page_size: int = 500,
        tolerations: Sequence[Mapping[str, Any]] = DEFAULT_TOLERATIONS,
        run_as_user: int | None = 1000,
        gate: str = ADMISSION_GATE,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.name = name
        self.api_client = build_api_client(
            api_client=api_client, host=host, kubeconfig=kubeconfig, kubeconfig_dict=kubeconfig_dict,
            context=context, in_cluster=in_cluster,
        )
        self.core = k8s.CoreV1Api(self.api_client)
        self.policy = k8s.PolicyV1Api(self.api_client)
        self.scheduling = k8s.SchedulingV1Api(self.api_client)
        self.flavors = tuple(flavors)
        self.watch_timeout_s = int(watch_timeout_s)
        self.conflict_retries = int(conflict_retries)
        self.page_size = int(page_size)
        self.tolerations = tuple(tolerations)
        self.run_as_user = run_as_user
        self.gate = gate
        self.sleep = sleep
        self.call = KubeCaller(TokenBucket(qps, burst, sleep=sleep), connect_timeout_s=connect_timeout_s,
                               timeout_s=timeout_s)

    creates_pods_at_admission = True

    def close(self) -> None:
        self.api_client.close()

    # ------------------------------------------------------------------ reading

    def _attempt_pods(self, namespace: str, job_id: int, attempt: int) -> dict[int, dict[str, Any]]:
        """The attempt's pods by index, from one label-selected list."""
        data = self.call.json(self.core.list_namespaced_pod, namespace,
                              label_selector=attempt_selector(job_id, attempt))
        pods: dict[int, dict[str, Any]] = {}
        for pod in data.get("items") or []:
            try:
                pods[int(pod["metadata"]["labels"][LABEL_POD_INDEX])] = pod
            except (KeyError, ValueError):
                continue
        return pods

    @_mapped
    def attempt_pods(self, *, job_id: int, attempt: int, namespace: str) -> tuple[PodState, ...]:
        """One attempt's pods as ``PodState``s, from one label-selected list."""
        pods = self._attempt_pods(namespace, job_id, attempt)
        return tuple(s for s in (pod_state(pods[i], gate=self.gate) for i in sorted(pods)) if s is not None)

    @_mapped
    def list_pods(self) -> tuple[PodState, ...]:
        """All of the portal's pods in the cluster (every namespace, every phase): what the reconciler compares
        with the database."""
        items, _ = self.call.list_all(self.core.list_pod_for_all_namespaces, label_selector=PORTAL_SELECTOR,
                                      page_size=self.page_size)
        return tuple(s for s in (_with_gpus(pod_state(p, gate=self.gate), p) for p in items) if s is not None)

    @_mapped
    def inventory(self) -> Inventory:
        """Three lists (more only when paginating): nodes, non-terminated pods of everyone, the portal's pods."""
        nodes, _ = self.call.list_all(self.core.list_node, page_size=self.page_size)
        running, _ = self.call.list_all(self.core.list_pod_for_all_namespaces, field_selector=NOT_TERMINAL,
                                        page_size=self.page_size)
        portal_pods = self.list_pods()

        others_by_node: dict[str, list[dict[str, Any]]] = {}
        for pod in running:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and not is_ours(pod):
                others_by_node.setdefault(node, []).append(pod)

        entries: list[Node] = []
        for node in nodes:
            entries.extend(self._node_entries(node, others_by_node.get(node["metadata"]["name"], [])))
        entries.sort(key=lambda n: (n.name, n.flavor))
        return Inventory(nodes=tuple(entries), pods=portal_pods)

    def _is_gpu_resource(self, resource: str) -> bool:
        return resource.startswith(GPU_RESOURCE_PREFIXES) or any(r.resource == resource for r in self.flavors)

    def resolve_flavor(self, resource: str, node_labels: Mapping[str, str]) -> str | None:
        if self.flavors:
            for rule in self.flavors:
                if rule.matches(resource, node_labels):
                    return rule.flavor
            return None
        base = node_labels.get("gpu-type") or resource.split("/", 1)[0]
        if resource.startswith("nvidia.com/mig-"):
            return f"{base}-mig-{resource.removeprefix('nvidia.com/mig-')}"
        return base

    def _node_entries(self, node: Mapping[str, Any], others: list[dict[str, Any]]) -> list[Node]:
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        labels: dict[str, str] = dict(meta.get("labels") or {})
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        schedulable = ready and not spec.get("unschedulable", False)
        taints = tuple(sorted({
            t["key"] for t in spec.get("taints") or []
            if t.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(self.tolerations, t)
        }))
        out = []
        for resource, amount in sorted((status.get("allocatable") or {}).items()):
            if not self._is_gpu_resource(resource):
                continue
            flavor = self.resolve_flavor(resource, labels)
            gpus = int(_quantity(amount))
            if flavor is None or gpus <= 0:
                continue
            used = sum(pod_request(p, resource) for p in others)
            out.append(Node(
                name=meta["name"], flavor=flavor, gpus=gpus, used_by_others=min(used, gpus), cluster=self.name,
                labels=tuple(sorted(labels.items())), taints=taints, schedulable=schedulable,
            ))
        return out

    @_mapped
    def disruption_budgets(self) -> tuple[DisruptionBudget, ...]:
        """The portal's PodDisruptionBudgets (one list call), named ``namespace/name`` as the snapshot expects."""
        items, _ = self.call.list_all(self.policy.list_pod_disruption_budget_for_all_namespaces,
                                      label_selector=PORTAL_SELECTOR, page_size=self.page_size)
        return tuple(sorted(
            (DisruptionBudget(name=f"{p['metadata']['namespace']}/{p['metadata']['name']}",
                              disruptions_allowed=int((p.get("status") or {}).get("disruptionsAllowed", 0)))
             for p in items),
            key=lambda b: b.name,
        ))

    @_mapped
    def budget_coverage(self) -> BudgetCoverage:
        """Every PodDisruptionBudget (the portal's and anyone else's) over the portal's evictable pods: two
        lists, the portal's running pods and the PDBs of all namespaces (only those of the pods' namespaces are
        used). Not cached: ``disruptionsAllowed`` moves with every eviction and every pod that becomes ready.

        Kubernetes semantics (``pkg/registry/core/pod/storage/eviction.go``): a pod is guarded by the PDBs of
        its namespace whose selector matches its labels; Pending, terminated and terminating pods are evicted
        without a PDB check, so only Running pods count. A pod selected by more than one PDB cannot be evicted
        at all (500 "more than one PodDisruptionBudget"): such a set of PDBs becomes a budget allowing 0,
        named ``ns/a & ns/b``. Unready pods are charged like ready ones (conservative: the API may let them go
        without charging the budget).
        """
        pods, _ = self.call.list_all(self.core.list_pod_for_all_namespaces, label_selector=PORTAL_SELECTOR,
                                     field_selector="status.phase=Running", page_size=self.page_size)
        pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        if not pods:
            return BudgetCoverage()
        namespaces = {p["metadata"]["namespace"] for p in pods}
        items, _ = self.call.list_all(self.policy.list_pod_disruption_budget_for_all_namespaces,
                                      page_size=self.page_size)
        by_ns: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for pdb in items:
            ns = pdb["metadata"].get("namespace", "")
            if ns in namespaces:
                by_ns.setdefault(ns, []).append((f"{ns}/{pdb['metadata']['name']}", pdb))
        budgets: dict[str, int] = {}
        jobs: dict[tuple[int, int], set[str]] = {}
        for pod in pods:
            meta = pod["metadata"]
            labels = meta.get("labels") or {}
            try:
                key = (int(labels[LABEL_JOB_ID]), int(labels[LABEL_ATTEMPT]))
            except (KeyError, ValueError):
                continue
            covering = sorted((name, pdb) for name, pdb in by_ns.get(meta["namespace"], ())
                              if selector_matches((pdb.get("spec") or {}).get("selector"), labels))
            if not covering:
                continue
            if len(covering) == 1:
                name, pdb = covering[0]
                budgets[name] = _pdb_allows(pdb)
            else:
                name = " & ".join(n for n, _ in covering)
                budgets[name] = 0
            jobs.setdefault(key, set()).add(name)
        return BudgetCoverage(
            budgets=tuple(DisruptionBudget(name=n, disruptions_allowed=a) for n, a in sorted(budgets.items())),
            jobs={k: tuple(sorted(v)) for k, v in sorted(jobs.items())},
        )

    # ------------------------------------------------------------------ creating

    @_mapped
    def ensure_pods(self, podset: PodSet) -> dict[str, str]:  # type: ignore[override]
        """Create the attempt's gated pods (and its PDB if asked); adopt what already exists.

        Returns ``{pod name: "created" | "adopted"}`` (an extension of the interface, which returns None).
        """
        validate_podset(podset)
        ensure_owned_secrets(self.call, self.core, podset)
        if podset.pdb_min_available is not None:
            self._ensure_pdb(podset)
        result: dict[str, str] = {}
        for index in range(podset.pods):
            manifest = pod_manifest(podset, index, cluster=self.name, tolerations=self.tolerations,
                                    run_as_user=self.run_as_user, gate=self.gate)
            name = manifest["metadata"]["name"]
            try:
                self.call.json(self.core.create_namespaced_pod, podset.namespace, manifest)
                result[name] = "created"
            except ApiError as exc:
                if exc.status == 409 and exc.reason == "AlreadyExists":
                    self._adopt(podset, index)
                    result[name] = "adopted"
                elif _is_quota_refusal(exc):  # quota admission runs first: the pod may exist all the same
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

    def _ensure_pdb(self, podset: PodSet) -> None:
        manifest = pdb_manifest(podset)
        name = manifest["metadata"]["name"]
        try:
            self.call.json(self.policy.create_namespaced_pod_disruption_budget, podset.namespace, manifest)
        except ApiError as exc:
            if exc.status != 409:
                raise
            existing = self.call.json(self.policy.read_namespaced_pod_disruption_budget, name, podset.namespace)
            if not is_ours(existing, job_id=podset.job_id, attempt=podset.attempt):
                raise BackendError(f"PodDisruptionBudget {podset.namespace}/{name} exists and is not ours") from exc


    @_mapped
    def delete_owned_secret(self, *, namespace: str, name: str) -> bool:
        return delete_owned_secret(self.call, self.core, namespace, name)

    # ------------------------------------------------------------------ starting (admission)

    @_mapped
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
        ensure_owned_secrets(self.call, self.core, podset)
        existing = {} if fresh else self._attempt_pods(podset.namespace, podset.job_id, podset.attempt)
        if podset.pdb_min_available is not None:
            self._ensure_pdb(podset)
        gang = podset.pods > 1
        result: dict[str, str] = {}
        to_ungate: list[tuple[dict[str, Any] | None, int]] = []  # (pod as read, or None: created as we sent it)
        for index in range(podset.pods):
            name = podset.pod_name(index)
            pod = existing.get(index)
            if pod is None:
                pod = self._create_pinned(podset, index, placement[index], gated=gang)
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
                self._ungate(pod, placement[index])
        return result

    def _create_pinned(self, podset: PodSet, index: int, node: str, *, gated: bool) -> dict[str, Any] | None:
        """POST the pod pinned to ``node``; None when created, else the existing pod as read (adopted)."""
        manifest = pod_manifest(podset, index, cluster=self.name, tolerations=self.tolerations,
                                run_as_user=self.run_as_user, gate=self.gate, node=node, gated=gated)
        try:
            self.call.json(self.core.create_namespaced_pod, podset.namespace, manifest)
            return None
        except ApiError as exc:
            if exc.status == 404:
                raise InvalidPodSpec(f"namespace {podset.namespace!r} not found: {exc.message}") from exc
            if not (exc.status == 409 and exc.reason == "AlreadyExists") and not _is_quota_refusal(exc):
                raise
            try:
                pod = self.call.json(self.core.read_namespaced_pod, podset.pod_name(index), podset.namespace)
            except ApiError as exc2:
                if exc2.status != 404:
                    raise
                if _is_quota_refusal(exc):
                    raise self._quota_exceeded(podset.namespace, exc) from exc
                raise BackendError(f"pod {podset.pod_name(index)} vanished while adopting it; retry") from exc2
            self._check_adoptable(podset, index, pod)
            log.info("adopted existing pod %s/%s", podset.namespace, podset.pod_name(index))
            return pod

    def _check_adoptable(self, podset: PodSet, index: int, pod: Mapping[str, Any]) -> None:
        name = podset.pod_name(index)
        labels = pod["metadata"].get("labels") or {}
        if not is_ours(pod, job_id=podset.job_id, attempt=podset.attempt) or labels.get(LABEL_POD_INDEX) != str(index):
            raise PodNameTaken(f"pod {podset.namespace}/{name} exists and is not this job attempt's")
        if pod["metadata"].get("deletionTimestamp"):
            raise BackendError(f"pod {podset.namespace}/{name} is being deleted; retry as a new attempt")

    def _ungate_created(self, podset: PodSet, index: int, node: str) -> None:
        """Remove the gate of a pod we created (gated, pinned) in this call: one PATCH, no read. Anything else
        (the test op fails: someone changed the pod) falls back to reading and :meth:`_ungate`."""
        name = podset.pod_name(index)
        try:
            self.call.json(self.core.patch_namespaced_pod, name, podset.namespace, ungate_patch(self.gate))
            return
        except ApiError as exc:
            if exc.status == 404:
                raise GangIncomplete(f"pod {podset.namespace}/{name} vanished during admission") from exc
            if not (exc.status == 409 or _is_patch_test_failure(exc)):
                raise
        pod = self.call.json(self.core.read_namespaced_pod, name, podset.namespace)
        self._ungate(pod, node)

    # ------------------------------------------------------------------ admitting

    @_mapped
    def admit(self, podset: PodSet, placement: tuple[str, ...]) -> None:
        if len(placement) != podset.pods:
            raise ValueError(f"placement names {len(placement)} nodes for {podset.pods} pods")
        pods = self._attempt_pods(podset.namespace, podset.job_id, podset.attempt)
        missing = [podset.pod_name(i) for i in range(podset.pods) if i not in pods]
        if missing:
            raise GangIncomplete(f"job {podset.job_id} attempt {podset.attempt}: missing pods {missing}")
        for index in range(podset.pods):
            self._ungate(pods[index], placement[index])

    def _ungate(self, pod: dict[str, Any], node: str) -> None:
        namespace, name = pod["metadata"]["namespace"], pod["metadata"]["name"]
        for attempt in range(self.conflict_retries + 1):
            ops = admission_patch(pod, node, gate=self.gate)
            if not ops:
                return  # gate already gone: admitted before (or by a previous run of this task)
            if pod["metadata"].get("deletionTimestamp"):
                raise BackendError(f"pod {namespace}/{name} is being deleted; cannot admit it")
            pinned = pinned_nodes(pod) - {node}
            if pinned:
                raise BackendError(f"pod {namespace}/{name} is already pinned to {sorted(pinned)}, not {node}")
            try:
                self.call.json(self.core.patch_namespaced_pod, name, namespace, ops)
                return
            except ApiError as exc:
                if exc.status == 404:
                    raise GangIncomplete(f"pod {namespace}/{name} vanished during admission") from exc
                if not (exc.status == 409 or _is_patch_test_failure(exc)):
                    raise
                if attempt == self.conflict_retries:
                    raise BackendError(f"pod {namespace}/{name}: still conflicting after {attempt + 1} tries") from exc
                log.info("stale pod %s/%s while ungating (%s); re-reading", namespace, name, exc)
                self.sleep(min(1.0, 0.05 * 2**attempt) * (0.5 + random.random()))  # noqa: S311
                try:
                    pod = self.call.json(self.core.read_namespaced_pod, name, namespace)
                except ApiError as exc2:
                    if exc2.status == 404:
                        raise GangIncomplete(f"pod {namespace}/{name} vanished during admission") from exc2
                    raise

    # ------------------------------------------------------------------ stopping

    @_mapped
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

    @_mapped
    def remove_pods(self, *, job_id: int, attempt: int, namespace: str) -> EvictionOutcome:
        """Clear an ended attempt's pods without bypassing a PodDisruptionBudget: a pod that no longer runs
        (finished, terminating, or never bound to a node) is deleted; one that still runs is evicted through
        the Eviction API, in index order, stopping at the first refusal (429, or the 500 of a pod under several
        PDBs), which is reported ``blocked`` with ``partial`` when other pods already went. The attempt's own
        PDB is deleted only once no pod of it is left running, so it guards its pods until then."""
        pods = self._attempt_pods(namespace, job_id, attempt)
        removed: list[str] = []
        for index in sorted(pods):
            pod = pods[index]
            name = pod["metadata"]["name"]
            phase = (pod.get("status") or {}).get("phase")
            runs = (phase not in TERMINAL_PHASES and not pod["metadata"].get("deletionTimestamp")
                    and (pod.get("spec") or {}).get("nodeName"))
            try:
                if runs:
                    body = {"apiVersion": "policy/v1", "kind": "Eviction",
                            "metadata": {"name": name, "namespace": namespace}}
                    self.call.json(self.core.create_namespaced_pod_eviction, name, namespace, body)
                else:
                    self.call.json(self.core.delete_namespaced_pod, name, namespace)
                removed.append(name)
            except ApiError as exc:
                if exc.status == 404:
                    continue
                if exc.status == 429:
                    causes = "; ".join(c.get("message", "") for c in exc.causes if c.get("message"))
                    return EvictionOutcome("blocked", pods=(name,), message=causes or exc.message,
                                           partial=bool(removed) or len(pods) < max(pods) + 1)
                if exc.status == 409:
                    raise BackendError(f"eviction of {namespace}/{name} conflicted; retry") from exc
                raise
            except ClusterUnavailable as exc:
                if MULTIPLE_PDBS not in str(exc):
                    raise
                return EvictionOutcome("blocked", pods=(name,), message=f"{namespace}/{name}: {MULTIPLE_PDBS}",
                                       partial=bool(removed))
        try:
            self.call.json(self.policy.delete_namespaced_pod_disruption_budget,
                           attempt_base_name(job_id, attempt), namespace)
        except ApiError as exc:
            if exc.status != 404:
                raise
        return EvictionOutcome("accepted" if removed else "gone", pods=tuple(removed))

    @_mapped
    def namespace_quota_version(self, namespace: str) -> str:
        return self._quota_reading(namespace)[0]

    def _quota_reading(self, namespace: str) -> tuple[str, dict[str, dict[str, dict[str, str]]]]:
        """One list of the namespace's ResourceQuotas: (``name@resourceVersion,...`` sorted, {name: hard/used})."""
        items = self.call.json(self.core.list_namespaced_resource_quota, namespace).get("items") or []
        version = ",".join(sorted(f"{q['metadata']['name']}@{q['metadata'].get('resourceVersion', '')}"
                                  for q in items))
        quotas = {q["metadata"]["name"]: {"hard": dict((q.get("status") or {}).get("hard") or {}),
                                          "used": dict((q.get("status") or {}).get("used") or {})} for q in items}
        return version, quotas

    def _quota_exceeded(self, namespace: str, exc: ApiError) -> QuotaExceeded:
        """The refusal, with the namespace's quotas as read right after it (so the portal can tell when they
        change); a failed read leaves the version empty (the refusal then only expires with time)."""
        try:
            version, quotas = self._quota_reading(namespace)
        except (ApiError, BackendError) as err:
            log.warning("could not read the ResourceQuotas of %s: %s", namespace, err)
            version, quotas = "", {}
        return QuotaExceeded(f"{namespace}: {exc.message}", namespace=namespace, quota_version=version,
                             quotas=quotas)

    @_mapped
    def delete_pods(self, *, job_id: int, attempt: int, namespace: str, grace_period_s: int | None = None) -> None:
        pods = self._attempt_pods(namespace, job_id, attempt)
        extra = {} if grace_period_s is None else {"grace_period_seconds": grace_period_s}
        for index in sorted(pods):
            try:
                self.call.json(self.core.delete_namespaced_pod, pods[index]["metadata"]["name"], namespace, **extra)
            except ApiError as exc:
                if exc.status != 404:
                    raise
        try:
            self.call.json(self.policy.delete_namespaced_pod_disruption_budget,
                           attempt_base_name(job_id, attempt), namespace)
        except ApiError as exc:
            if exc.status != 404:
                raise

    # ------------------------------------------------------------------ logs

    @_mapped
    def logs(
        self,
        *,
        job_id: int,
        attempt: int,
        namespace: str,
        tail_lines: int = 200,
        follow: bool = False,
        follow_idle_timeout_s: float = 300.0,
    ) -> Iterator[str]:
        """Lines of the attempt's first pod's main container. The request is made now (errors raise here:
        :class:`LogsUnavailable` when there is no pod or it has not started); lines are read lazily. With
        ``follow`` the iterator ends when the pod ends or after ``follow_idle_timeout_s`` without output."""
        pods = self._attempt_pods(namespace, job_id, attempt)
        if 0 not in pods:
            raise LogsUnavailable(f"job {job_id} attempt {attempt} has no pod in {namespace}")
        name = pods[0]["metadata"]["name"]
        kwargs: dict[str, Any] = {"container": MAIN_CONTAINER, "follow": follow}
        if tail_lines is not None and tail_lines >= 0:
            kwargs["tail_lines"] = int(tail_lines)
        try:
            resp = self.call.raw(self.core.read_namespaced_pod_log, name, namespace,
                                 read_timeout_s=follow_idle_timeout_s if follow else None, **kwargs)
        except ApiError as exc:
            if exc.status in (400, 404):
                raise LogsUnavailable(exc.message or str(exc)) from exc
            raise
        except ClusterUnavailable as exc:
            # The API server proxies logs from the node's kubelet; a kubelet that does not answer (down, no
            # logs endpoint, a kubelet-less test control plane) comes back as a 5xx on this one call, while
            # the list just above worked: the logs are unavailable, the cluster is not.
            raise LogsUnavailable(f"logs of {namespace}/{name} are unavailable: {exc}") from exc
        return self._log_lines(resp)

    @staticmethod
    def _log_lines(resp: Any) -> Iterator[str]:
        try:
            yield from iter_resp_lines(resp)
        except _TRANSPORT_ERRORS:
            return  # idle follow timed out or the stream was cut: the caller may call again
        finally:
            resp.release_conn()

    # ------------------------------------------------------------------ priority classes

    @_mapped
    def ensure_priority_classes(
        self,
        classes: Mapping[str, int],
        *,
        preemption_policy: str | Mapping[str, str] = "Never",
        descriptions: Mapping[str, str] | None = None,
    ) -> list[str]:
        """Create or update the tier PriorityClasses; returns what changed (``"created ai-realtime"``, ...).

        ``preemptionPolicy`` defaults to ``Never``: the portal decides preemption itself (Eviction API, PDBs,
        cooldown), so kube-scheduler must not preempt on its own. ``value`` and ``preemptionPolicy`` are
        immutable in Kubernetes: for the portal's own classes a change means delete + create (running pods keep
        their priority); a class the portal does not own (no ``app.kubernetes.io/managed-by=gpu-portal``) is
        never touched: if it differs, :class:`PriorityClassNotOwned` is raised before anything changes.
        """
        descriptions = descriptions or {}
        existing_items, _ = self.call.list_all(self.scheduling.list_priority_class, page_size=self.page_size)
        existing = {pc["metadata"]["name"]: pc for pc in existing_items}
        plan: list[tuple[str, dict[str, Any], dict[str, Any] | None]] = []
        refused: list[str] = []
        for name, value in sorted(classes.items()):
            policy = preemption_policy if isinstance(preemption_policy, str) else preemption_policy.get(name, "Never")
            desired = {
                "apiVersion": "scheduling.k8s.io/v1",
                "kind": "PriorityClass",
                "metadata": {"name": name, "labels": {LABEL_MANAGED_BY: MANAGED_BY}},
                "value": int(value),
                "preemptionPolicy": policy,
                "globalDefault": False,
                "description": descriptions.get(name, f"gpu-portal tier class {name}"),
            }
            current = existing.get(name)
            if name.startswith(SYSTEM_PRIORITY_PREFIX):
                refused.append(f"{name}: system classes are reserved")
            elif current is None:
                plan.append(("create", desired, None))
            elif not is_ours(current):
                if (current.get("value"), current.get("preemptionPolicy", "PreemptLowerPriority")) != (value, policy):
                    refused.append(
                        f"{name}: exists with value {current.get('value')} / "
                        f"{current.get('preemptionPolicy', 'PreemptLowerPriority')} and is not managed by {MANAGED_BY}"
                    )
            elif (current.get("value"), current.get("preemptionPolicy", "PreemptLowerPriority")) != (value, policy):
                plan.append(("recreate", desired, current))
            elif current.get("globalDefault") or (
                name in descriptions and current.get("description") != desired["description"]
            ):  # descriptions are only enforced when given: an administrator's wording is kept otherwise
                if name not in descriptions:
                    desired["description"] = current.get("description", "")
                plan.append(("update", desired, current))
        if refused:
            raise PriorityClassNotOwned("refusing to change PriorityClasses: " + "; ".join(refused))
        changes = []
        for action, desired, current in plan:
            name = desired["metadata"]["name"]
            if action == "create":
                self._create_priority_class(desired)
                changes.append(f"created {name} ({desired['value']})")
            elif action == "update":
                body = json.loads(json.dumps(desired))
                body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]  # type: ignore[index]
                self.call.json(self.scheduling.replace_priority_class, name, body)
                changes.append(f"updated {name}")
            else:
                self.call.json(self.scheduling.delete_priority_class, name)
                self._create_priority_class(desired)
                changes.append(f"recreated {name} ({current['value']} -> {desired['value']})")  # type: ignore[index]
        return changes

    def _create_priority_class(self, desired: dict[str, Any]) -> None:
        try:
            self.call.json(self.scheduling.create_priority_class, desired)
        except ApiError as exc:
            if exc.status != 409:
                raise
            # Created concurrently (another worker starting): fine if it is ours and equal.
            current = self.call.json(self.scheduling.read_priority_class, desired["metadata"]["name"])
            if not is_ours(current) or current.get("value") != desired["value"]:
                raise PriorityClassNotOwned(f"{desired['metadata']['name']} was created concurrently by someone else")

    # ------------------------------------------------------------------ watching

    def watch_pods(
        self,
        resource_version: str | None = None,
        *,
        known: Iterable[PodState] = (),
        timeout_s: int | None = None,
        max_failures: int = 5,
        stop: threading.Event | None = None,
    ) -> PodWatch:
        """Watch the portal's pods (label selector, all namespaces): iterate to get ``(event_type, PodState)``.

        ``event_type`` is ``ADDED`` / ``MODIFIED`` / ``DELETED``. Without ``resource_version`` it starts with a
        list (every current pod as ``ADDED``). On 410 Gone (resourceVersion too old) it re-lists: current pods
        come as ``ADDED``/``MODIFIED`` and pods seen before (or passed in ``known``) that vanished meanwhile as
        ``DELETED``; then it resumes. Server-side timeouts reconnect from the last resourceVersion (kept in
        ``.resource_version`` for the caller to persist). Transport errors back off exponentially; after
        ``max_failures`` consecutive failures :class:`ClusterUnavailable` is raised. Set ``stop`` (or call
        ``.stop()``) to end the iteration.
        """
        return PodWatch(self, resource_version, known=known, timeout_s=timeout_s or self.watch_timeout_s,
                        max_failures=max_failures, stop=stop)


class PodWatch:
    """Iterator over ``(event_type, PodState)`` of the portal's pods; see :meth:`KubernetesBackend.watch_pods`."""

    def __init__(self, backend: KubernetesBackend, resource_version: str | None, *, known: Iterable[PodState],
                 timeout_s: int, max_failures: int, stop: threading.Event | None) -> None:
        self.backend = backend
        self.resource_version = resource_version or ""
        self.timeout_s = int(timeout_s)
        self.max_failures = max_failures
        self.stop_event = stop or threading.Event()
        self.relists = 0
        self._known: dict[tuple[str, str], PodState] = {(p.namespace, p.name): p for p in known}
        self._resp: Any = None

    def stop(self) -> None:
        self.stop_event.set()
        resp = self._resp
        if resp is not None:
            try:
                resp.shutdown()  # unblock a read in progress (urllib3 >= 2.3)
            except Exception:  # noqa: BLE001, S110 - best effort
                pass

    def __iter__(self) -> Iterator[tuple[str, PodState]]:
        return self._events()

    def _relist(self) -> Iterator[tuple[str, PodState]]:
        backend = self.backend
        items, rv = backend.call.list_all(backend.core.list_pod_for_all_namespaces, label_selector=PORTAL_SELECTOR,
                                          page_size=backend.page_size)
        self.relists += 1
        current: dict[tuple[str, str], PodState] = {}
        for pod in items:
            state = pod_state(pod, gate=backend.gate)
            if state is not None:
                current[(state.namespace, state.name)] = state
        previous, self._known = self._known, current
        self.resource_version = rv
        for key, state in sorted(previous.items()):
            if key not in current:
                yield "DELETED", state
        for key, state in sorted(current.items()):
            yield ("MODIFIED" if key in previous else "ADDED"), state

    def _backoff(self, failures: int, exc: BaseException) -> None:
        if failures > self.max_failures:
            raise ClusterUnavailable(f"pod watch failed {failures} times in a row: {exc}") from exc
        delay = min(30.0, 0.5 * 2 ** (failures - 1))
        log.warning("pod watch interrupted (%s); retrying in %.1fs", exc, delay)
        self.backend.sleep(delay)

    def _events(self) -> Iterator[tuple[str, PodState]]:
        backend = self.backend
        failures = 0
        try:
            if not self.resource_version:
                yield from self._relist()
            while not self.stop_event.is_set():
                started = time.monotonic()
                got_events = False
                expired = False
                try:
                    self._resp = backend.call.raw(
                        backend.core.list_pod_for_all_namespaces, label_selector=PORTAL_SELECTOR, watch=True,
                        resource_version=self.resource_version, allow_watch_bookmarks=True,
                        timeout_seconds=self.timeout_s, read_timeout_s=self.timeout_s + 10,
                    )
                    for line in iter_resp_lines(self._resp):
                        if self.stop_event.is_set():
                            return
                        if not line.strip():
                            continue
                        event = json.loads(line)
                        kind, obj = event.get("type"), event.get("object") or {}
                        if kind == "ERROR":
                            if obj.get("code") == 410:
                                expired = True
                                break
                            raise ClusterUnavailable(f"watch error: {obj.get('message')}")
                        rv = (obj.get("metadata") or {}).get("resourceVersion")
                        if rv:
                            self.resource_version = rv
                        got_events = True
                        if kind == "BOOKMARK":
                            continue
                        state = pod_state(obj, gate=backend.gate)
                        if state is None:
                            continue
                        key = (state.namespace, state.name)
                        if kind == "DELETED":
                            self._known.pop(key, None)
                        else:
                            self._known[key] = state
                        failures = 0
                        yield kind, state
                except ApiError as exc:
                    if exc.status != 410:
                        raise exc.to_backend_error() from exc
                    expired = True
                except (ClusterUnavailable, ValueError, *_TRANSPORT_ERRORS) as exc:
                    if self.stop_event.is_set():
                        return
                    failures += 1
                    self._backoff(failures, exc)
                    continue
                finally:
                    if self._resp is not None:
                        self._resp.release_conn()
                        self._resp = None
                if expired:
                    log.info("pod watch resourceVersion %s expired (410); re-listing", self.resource_version)
                    yield from self._relist()
                elif not got_events and time.monotonic() - started < 1.0:
                    # A stream that closes at once without events: do not hammer the API server.
                    failures += 1
                    self._backoff(failures, ClusterUnavailable("watch closed immediately"))
        except ApiError as exc:
            raise exc.to_backend_error() from exc
