"""Verdicts of waiting jobs remembered by their shape within one cycle, so that a deep queue of repeats costs
a lookup per job instead of the quota, capacity and reservation checks (``Cycle.consider``)."""

from __future__ import annotations

from . import reasons
from .outcomes import Outcome, Waiting
from .state import CycleState
from .teams import account
from .tiers import REALTIME
from .types import PendingJob

REALTIME_TIER = REALTIME.name
TEAM_QUOTA = reasons.TEAM_QUOTA

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
        reasons.TEAM_QUOTA,
        reasons.TEAM_BORROW_LIMIT,
        reasons.BOOKED,
        reasons.MAINTENANCE,
    }
)


# The reasons a CPU-only job's remembered verdict may carry: no room on its CPU pools, now or ever (``shapes.why``).
ROOM_CODES = frozenset({reasons.NO_CAPACITY, reasons.EXCEEDS_CAPACITY})


class Verdicts:
    """Why a job waits, remembered by its shape: a later job of the same department, flavor, tier, size, run
    time and cluster constraints (and the same member, where the member has a GPU limit) waits for the same reason with the same detail as long as nothing changed in
    between (no admission, reservation or eviction: the count of them is the mark), because the checks read
    nothing else of the job once its credits are enough (credits change only with admissions and evictions). In a deep queue most jobs are such repeats, so they
    cost a lookup instead of the quota, capacity and reservation checks. Only the plain path is remembered:
    realtime jobs (they may preempt), jobs whose victims are already leaving, jobs short of credits, jobs
    under per-cluster quotas, jobs that reserve across their quota (their age decides it, not their shape)
    and jobs with closed matching clusters (their detail names them) are judged in full every time. A CPU-only
    job's verdict is kept by what it is judged on, its department apart (``judge_cpu_only``)."""

    __slots__ = ("seen",)

    def __init__(self) -> None:
        # shape -> (mark, (code, message, detail), outcome, whether the realtime headroom held it)
        self.seen: dict[tuple, tuple[int, tuple[str, str, dict], Outcome, bool]] = {}

    @staticmethod
    def applies(cycle: CycleState, job: PendingJob) -> bool:
        """Whether ``job`` takes the plain path whose verdict may be remembered."""
        return (
            job.tier != REALTIME_TIER
            and (job.hold <= 0 or cycle.credits is None or job.hold <= cycle.credits.get(job.department, 0))
            and (not job.team or not cycle.team_shares or job.hold <= 0
                 or job.hold <= cycle.credits.get(account(job.department, job.team), job.hold))
            and job.id not in cycle.evictions.inflight
            and (not cycle.quota.scoped or (job.department, job.flavor) not in cycle.quota.scoped)
            and cycle.scorer.quota_since(job) is None
        )

    def judge(self, cycle: CycleState, job: PendingJob) -> Outcome:
        """``cycle.judge(job)``, or the verdict of the last job of its shape while nothing changed since (for a
        job that takes the plain path, ``applies``; any other is judged in full)."""
        if not (  # (``applies``, inline: every job of the cycle comes here)
            job.tier != REALTIME_TIER
            and (job.hold <= 0 or cycle.credits is None or job.hold <= cycle.credits.get(job.department, 0))
            and (not job.team or not cycle.team_shares or job.hold <= 0  # (its team's share of the budget)
                 or job.hold <= cycle.credits.get(account(job.department, job.team), job.hold))
            and job.id not in cycle.evictions.inflight
            and (not cycle.quota.scoped or (job.department, job.flavor) not in cycle.quota.scoped)
            and (cycle.scorer.quota_age <= 0 or cycle.scorer.quota_since(job) is None)
        ):
            return cycle.judge(job)
        if job.roles and job.pods == 0:
            return self.judge_cpu_only(cycle, job)
        key = (
            job.department, job.flavor, job.tier, job.pods, job.gpus_per_pod, job.max_runtime_s, job.cluster,
            job.cluster_selector, job.cluster_preference, job.data_sources, job.roles, job.share,
            job.topology_level, job.topology_required,
            # a member with a GPU limit is judged as themselves: their holdings differ from a colleague's
            job.user if cycle.user_limits and cycle.users.limit(job.department, job.user) is not None else None,
            # a team with a guaranteed part or a borrowing limit is judged as itself, any other as no team
            cycle.teams.verdict_team(job) if cycle.team_quotas else "",
        )  # fmt: skip
        mark = _mark(cycle, job)
        seen = self.seen.get(key)
        if seen is not None and seen[0] == mark:
            _, reason, outcome, headroom = seen
            if reason[0] == TEAM_QUOTA:  # (of another team judged alike: its own team named)
                reason = cycle.teams.renamed(job, reason)
            cycle.reasons[job.id] = reason
            if headroom:
                cycle.headroom_held.add(job.id)
            return outcome
        outcome = cycle.judge(job)
        if (
            outcome.__class__ is Waiting
            and outcome.code in MEMO_CODES
            and _mark(cycle, job) == mark
            and job.id not in cycle.closed_for
        ):
            self.seen[key] = (mark, cycle.reasons[job.id], outcome, job.id in cycle.headroom_held)
        return outcome

    def judge_cpu_only(self, cycle: CycleState, job: PendingJob) -> Outcome:
        """A CPU-only job waits for room on its CPU pools for a reason that its roles and the clusters it may run
        on decide, nothing else: it neither reserves nor preempts (so its tier and run time do not count), and
        its department counts only in its cores and memory quotas. Those are checked afresh (they change with
        every CPU admission of any department, and a job they stop waits for them, judged in full); where they
        pass, the job takes the room verdict of the last job of its shape, of any department, while no
        admission has taken CPU pods since. Only room verdicts are remembered so: a quota verdict names its
        department's figures."""
        key = (job.flavor, job.cluster, job.cluster_selector, job.cluster_preference, job.data_sources, job.roles)
        mark = cycle.cpu_admitted  # (``_mark``'s, inline)
        seen = self.seen.get(key)
        if seen is not None and seen[0] == mark:
            waits = cycle.cpu_quota(job)
            if waits is not None:
                return waits
            cycle.reasons[job.id] = seen[1]
            return seen[2]
        outcome = cycle.judge(job)
        if outcome.__class__ is Waiting and outcome.code in ROOM_CODES and cycle.cpu_admitted == mark:
            self.seen[key] = (mark, cycle.reasons[job.id], outcome, False)
        return outcome


def _mark(cycle: CycleState, job: PendingJob) -> int:
    """The count of the changes that may turn a GPU job's verdict: admissions, reservations and evictions. A
    job without roles does not count the CPU-only admissions (they change no GPU pool), and a job with CPU roles
    beside its GPUs counts all (a CPU-only job's mark is its own: ``Verdicts.judge_cpu_only``)."""
    return len(cycle.admissions) + len(cycle.heads) + len(cycle.evictions.preemptions) - (
        0 if job.roles else cycle.cpu_only_admitted)
