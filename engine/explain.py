"""How a pending job is explained: the capacity reason in one pool, which reason wins across pools, which
reasons carry no estimated start, the one-line note of a quota wait, and the cycle's figures for operators.
Pure; the engine decides which applies."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from . import reasons
from .fractions import plain
from .placement import Pool
from .teams import held_note
from .types import Admission, PendingReason

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
        reasons.DATA_SOURCE_UNAVAILABLE,  # an admin declares the source, not the clock
        reasons.NAMESPACE_QUOTA,  # when the quota changes is not the engine's to know
        reasons.HELD,  # a person releases it
        reasons.DEPENDENCY_NEVER_SATISFIED,  # it never starts: the portal ends it
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
    if detail.get("level") == "team" and "department_idle" in detail:
        return held_note(detail)
    note = (f"{plain(detail.get('in_use'))} of nominal {detail.get('nominal')} in use, "
            f"{plain(detail.get('requested'))} requested")
    if detail.get("borrowing_limit") == 0:  # it may not borrow at all: the cohort's idle GPUs are not its to take
        return note + ", its borrowing limit is 0"
    if "cohort_idle" in detail:  # what could be borrowed: the number that explains most quota waits
        note += f", {detail['cohort_idle']} idle in the cohort to borrow"
    return note


def reserved_note(wait_s: float) -> str:
    """When a reserved head's GPUs come free. A wait under a second means the jobs holding them are expected to
    have ended already (they reached their max runtime): saying "in 0 s" promised a start that is not coming."""
    if wait_s < 1:
        return "GPUs are reserved for it as soon as the jobs holding them end (they are past their expected end)"
    return f"GPUs are reserved for it in {duration_text(wait_s)}"


def duration_text(seconds: float) -> str:
    """A wait as a person reads it: seconds under two minutes, minutes under two hours, else hours."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


def cycle_figures(
    *,
    pending_in: int,
    running_in: int,
    admissions: Sequence[Admission],
    admitted_gpus: int,
    pending: Sequence[PendingReason],
    preemptions: int,
    victims: int,
    reservations: int,
    capacity_gpus: int,
    free_gpus_after: int,
    realtime_past_target: int,
) -> dict[str, float]:
    """The cycle's figures for operators (the portal exports them as metrics): counts in and out, GPUs,
    and how many pending jobs wait for each reason."""
    by_code: dict[str, int] = defaultdict(int)
    for r in pending:
        by_code[r.code] += 1
    out: dict[str, float] = {
        "pending": pending_in,
        "running": running_in,
        "admitted": len(admissions),
        "admitted_gpus": admitted_gpus,
        "borrowed": sum(1 for a in admissions if a.borrowed),
        "preemptions": preemptions,
        "victims": victims,
        "still_pending": len(pending),
        "reservations": reservations,
        "capacity_gpus": capacity_gpus,
        "free_gpus_after": free_gpus_after,
        "utilisation_after": (capacity_gpus - free_gpus_after) / capacity_gpus if capacity_gpus else 0.0,
        "estimates_known": sum(1 for r in pending if r.estimated_start is not None),
        "realtime_past_target": realtime_past_target,
    }
    for code in sorted(by_code):
        out[f"reason.{code}"] = by_code[code]
    return out
