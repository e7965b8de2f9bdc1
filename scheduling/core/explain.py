"""How a pending job is explained: the capacity reason in one pool, which reason wins across pools, which
reasons carry no estimated start, and the one-line note of a quota wait. Pure; the engine decides which
applies."""

from __future__ import annotations

from . import reasons
from .placement import Pool

# How blocked-by-capacity reasons rank when a job could go to several pools (clusters): the most hopeful wins.
CAPACITY_RANK = {
    reasons.RESERVED_FOR_HEAD: 0,
    reasons.WAITING_FOR_HIGHER_PRIORITY: 1,
    reasons.NO_FITTING_NODE: 2,
    reasons.NO_CAPACITY: 3,
    reasons.EXCEEDS_CAPACITY: 4,
}

# Waits whose end cannot be predicted honestly: credits (refills are not predictable), impossible requests,
# evictions under way (their duration is the victims' grace period, not known here), clusters closed to
# admissions (an operator reopens them, not the clock).
NO_ESTIMATE = frozenset(
    {
        reasons.BUDGET_INSUFFICIENT,
        reasons.UNKNOWN_FLAVOR,
        reasons.EXCEEDS_CAPACITY,
        reasons.INVALID_REQUEST,
        reasons.PREEMPTION_IN_PROGRESS,
        reasons.NO_MATCHING_CLUSTER,
        reasons.CLUSTERS_UNAVAILABLE,
    }
)


def capacity_code(pool: Pool, g: int, n: int, long: bool) -> tuple[str, int]:
    """Why ``n`` pods of ``g`` GPUs do not start in ``pool`` now, and its free GPUs. ``long``: the job would run
    past the pool's reservation, so only GPUs the reserved head does not need are open to it."""
    free = pool.now.free_total()
    if pool.empty.capacity(g) < n:
        return reasons.EXCEEDS_CAPACITY, free
    if long and pool.now.capacity(g) >= n:
        return reasons.RESERVED_FOR_HEAD, free
    if pool.reservation is not None or pool.initial_capacity(g) >= n:
        return reasons.WAITING_FOR_HIGHER_PRIORITY, free
    if free >= g * n:
        return reasons.NO_FITTING_NODE, free
    return reasons.NO_CAPACITY, free


def quota_note(detail: dict) -> str:
    note = f"{detail.get('in_use')} of nominal {detail.get('nominal')} in use, {detail.get('requested')} requested"
    if "cohort_idle" in detail:  # what could be borrowed: the number that explains most quota waits
        note += f", {detail['cohort_idle']} idle in the cohort to borrow"
    return note
