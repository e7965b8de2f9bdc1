"""The price of borrowed capacity in one cycle (pure): each winner pays its critical bid.

A job's bid only moves it within its tier's order (``bid_weight`` points per milli-credit of score); whether
that wins it the GPUs is decided by the same cycle the engine runs. A winner on borrowed capacity pays the
lowest bid at which it would still have been admitted, everything else in the snapshot unchanged (its
*critical bid*, the payment rule of Myerson's lemma): 0 when tier, urgency, fair share, waiting time or a
starving guard admitted it whatever it bid (the adapter then charges the base price, the reserve), otherwise
the bid of the first job it would have fallen behind, converted through the score. With an allocation that
only improves with a higher bid, the critical bid makes bidding one's true value a dominant strategy: one's
price does not depend on one's own bid, and any bid that changes the outcome trades a win worth at least its
price for nothing, or a loss for a win that costs more than it is worth (docs/budgets.md, "How the price of
borrowed capacity is set"). A job that could never have fitted never displaces anyone, so it sets no price.
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Callable
from dataclasses import replace

from .fractions import MILLI
from .ordering import REALTIME, tier_rank
from .state import CycleState
from .teams import account
from .types import PendingJob


def critical_bid(bid: int, wins: Callable[[int], bool]) -> int:
    """The lowest integer bid in ``[0, bid]`` at which ``wins`` (the job would be admitted this cycle with that
    bid, all else equal) holds, given that it holds at ``bid``; 0 when the job would win without bidding.
    Found by bisection (the allocation is monotone in the bid: a higher bid only moves a job earlier in its
    tier), so at most about log2(bid) + 1 replays of the cycle."""
    if bid <= 0 or wins(0):
        return 0
    lo, hi = 0, bid  # loses at lo, wins at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if wins(mid):
            hi = mid
        else:
            lo = mid
    return hi


# --------------------------------------------------------------- the replays that find a winner's critical bid
#
# A job that bids less only moves later in the order: the jobs before its own place are judged exactly as they
# were, and so are the jobs between its place and its new one, except that its GPUs are still free for them.
# So a replay need not start over: it starts from the cycle's state just before the job was admitted (a
# *fork*, taken as the admission was about to be made) and judges only the jobs between its two places, then
# the job. That is what makes a cycle with hundreds of priced winners cost about one more pass over the
# queue, where a full replay for each cost a pass each. ``Cycle(snapshot, fork_prices=False)`` prices by full
# replays instead; the tests hold the two to the same result.

# Cycle attributes a fork shares with the cycle it was taken from: fixed for the snapshot, or caches whose
# values depend on nothing a replay changes. Every other attribute is copied or replaced in ``fork``, and an
# attribute that is in neither list stops the fork, so that new working state is never shared by mistake.
SHARED = frozenset({"snap", "now", "policy", "running", "running_end", "order", "keys", "fork_prices", "user_limits",
                    "resizer", "team_quotas", "calendar", "team_shares", "needs"})
REPLACED = frozenset({
    "topology", "pools", "pools_by_flavor", "closed_for", "likely_events", "scorer", "quota", "users", "teams",
    "evictions", "headroom_held", "credits", "admissions", "reasons", "gates", "admitted_end", "heads",
    "heads_full", "late_realtime", "verdicts", "before", "outcomes", "place", "prices", "spent_shapes",
    "cpu_pools", "cpu_short", "cpu_only_admitted", "cpu_admitted",
})  # fmt: skip


def fork(cycle: CycleState, job_id: int | None = None) -> CycleState:
    """A copy of ``cycle`` that can go on judging jobs without changing it: for a replay, so it keeps no
    estimates' inputs, prices nothing and remembers no verdicts from before. ``job_id``: the job about to be
    admitted, whose own traces (the clusters closed to it, a headroom hold) the copy drops: the replay judges
    it again."""
    unknown = set(vars(cycle)) - SHARED - REPLACED
    if unknown:
        raise TypeError(f"Cycle attributes neither shared nor copied by a fork: {sorted(unknown)}")
    new = object.__new__(type(cycle))
    for name in SHARED & set(vars(cycle)):
        setattr(new, name, getattr(cycle, name))
    new.fork_prices, new.before, new.outcomes, new.place, new.prices = False, None, {}, 0, {}
    new.pools = {key: pool.fork() for key, pool in cycle.pools.items()}
    new.topology = cycle.topology.fork(new.pools)
    new.pools_by_flavor = new.topology.pools_by_flavor
    new.cpu_pools = new.topology.cpu_pools
    new.cpu_short = {}
    new.cpu_only_admitted = new.cpu_admitted = 0  # (its admissions start empty: the verdicts' mark counts from there)
    new.closed_for = {k: v for k, v in cycle.closed_for.items() if k != job_id}
    new.headroom_held = cycle.headroom_held - {job_id}
    new.likely_events, new.admitted_end, new.reasons, new.late_realtime = {}, [], {}, 0
    new.scorer = cycle.scorer.fork()
    new.quota = cycle.quota.clone()
    new.users = cycle.users.clone()
    new.teams = cycle.teams.clone()
    new.evictions = cycle.evictions.fork(new.quota, new.scorer)
    new.credits = None if cycle.credits is None else dict(cycle.credits)
    # A replay asks only whether its job is admitted, and counts its own admissions (the verdicts' mark): the
    # admissions made before the fork are not copied.
    new.admissions = {}
    new.gates = cycle.gates.clone()
    new.heads = dict(cycle.heads)
    new.heads_full = {new.pools[(p.cluster, p.flavor)] for p in cycle.heads_full}
    new.verdicts = None if cycle.verdicts is None else type(cycle.verdicts)()
    new.spent_shapes = set(cycle.spent_shapes)  # (true of the copy as of the cycle: it goes on from the same state)
    return new


def price_from(cycle: CycleState, before: CycleState, job: PendingJob, place: int) -> int:
    """The critical bid of ``job``, admitted at ``place`` of ``cycle.order``, from ``before``, the fork taken
    just before its admission."""
    def wins(bid: int) -> bool:
        changed = replace(job, bid=bid)
        key = cycle.scorer.order_key(changed)
        if key < cycle.keys[place]:  # (a lower bid never moves a job earlier; kept exact if it ever did)
            return wins_in_full(cycle, job, bid)
        between = cycle.order[place + 1 : bisect_left(cycle.keys, key)]
        if surely_wins(before, changed, between):
            return True
        replay = fork(before)
        for other in between:
            replay.consider(other)
        replay.consider(changed)
        return job.id in replay.admissions

    return critical_bid(job.bid, wins)


def wins_bidding_nothing(cycle: CycleState, job: PendingJob, place: int) -> bool:
    """Whether ``job``, about to be admitted at ``place`` of ``cycle.order``, would have been admitted had it bid
    nothing, as ``surely_wins`` shows from the cycle's state before the admission: then its critical bid is 0
    and no fork need be taken."""
    changed = replace(job, bid=0)
    key = cycle.scorer.order_key(changed)
    if key < cycle.keys[place]:
        return False
    return surely_wins(cycle, changed, cycle.order[place + 1 : bisect_left(cycle.keys, key)])


def surely_wins(before: CycleState, job: PendingJob, between: list[PendingJob]) -> bool:
    """True when ``job`` is admitted if judged after the jobs ``between`` from ``before`` (the state just before
    its admission), whatever they do, as a bound shows; False when only the replay can tell.

    Within a cycle nothing comes back: free GPUs, a head's spare GPUs and the quota's room only shrink, and
    the pools that take no more heads stay so. So a job of ``between`` that does not fit, or that its quota
    stops, at ``before`` is never admitted by the replay, and one whose pools take no more heads never
    reserves; evictions change no pool and no quota. Each of the others may at most take its GPUs and
    quota (if it fits) and leave its pods, or reserve them, on nodes of its flavor: a pod of ``h`` GPUs costs
    a pod of ``g`` at most ``ceil(h / g)`` of its room on its node, and a reservation leaves a later job no
    more than each node's free GPUs then, cut by every reservation there, minus the head's. Any of them may
    spend its credit hold and its owner's GPUs. When ``job`` still passes its credits, its owner's limit, its
    quota and a pool's capacity and realtime headroom after all of that, the replay admits it: nothing else
    it is judged on changes within a cycle (and a remembered verdict is what a full judgement gives). A job
    under per-cluster quotas, or throttled by its array, is left to the replay."""
    quota = before.quota
    if quota.scoped or (job.array_id is not None and job.array_throttle) or job.topology_required:
        return False  # (a pool's room bounds no single domain's: the replay tells)
    # (its GPUs, ``total_gpus``, only where a bound in GPUs asks: a fraction's is an exact Fraction, dear to make)
    dept, flavor, user, g, n = job.department, job.flavor, job.user, job.gpus_per_pod, job.pods
    if before.team_quotas and before.teams.applies(job) and job.team:
        # Its team's borrowing limit, after every job of its team between may take its GPUs. (The quota bound
        # below counts every job's whole GPUs, this one's too, though a team's job adds only what its team's
        # held guarantee does not cover: the bound stays a bound.)
        found = before.teams.limits.get((dept, job.team, flavor))
        if found is not None and found[1] is not None:
            mates = sum(x.total_gpus for x in between if x.department == dept and x.team == job.team
                        and x.flavor == flavor)
            if before.teams.usage.get((dept, job.team, flavor), 0) + mates + job.total_gpus > found[0] + found[1]:
                return False
    if before.credits is not None and job.hold > 0:
        holds = sum(x.hold for x in between if x.department == dept and x.hold > 0)
        if job.hold > before.credits.get(dept, 0) - holds:
            return False
        share = before.credits.get(account(dept, job.team)) if job.team and before.team_shares else None
        if share is not None:  # its team's share of the budget, after its team's jobs between
            mates = sum(x.hold for x in between if x.department == dept and x.team == job.team and x.hold > 0)
            if job.hold > share - mates:
                return False
    limit = before.users.limit(dept, user) if before.user_limits else None
    if limit is not None:
        mates = sum(x.total_gpus for x in between if x.department == dept and x.user == user)
        if before.users.held.get((dept, user), 0) + mates + job.total_gpus > limit:
            return False
    # milli-GPUs the others may take (of them, the department's: the quota book's unit), pods of g they may cost
    taken = mine = lost = 0
    live: dict[tuple, tuple[bool, bool]] = {}
    spent = before.spent_shapes
    for x in between:
        if x.flavor != flavor:
            continue  # (another flavor's pools and quota: only its credits and owner counted above)
        # (whether it reserves across its quota is a matter of its age, not of its shape)
        shape = (x.department, x.pods, x.gpus_per_pod, x.max_runtime_s, x.cluster, x.cluster_selector, x.data_sources,
                 before.across_quota(x))
        found = live.get(shape)
        if found is None:
            # A shape that can neither start nor reserve any more never can again in this cycle (nothing comes
            # back): the later bounds of the same cycle need not ask again.
            if shape in spent:
                found = (False, False)
            else:
                found = _may_start_or_reserve(before, x)
                if not (found[0] or found[1]):
                    spent.add(shape)
            live[shape] = found
        admits, reserves = found
        if admits:
            taken += x.gpu_milli
            mine += x.gpu_milli if x.department == dept else 0
        if admits or reserves:
            lost += x.pods * -(-x.gpus_per_pod // g)
    nominal, borrowing, _ = quota.limits.get((dept, flavor), (0, 0, 0))
    km = job.gpu_milli
    if quota.never(dept, flavor, km) is not None:
        return False
    if borrowing is not None and quota.usage.get((dept, flavor), 0) + mine + km > nominal + borrowing:
        return False
    if quota.pool_used.get(flavor, 0) + taken + km > quota.pool_cap.get(flavor, 0):
        return False  # (an admission draws at most its GPUs on the cohort's pool)
    # its pools: the clusters it may start on (it was admitted from ``before``: its request is valid)
    refused = {q.cluster for q in before.snap.namespace_quotas
               if q.department == dept and q.flavor == flavor and job.total_gpus >= q.total_gpus
               and before.now < q.until}
    headroom = before.policy.realtime_headroom_gpus
    for pool in before.topology.job_pools(job)[0]:
        if pool.cluster in refused:
            continue
        index = pool.long if pool.reservations else pool.now  # free GPUs cut by every reservation
        if index.capacity(g) - lost < n:
            continue
        if (
            headroom <= 0
            or tier_rank(job.tier) == REALTIME
            or before.evictions.may_evict_soon((pool.cluster, pool.flavor))
            or pool.now.free_total() * MILLI - taken - km >= headroom * MILLI
        ):
            return True
    return False


def _may_start_or_reserve(before: CycleState, job: PendingJob) -> tuple[bool, bool]:
    """Whether ``job`` may still be admitted (it fits and its quota has room at ``before``) and whether it may
    still reserve (one of its pools takes more heads), in any cycle that goes on from ``before``."""
    if job.pods < 1 or job.gpus_per_pod < 1:
        return False, False
    pools = before.topology.job_pools(job)[0]
    end = before.now + job.max_runtime_s
    fits = any(pool.index_for(end).capacity(job.gpus_per_pod) >= job.pods for pool in pools)
    admits = fits and before.quota.check(job.department, job.flavor, job.gpu_milli)[0] is None
    depth = before.policy.reservation_depth
    reserves = depth > 0 and any(
        pool not in before.heads_full or (before.calendar.heads(pool) < depth and before.across_quota(job))
        for pool in pools
    )
    return admits, reserves


def wins_in_full(cycle: CycleState, job: PendingJob, bid: int) -> bool:
    """Whether ``job`` would be admitted by ``cycle`` had it bid ``bid``: the cycle replayed from the start on
    the same snapshot, without estimates, up to the job's new place in the order (what follows it cannot change
    its outcome). Its credit hold is kept as it is (the adapter reckoned it at the job's own bid)."""
    changed = replace(job, bid=bid)
    snap = replace(cycle.snap, pending=tuple(changed if j.id == job.id else j for j in cycle.snap.pending),
                   estimates=False)
    replay = type(cycle)(snap, fork_prices=False)
    for other in sorted(snap.pending, key=replay.scorer.order_key):
        replay.consider(other)
        if other.id == job.id:
            return job.id in replay.admissions
    return False
