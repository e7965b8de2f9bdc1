"""What a cycle returns once every pending job was judged (pure): the admissions with their prices and the
clearing price per flavor, and each job left pending with its reason, message, detail and estimated start.

The cycle (``engine.cycle.Cycle``) calls in here with its state, typed ``engine.state.CycleState``."""

from __future__ import annotations

from types import MappingProxyType

from . import reasons, tiers
from .estimate import EstimateView, estimate_pending
from .explain import NO_ESTIMATE, duration_text
from .fractions import plain_detail
from .state import CycleState
from .sweeps import dependency_ready
from .types import Admission, PendingJob, PendingReason

REALTIME_TIER = tiers.REALTIME.name


def priced_admissions(cycle: CycleState) -> tuple[list[Admission], dict[str, int]]:
    """The admissions in the pending order, each winner with its price (its critical bid, None when it is 0:
    inside its quota too, where a bid also orders the department's own jobs, so a bid that decided is paid
    for wherever it decided), and per flavor the highest price a winner on borrowed capacity pays (the
    clearing price of spare GPUs), by flavor name."""
    clearing: dict[str, int] = {}
    admissions = []
    prices = cycle.prices
    for job in cycle.order:
        adm = cycle.admissions.get(job.id)
        if adm is not None:
            price = prices[job.id] if job.id in prices else cycle.price_of(job)
            if price and adm.borrowed:
                clearing[job.flavor] = max(price, clearing.get(job.flavor, 0))
            if price:
                adm = Admission(adm.job_id, adm.placement, adm.cluster, adm.borrowed, price, adm.devices)
            admissions.append(adm)
    return admissions, dict(sorted(clearing.items()))


def start_estimates(cycle: CycleState, still: list[PendingJob]) -> tuple[dict[int, float | None], dict[int, float | None]]:
    """(estimated start per pending job, the instant a job's dependencies are likely to have ended)."""
    if not cycle.snap.estimates:
        return dict(cycle.heads), {}
    running_end = cycle.running_end
    view = EstimateView(
        now=cycle.now,
        codes={job_id: r[0] for job_id, r in cycle.reasons.items()},
        pools_by_flavor=cycle.pools_by_flavor,
        quota=cycle.quota,
        running=cycle.running,
        admitted_end=cycle.admitted_end,
        events=cycle.likely_events,
        running_end=running_end,
        heads=cycle.heads,
        allowed=cycle.topology.open_to,
        rank=cycle.topology.cluster_rank,
        users=cycle.users,
        teams=cycle.teams if cycle.team_quotas else None,
        late=frozenset({reasons.WAITING_FOR_DEPENDENCY}),
        holds=cycle.calendar.replay_holds() if cycle.calendar.holds else None,
    )
    estimates = estimate_pending(view, still)
    if not any(job.after for job in still):
        return estimates, {}
    # what a dependency waits for ends when it likely ends, as the estimates replay it
    ends = dict(running_end)
    ends.update((job.id, cycle.now + job.likely_runtime_s) for job in cycle.order if job.id in cycle.admissions)
    return estimates, dependency_ready({j.id: j for j in still}, estimates, ends, cycle.snap.ended, cycle.now)


def pending_reasons(cycle: CycleState, still: list[PendingJob]) -> list[PendingReason]:
    """Each job of ``still`` (in the pending order) with its reason, message, detail and estimated start; the
    cycle counts the realtime jobs already past their start target."""
    estimates, ready = start_estimates(cycle, still)
    now, target_s = cycle.now, cycle.policy.realtime_start_target_s
    why, backoff, dependency = cycle.reasons, reasons.RETRY_BACKOFF, reasons.WAITING_FOR_DEPENDENCY
    team_limit = reasons.TEAM_BORROW_LIMIT
    out = []
    append = out.append
    for job in still:
        code, message, detail = why[job.id]
        est = None if code in NO_ESTIMATE else estimates.get(job.id)
        if code == backoff:  # never before the back-off ends, later if capacity says so
            est = job.not_before if est is None else max(est, job.not_before)
        elif code == team_limit and detail.get("never"):  # larger than its team may ever hold
            est = None
        elif code == dependency:  # never before what it waits for ends (unknown: None)
            when = ready.get(job.id)
            est = None if est is None or when is None else max(est, when)
        # A remembered verdict's (or a failed victim search's) detail is shared by every job that took it:
        # what is this job's own goes into a copy.
        if job.deadline is not None:
            message, miss = deadline_check(now, job, est, message)
            if miss is not None:
                detail = {**detail, "deadline_miss": miss}
        if job.expedited_since is not None:  # it says why it is first, and since when
            detail = {**detail, "expedited_since": job.expedited_since}
            message = f"{message} It lost its node and waits first in its tier (an expedited requeue)."
        if job.tier == REALTIME_TIER:
            target = job.submitted_at + target_s
            detail = {**detail, "start_target": target}
            cycle.late_realtime += now > target
        append(PendingReason(job.id, code, message, MappingProxyType(plain_detail(detail)), est))
    return out


def deadline_check(now: float, job: PendingJob, est: float | None, message: str) -> tuple[str, dict | None]:
    """The feasibility check of a waiting job's deadline: its estimated end (estimated start + likely run
    time) set against the deadline. A job that will miss it says so in its message and gets the miss for
    its ``detail["deadline_miss"]`` (the adapter tells its owner once); else (message, None). With no
    estimate it is judged as if it started now (the best case): only a deadline that even that misses is
    reported."""
    start = now if est is None else max(now, est)
    end = start + job.likely_runtime_s
    if end <= job.deadline:
        return message, None
    late = end - job.deadline
    miss = {"deadline": job.deadline, "estimated_end": end, "late_s": late, "estimated": est is not None}
    how = "at its estimated start" if est is not None else "even if it started now"
    return f"{message[:-1]}; {how} it would end {duration_text(late)} after its deadline.", miss
