"""First-in-first-out admission within nominal quota and free capacity.

The walking skeleton's placeholder and the simulator's "FCFS" reference: strict submission order (id
tie-break), no borrowing, no preemption, a job that does not fit blocks the ones behind it in its flavor.
"""

from __future__ import annotations

from collections import defaultdict

from . import reasons
from .types import Admission, CycleResult, PendingReason, Snapshot


def fifo_schedule(snapshot: Snapshot) -> CycleResult:
    free: dict[str, int] = {}
    flavor_of: dict[str, str] = {}
    cluster_of: dict[str, str] = {}
    for node in snapshot.nodes:
        if node.usable:
            free[node.name] = node.gpus - node.used_by_others
            flavor_of[node.name] = node.flavor
            cluster_of[node.name] = node.cluster
    used: dict[tuple[str, str], int] = defaultdict(int)
    for job in snapshot.running:
        used[(job.department, job.flavor)] += job.total_gpus
        for name in job.placement:
            if name in free:
                free[name] -= job.gpus_per_pod
    nominal = {(q.department, q.flavor): q.nominal for q in snapshot.quotas}

    admissions: list[Admission] = []
    pending: list[PendingReason] = []
    blocked_flavors: set[str] = set()
    for job in sorted(snapshot.pending, key=lambda j: (j.submitted_at, j.id)):
        key = (job.department, job.flavor)
        if job.flavor in blocked_flavors:
            pending.append(_reason(job.id, reasons.WAITING_FOR_HIGHER_PRIORITY))
            continue
        if used[key] + job.total_gpus > nominal.get(key, 0):
            pending.append(
                _reason(
                    job.id,
                    reasons.QUOTA_EXHAUSTED,
                    {"in_use": used[key], "nominal": nominal.get(key, 0), "requested": job.total_gpus},
                )
            )
            continue
        placement = _place(job.flavor, job.pods, job.gpus_per_pod, free, flavor_of)
        if placement is None:
            blocked_flavors.add(job.flavor)
            total_free = sum(f for n, f in free.items() if flavor_of[n] == job.flavor)
            code = reasons.NO_FITTING_NODE if total_free >= job.total_gpus else reasons.NO_CAPACITY
            pending.append(_reason(job.id, code, {"free": total_free, "requested": job.total_gpus}))
            continue
        for name in placement:
            free[name] -= job.gpus_per_pod
        used[key] += job.total_gpus
        admissions.append(Admission(job_id=job.id, placement=placement, cluster=cluster_of[placement[0]]))
    return CycleResult(
        admissions=tuple(admissions),
        pending=tuple(pending),
        figures={"pending": len(snapshot.pending), "admitted": len(admissions)},
    )


def _place(flavor, pods, per_pod, free, flavor_of):
    """Best fit per pod: the node with the fewest free GPUs that still fits (name tie-break)."""
    trial = dict(free)
    placement = []
    for _ in range(pods):
        fits = [(f, n) for n, f in trial.items() if flavor_of[n] == flavor and f >= per_pod]
        if not fits:
            return None
        _, name = min(fits)
        trial[name] -= per_pod
        placement.append(name)
    return tuple(placement)


def _reason(job_id, code, detail=None):
    return PendingReason(job_id=job_id, code=code, message=reasons.CODES[code], detail=detail or {})
