"""PodDisruptionBudgets: the portal's own (created with a job that asks for one) and every budget over the
portal's evictable pods, as the Eviction API would apply them."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from engine.types import DisruptionBudget
from scheduling.backends.base import BackendError, PdbCoverage, PodSet

from .client import ApiError
from .connection import KubeConnection
from .errors import backend_errors
from .podspec import LABEL_ATTEMPT, LABEL_JOB_ID, pdb_manifest

# Up to this many namespaces with budgets, the portal's running pods are listed in each of them (a cluster's
# own budgets, kube-system's, hold none of its pods: an empty list each); past it, in one list of every one.
PDB_NAMESPACES_LISTED_APART = 8


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


def pdb_allows(pdb: Mapping[str, Any]) -> int:
    """Disruptions a PDB allows now, as the Eviction API decides: none while its status lags its spec
    (``observedGeneration < generation`` answers 429), none when negative (403), else ``disruptionsAllowed``."""
    meta, status = pdb.get("metadata") or {}, pdb.get("status") or {}
    if int(status.get("observedGeneration") or 0) < int(meta.get("generation") or 0):
        return 0
    return max(0, int(status.get("disruptionsAllowed") or 0))



class DisruptionBudgets(KubeConnection):
    """Read the cluster's disruption budgets; create a job's own."""

    @backend_errors
    def disruption_budgets(self) -> tuple[DisruptionBudget, ...]:
        """The portal's PodDisruptionBudgets (one list call), named ``namespace/name`` as the snapshot expects."""
        items, _ = self.call.list_all(self.policy.list_pod_disruption_budget_for_all_namespaces,
                                      label_selector=self.selector, page_size=self.page_size)
        return tuple(sorted(
            (DisruptionBudget(name=f"{p['metadata']['namespace']}/{p['metadata']['name']}",
                              disruptions_allowed=int((p.get("status") or {}).get("disruptionsAllowed", 0)))
             for p in items),
            key=lambda b: b.name,
        ))

    @backend_errors
    def pdb_coverage(self) -> PdbCoverage:
        """Every PodDisruptionBudget (the portal's and anyone else's) over the portal's evictable pods: the
        PDBs of all namespaces, then the portal's running pods in the namespaces that have any (none when no
        namespace has a budget; one list per namespace up to ``PDB_NAMESPACES_LISTED_APART`` of them, else one
        of every namespace). Not cached: ``disruptionsAllowed`` moves with every eviction and every pod that
        becomes ready.

        Kubernetes semantics (``pkg/registry/core/pod/storage/eviction.go``): a pod is guarded by the PDBs of
        its namespace whose selector matches its labels; Pending, terminated and terminating pods are evicted
        without a PDB check, so only Running pods count. A pod selected by more than one PDB cannot be evicted
        at all (500 "more than one PodDisruptionBudget"): such a set of PDBs becomes a budget allowing 0,
        named ``ns/a & ns/b``. Unready pods are charged like ready ones (conservative: the API may let them go
        without charging the budget).
        """
        # The budgets first: they are few, and only the pods of their namespaces can be guarded. Listing the
        # portal's running pods first cost a decode of every one of them each cycle, on a cluster where no
        # budget guards any (and 2 cycles a second on a busy portal).
        items, _ = self.call.list_all(self.policy.list_pod_disruption_budget_for_all_namespaces,
                                      page_size=self.page_size)
        by_ns: dict[str, list[tuple[str, dict[str, Any]]]] = {}
        for pdb in items:
            ns = pdb["metadata"].get("namespace", "")
            by_ns.setdefault(ns, []).append((f"{ns}/{pdb['metadata']['name']}", pdb))
        if not by_ns:
            return PdbCoverage()
        running = {"label_selector": self.selector, "field_selector": "status.phase=Running",
                   "page_size": self.page_size}
        if len(by_ns) <= PDB_NAMESPACES_LISTED_APART:  # a list per namespace with budgets
            pods = [p for ns in sorted(by_ns) for p in self.call.list_all(self.core.list_namespaced_pod, ns,
                                                                          **running)[0]]
        else:  # budgets in many namespaces: one list of them all
            pods, _ = self.call.list_all(self.core.list_pod_for_all_namespaces, **running)
        pods = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
        allowed: dict[str, int] = {}
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
                allowed[name] = pdb_allows(pdb)
            else:
                name = " & ".join(n for n, _ in covering)
                allowed[name] = 0
            jobs.setdefault(key, set()).add(name)
        return PdbCoverage(
            pdbs=tuple(DisruptionBudget(name=n, disruptions_allowed=a) for n, a in sorted(allowed.items())),
            jobs={k: tuple(sorted(v)) for k, v in sorted(jobs.items())},
        )


    def _ensure_pdb(self, podset: PodSet) -> None:
        manifest = pdb_manifest(podset, self.installation)
        name = manifest["metadata"]["name"]
        try:
            self.call.json(self.policy.create_namespaced_pod_disruption_budget, podset.namespace, manifest)
        except ApiError as exc:
            if exc.status != 409:
                raise
            existing = self.call.json(self.policy.read_namespaced_pod_disruption_budget, name, podset.namespace)
            if not self.owns(existing, job_id=podset.job_id, attempt=podset.attempt):
                raise BackendError(f"PodDisruptionBudget {podset.namespace}/{name} exists and is not ours") from exc

