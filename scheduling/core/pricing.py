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
from typing import Any

from .types import PendingJob

# The cycle (``engine.Cycle``) calls in here; it is typed ``Cycle`` by its role only, since importing it would
# make the two modules import each other.
Cycle = Any


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
SHARED = frozenset({"snap", "now", "policy", "running", "order", "keys", "fork_prices", "user_limits"})
REPLACED = frozenset({
    "topology", "pools", "pools_by_flavor", "closed_for", "likely_events", "scorer", "quota", "users",
    "evictions", "headroom_held", "credits", "admissions", "reasons", "gates", "admitted_end", "heads",
    "heads_full", "late_realtime", "verdicts", "before", "outcomes",
})  # fmt: skip


def fork(cycle: Cycle, job_id: int | None = None) -> Cycle:
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
    new.fork_prices, new.before, new.outcomes = False, None, {}
    new.pools = {key: pool.fork() for key, pool in cycle.pools.items()}
    new.topology = cycle.topology.fork(new.pools)
    new.pools_by_flavor = new.topology.pools_by_flavor
    new.closed_for = {k: v for k, v in cycle.closed_for.items() if k != job_id}
    new.headroom_held = cycle.headroom_held - {job_id}
    new.likely_events, new.admitted_end, new.reasons, new.late_realtime = {}, [], {}, 0
    new.scorer = cycle.scorer.fork()
    new.quota = cycle.quota.clone()
    new.users = cycle.users.clone()
    new.evictions = cycle.evictions.fork(new.quota, new.scorer)
    new.credits = None if cycle.credits is None else dict(cycle.credits)
    # A replay asks only whether its job is admitted, and counts its own admissions (the verdicts' mark): the
    # admissions made before the fork are not copied.
    new.admissions = {}
    new.gates = cycle.gates.clone()
    new.heads = dict(cycle.heads)
    new.heads_full = {new.pools[(p.cluster, p.flavor)] for p in cycle.heads_full}
    new.verdicts = None if cycle.verdicts is None else type(cycle.verdicts)()
    return new


def price_from(cycle: Cycle, before: Cycle, job: PendingJob, place: int) -> int:
    """The critical bid of ``job``, admitted at ``place`` of ``cycle.order``, from ``before``, the fork taken
    just before its admission."""
    def wins(bid: int) -> bool:
        changed = replace(job, bid=bid)
        key = cycle.scorer.order_key(changed)
        if key < cycle.keys[place]:  # (a lower bid never moves a job earlier; kept exact if it ever did)
            return wins_in_full(cycle, job, bid)
        replay = fork(before)
        for other in cycle.order[place + 1 : bisect_left(cycle.keys, key)]:
            replay.consider(other)
        replay.consider(changed)
        return job.id in replay.admissions

    return critical_bid(job.bid, wins)


def wins_in_full(cycle: Cycle, job: PendingJob, bid: int) -> bool:
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
