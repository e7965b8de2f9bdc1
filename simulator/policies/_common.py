"""Shared helpers for the baseline policies: a mutable capacity view of a snapshot, best-fit placement and
victim search. Baselines respect ``RunningJob.preemptible`` (realtime jobs and jobs already being evicted)."""

from __future__ import annotations

from collections import defaultdict

from engine import Admission, CycleResult, Preemption, RunningJob, Snapshot, tiers
from engine.types import TIER_RANK


def evicting(rj: RunningJob) -> bool:
    """A job whose eviction is in progress (its GPUs free up soon)."""
    return not rj.preemptible and tiers.preemptible(rj.tier)


def prio(job) -> int:
    """PriorityClass-like value: realtime 2 > elastic 1 > backfill 0."""
    return 2 - TIER_RANK.get(job.tier, 1)


class View:
    """Free GPUs per node and flavor, and usage per (department, flavor), mutable during a cycle."""

    def __init__(self, snap: Snapshot):
        self.free: dict[str, int] = {}
        self.flavor_nodes: dict[str, list[str]] = defaultdict(list)
        self.flavor_free: dict[str, int] = defaultdict(int)
        self.flavor_cap: dict[str, int] = defaultdict(int)
        self.cluster_of: dict[str, str] = {}
        self.node_flavor: dict[str, str] = {}
        for n in snap.nodes:
            if not n.usable:
                continue
            f = n.gpus - n.used_by_others
            self.free[n.name] = f
            self.flavor_nodes[n.flavor].append(n.name)
            self.flavor_free[n.flavor] += f
            self.flavor_cap[n.flavor] += f
            self.cluster_of[n.name] = n.cluster
            self.node_flavor[n.name] = n.flavor
        self.used: dict[tuple[str, str], int] = defaultdict(int)
        self.soon_free: dict[str, int] = defaultdict(int)
        for rj in snap.running:
            self.used[(rj.department, rj.flavor)] += rj.total_gpus
            for name in rj.placement:
                if name in self.free:
                    self.free[name] -= rj.gpus_per_pod
                    self.flavor_free[rj.flavor] -= rj.gpus_per_pod
            if evicting(rj):
                self.soon_free[rj.flavor] += rj.total_gpus

    def place(self, flavor: str, pods: int, per_pod: int, extra: dict[str, int] | None = None):
        """Best fit per pod (fewest free GPUs that still fit, name tie-break); ``extra`` adds GPUs per node."""
        total = self.flavor_free.get(flavor, 0) + (sum(extra.values()) if extra else 0)
        if total < pods * per_pod:
            return None
        names = self.flavor_nodes.get(flavor, ())
        clusters = sorted({self.cluster_of[n] for n in names})
        if len(clusters) > 1:
            # a gang never spans clusters: the first cluster (by name) that holds all of it. Baselines know
            # nothing else of clusters (states, selectors, preferences): they are single-cluster schedulers.
            for cluster in clusters:
                found = self._place(flavor, pods, per_pod, extra, [n for n in names if self.cluster_of[n] == cluster])
                if found is not None:
                    return found
            return None
        return self._place(flavor, pods, per_pod, extra, names)

    def _place(self, flavor, pods, per_pod, extra, names):
        trial = {}
        placement = []
        for _ in range(pods):
            best = None
            for name in names:
                f = trial.get(name)
                if f is None:
                    f = self.free[name] + (extra.get(name, 0) if extra else 0)
                if f >= per_pod and (best is None or f < best[0] or (f == best[0] and name < best[1])):
                    best = (f, name)
                    if f == per_pod:
                        break
            if best is None:
                return None
            trial[best[1]] = best[0] - per_pod
            placement.append(best[1])
        return tuple(placement)

    def take(self, job, placement) -> None:
        for name in placement:
            self.free[name] -= job.gpus_per_pod
        self.flavor_free[job.flavor] -= job.total_gpus
        self.used[(job.department, job.flavor)] += job.total_gpus

    def admission(self, job, placement, borrowed: bool = False) -> Admission:
        self.take(job, placement)
        return Admission(job_id=job.id, placement=placement, cluster=self.cluster_of[placement[0]],
                         borrowed=borrowed)

    def victims_for(self, job, candidates: list[RunningJob]):
        """Smallest prefix of ``candidates`` (in the given preference order) whose eviction lets ``job`` be placed,
        then pruned of victims not needed. Returns a tuple of RunningJobs or None."""
        freed: dict[str, int] = defaultdict(int)
        chosen: list[RunningJob] = []
        for rj in candidates:
            if rj.flavor != job.flavor:
                continue
            chosen.append(rj)
            for name in rj.placement:
                if name in self.free:
                    freed[name] += rj.gpus_per_pod
            if self.place(job.flavor, job.pods, job.gpus_per_pod, freed) is not None:
                break
        else:
            return None
        for rj in list(reversed(chosen[:-1])):
            trial = defaultdict(int, freed)
            for name in rj.placement:
                if name in trial:
                    trial[name] -= rj.gpus_per_pod
            if self.place(job.flavor, job.pods, job.gpus_per_pod, trial) is not None:
                chosen.remove(rj)
                freed = trial
        return tuple(chosen)


def result(admissions, preemptions=(), figures=None) -> CycleResult:
    return CycleResult(admissions=tuple(admissions), preemptions=tuple(preemptions), figures=figures or {})


def preemption(job, victims, reason="priority") -> Preemption:
    return Preemption(preemptor_id=job.id, victim_ids=tuple(v.id for v in victims), reason=reason)


def fifo_key(j):
    return (j.submitted_at, j.id)


def priority_key(j):
    return (TIER_RANK.get(j.tier, 1), j.submitted_at, j.id)
