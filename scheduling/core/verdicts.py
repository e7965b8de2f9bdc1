"""Verdicts of waiting jobs remembered by their shape within one cycle, so that a deep queue of repeats costs
a lookup per job instead of the quota, capacity and reservation checks (``Cycle.consider``)."""

from __future__ import annotations

from typing import Any

from . import reasons
from .outcomes import Outcome, Waiting
from .tiers import REALTIME
from .types import PendingJob

# The cycle (``engine.Cycle``) calls in here; it is typed ``Cycle`` below by its role only, since importing
# it would make the two modules import each other.
Cycle = Any

REALTIME_TIER = REALTIME.name

# The reasons a remembered verdict may carry: those whose detail holds only numbers and strings (shared, read
# only, by the jobs that take the verdict) and that come from the quota and capacity checks.
MEMO_CODES = frozenset(
    {
        reasons.QUOTA_EXHAUSTED,
        reasons.BORROW_LIMIT,
        reasons.QUOTA_LENT_OUT,
        reasons.REALTIME_HEADROOM,
        reasons.RESERVED_FOR_HEAD,
        reasons.WAITING_FOR_HIGHER_PRIORITY,
        reasons.NO_FITTING_NODE,
        reasons.NO_CAPACITY,
        reasons.EXCEEDS_CAPACITY,
    }
)


class Verdicts:
    """Why a job waits, remembered by its shape: a later job of the same department, flavor, tier, size, run
    time and cluster constraints (and the same member, where the member has a GPU limit) waits for the same reason with the same detail as long as nothing changed in
    between (no admission, reservation or eviction: the count of them is the mark), because the checks read
    nothing else of the job once its credits are enough (credits change only with admissions and evictions). In a deep queue most jobs are such repeats, so they
    cost a lookup instead of the quota, capacity and reservation checks. Only the plain path is remembered:
    realtime jobs (they may preempt), jobs whose victims are already leaving, jobs short of credits, jobs
    under per-cluster quotas and jobs with closed matching clusters (their detail names them) are judged in
    full every time."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        # shape -> (mark, (code, message, detail), outcome, whether the realtime headroom held it)
        self.seen: dict[tuple, tuple[int, tuple[str, str, dict], Outcome, bool]] = {}

    @staticmethod
    def applies(cycle: Cycle, job: PendingJob) -> bool:
        """Whether ``job`` takes the plain path whose verdict may be remembered."""
        return (
            job.tier != REALTIME_TIER
            and (job.hold <= 0 or cycle.credits is None or job.hold <= cycle.credits.get(job.department, 0))
            and job.id not in cycle.evictions.inflight
            and (not cycle.quota.scoped or (job.department, job.flavor) not in cycle.quota.scoped)
        )

    def judge(self, cycle: Cycle, job: PendingJob) -> Outcome:
        """``cycle.judge(job)``, or the verdict of the last job of its shape while nothing changed since (for a
        job that takes the plain path, ``applies``; any other is judged in full)."""
        if not (  # (``applies``, inline: every job of the cycle comes here)
            job.tier != REALTIME_TIER
            and (job.hold <= 0 or cycle.credits is None or job.hold <= cycle.credits.get(job.department, 0))
            and job.id not in cycle.evictions.inflight
            and (not cycle.quota.scoped or (job.department, job.flavor) not in cycle.quota.scoped)
        ):
            return cycle.judge(job)
        key = (
            job.department, job.flavor, job.tier, job.pods, job.gpus_per_pod, job.max_runtime_s, job.cluster,
            job.cluster_selector, job.cluster_preference, job.data_sources,
            # a member with a GPU limit is judged as themselves: their holdings differ from a colleague's
            job.user if cycle.user_limits and cycle.users.limit(job.department, job.user) is not None else None,
        )  # fmt: skip
        mark = len(cycle.admissions) + len(cycle.heads) + len(cycle.evictions.preemptions)
        seen = self.seen.get(key)
        if seen is not None and seen[0] == mark:
            _, reason, outcome, headroom = seen
            cycle.reasons[job.id] = reason
            if headroom:
                cycle.headroom_held.add(job.id)
            return outcome
        outcome = cycle.judge(job)
        if (
            outcome.__class__ is Waiting
            and outcome.code in MEMO_CODES
            and len(cycle.admissions) + len(cycle.heads) + len(cycle.evictions.preemptions) == mark
            and job.id not in cycle.closed_for
        ):
            self.seen[key] = (mark, cycle.reasons[job.id], outcome, job.id in cycle.headroom_held)
        return outcome
