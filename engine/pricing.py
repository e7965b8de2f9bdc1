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
from itertools import accumulate

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
                    "resizer", "team_quotas", "calendar", "team_shares", "needs", "order_sums"})
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
        key = cycle.scorer.key_at_bid(job, cycle.keys[place], bid)
        if key < cycle.keys[place]:  # (a lower bid never moves a job earlier; kept exact if it ever did)
            return wins_in_full(cycle, job, bid)
        stop = bisect_left(cycle.keys, key)
        if surely_wins(before, job, place + 1, stop):  # (the bound reads no bid)
            return True
        changed = replace(job, bid=bid)
        replay = fork(before)
        for other in cycle.order[place + 1 : stop]:
            replay.consider(other)
        replay.consider(changed)
        return job.id in replay.admissions

    return critical_bid(job.bid, wins)


def wins_bidding_nothing(cycle: CycleState, job: PendingJob, place: int) -> bool:
    """Whether ``job``, about to be admitted at ``place`` of ``cycle.order``, would have been admitted had it bid
    nothing, as ``surely_wins`` shows from the cycle's state before the admission: then its critical bid is 0
    and no fork need be taken."""
    key = cycle.scorer.key_at_bid(job, cycle.keys[place], 0)
    if key < cycle.keys[place]:
        return False
    return surely_wins(cycle, job, place + 1, bisect_left(cycle.keys, key))  # (the bound reads no bid)


def surely_wins(before: CycleState, job: PendingJob, start: int, stop: int) -> bool:
    """True when ``job`` is admitted if judged after the jobs ``before.order[start:stop]`` (``between``) from
    ``before`` (the state just before its admission), whatever they do, as a bound shows; False when only the
    replay can tell.

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
    under per-cluster quotas, or throttled by its array, is left to the replay.

    Every sum over ``between`` is read from the cycle's running sums (``OrderSums``): two bisections each, so a
    winner's bound costs the shapes of its flavor, not the jobs it would fall behind. The shapes are asked
    only as long as the answer is open: the test passes or fails monotonically in what the others take, so it
    is first tried with every job of ``between`` taking all it could, then tightened shape by shape until
    either the most they may take passes or the least they surely take fails."""
    quota = before.quota
    if quota.scoped or (job.array_id is not None and job.array_throttle) or job.topology_required:
        return False  # (a pool's room bounds no single domain's: the replay tells)
    sums = before.order_sums
    if sums is None or sums.order is not before.order:
        sums = before.order_sums = OrderSums(before)
    # (its GPUs, ``total_gpus``, only where a bound in GPUs asks: a fraction's is an exact Fraction, dear to make)
    dept, flavor, user, g, n = job.department, job.flavor, job.user, job.gpus_per_pod, job.pods
    if before.team_quotas and before.teams.applies(job) and job.team:
        # Its team's borrowing limit, after every job of its team between may take its GPUs. (The quota bound
        # below counts every job's whole GPUs, this one's too, though a team's job adds only what its team's
        # held guarantee does not cover: the bound stays a bound.)
        found = before.teams.limits.get((dept, job.team, flavor))
        if found is not None and found[1] is not None:
            mates = sums.total("team_gpus", (dept, job.team, flavor), start, stop)
            if before.teams.usage.get((dept, job.team, flavor), 0) + mates + job.total_gpus > found[0] + found[1]:
                return False
    if before.credits is not None and job.hold > 0:
        left = before.credits.get(dept, 0)
        # (every department's holds first: one bisection-free difference, and enough where credits are ample)
        if job.hold > left - sums.total("all_holds", None, start, stop) and (
                job.hold > left - sums.total("holds", dept, start, stop)):
            return False
        share = before.credits.get(account(dept, job.team)) if job.team and before.team_shares else None
        if share is not None:  # its team's share of the budget, after its team's jobs between
            if job.hold > share - sums.total("team_holds", (dept, job.team), start, stop):
                return False
    limit = before.users.limit(dept, user) if before.user_limits else None
    if limit is not None:
        mates = sums.total("user_gpus", (dept, user), start, stop)
        if before.users.held.get((dept, user), 0) + mates + job.total_gpus > limit:
            return False
    km = job.gpu_milli
    if quota.never(dept, flavor, km) is not None:
        return False
    # The room left to the others: milli-GPUs of the department's quota (None: unbounded) and of the cohort's
    # pool, and per pool that may take the job, pods of g it may lose and milli-GPUs before its headroom.
    nominal, borrowing, _ = quota.limits.get((dept, flavor), (0, 0, 0))
    room_mine = None if borrowing is None else nominal + borrowing - quota.usage.get((dept, flavor), 0) - km
    room_taken = quota.pool_cap.get(flavor, 0) - quota.pool_used.get(flavor, 0) - km
    if (room_mine is not None and room_mine < 0) or room_taken < 0:
        return False
    # its pools: the clusters it may start on (it was admitted from ``before``: its request is valid)
    refused = {q.cluster for q in before.snap.namespace_quotas
               if q.department == dept and q.flavor == flavor and job.total_gpus >= q.total_gpus
               and before.now < q.until}
    headroom = before.policy.realtime_headroom_gpus
    rooms = []  # (pods of g it may lose, milli-GPUs the others may take there or None: no headroom to keep)
    for pool in before.topology.job_pools(job)[0]:
        if pool.cluster in refused:
            continue
        index = pool.long if pool.reservations else pool.now  # free GPUs cut by every reservation
        spare = index.capacity(g) - n
        if spare < 0:
            continue
        if (
            headroom <= 0
            or tier_rank(job.tier) == REALTIME
            or before.evictions.may_evict_soon((pool.cluster, pool.flavor))
        ):
            rooms.append((spare, None))
        else:
            rooms.append((spare, pool.now.free_total() * MILLI - km - headroom * MILLI))
    if not rooms:
        return False

    def passes(taken: int, mine: int, lost: int) -> bool:
        if taken > room_taken or (room_mine is not None and mine > room_mine):
            return False
        return any(lost <= spare and (left is None or taken <= left) for spare, left in rooms)

    # milli-GPUs the others may take (of them, the department's: the quota book's unit), pods of g they may cost:
    # first as if every job of its flavor between started, spent or not (a few bisections, enough for most).
    taken = sums.total("milli", flavor, start, stop)
    if passes(taken, 0 if room_mine is None else sums.total("dept_milli", (dept, flavor), start, stop),
              sums.total(("lost", g), flavor, start, stop)):
        return True
    # Then by the shapes of its flavor among ``between``: (shape, first place, jobs, their milli-GPUs); a shape
    # that can neither start nor reserve any more never can again in this cycle (nothing comes back), so the
    # later bounds of the same cycle need not ask again.
    spent = before.spent_shapes
    present = sums.shapes_between(flavor, start, stop, spent)
    taken = mine = lost = 0
    for shape, _, count, milli in present:
        taken += milli
        mine += milli if shape[0] == dept else 0
        lost += count * shape[1] * -(-shape[2] // g)
    if passes(taken, mine, lost):
        return True  # (even if every one of them starts)
    low_taken = low_mine = low_lost = 0
    order = before.order
    for shape, first, count, milli in present:
        # (whether one job of a shape may start or reserve is whether any may: the shape holds all it reads)
        admits, reserves = _may_start_or_reserve(before, order[first])
        if not (admits or reserves):
            spent.add(shape)
        cost = count * shape[1] * -(-shape[2] // g)
        own = milli if shape[0] == dept else 0
        if admits:
            low_taken, low_mine = low_taken + milli, low_mine + own
        else:
            taken, mine = taken - milli, mine - own
        if admits or reserves:
            low_lost += cost
        else:
            lost -= cost
        if passes(taken, mine, lost):
            return True
        if not passes(low_taken, low_mine, low_lost):
            return False
    return passes(taken, mine, lost)


def _may_start_or_reserve(before: CycleState, job: PendingJob) -> tuple[bool, bool]:
    """Whether ``job`` may still be admitted (it fits and its quota has room at ``before``) and whether it may
    still reserve (one of its pools takes more heads), in any cycle that goes on from ``before``."""
    if job.pods < 1 or job.gpus_per_pod < 1:
        return False, False
    pools = before.topology.job_pools(job)[0]
    end = before.now + job.max_runtime_s
    # A fraction may start on a GPU already shared, which the index of whole free GPUs does not count: it is
    # taken to fit (a bound may count too much, never too little).
    fits = job.share is not None or any(pool.index_for(end).capacity(job.gpus_per_pod) >= job.pods for pool in pools)
    admits = fits and before.quota.check(job.department, job.flavor, job.gpu_milli)[0] is None
    depth = before.policy.reservation_depth
    reserves = depth > 0 and any(
        pool not in before.heads_full or (before.calendar.heads(pool) < depth and before.across_quota(job))
        for pool in pools
    )
    return admits, reserves


# A stretch of the order is walked, job by job, when it is at most this many times as long as its flavor has
# shapes; a longer one is read by bisecting each shape's places (two bisections cost about a walked job's two).
WALK_PER_SHAPE = 2


class Sums:
    """The places in the cycle's order of one key's jobs, ascending, and the running sum of a value over them
    (``sums[k]``: over the first ``k``), so that the sum over any stretch of the order is two bisections."""

    __slots__ = ("places", "sums")

    def __init__(self, places: list[int], values) -> None:
        self.places = places
        self.sums = list(accumulate(values, initial=0))

    def total(self, start: int, stop: int):
        places = self.places
        return self.sums[bisect_left(places, stop)] - self.sums[bisect_left(places, start)]


def _grouped(entries) -> dict:
    """Running sums per key from (key, place, value) in the order's places."""
    places: dict = {}
    values: dict = {}
    for key, place, value in entries:
        found = places.get(key)
        if found is None:
            places[key], values[key] = [place], [value]
        else:
            found.append(place)
            values[key].append(value)
    return {key: Sums(places[key], values[key]) for key in places}


def _shape(cycle: CycleState, x: PendingJob) -> tuple:
    """What ``_may_start_or_reserve`` reads of a job, and its share of the bound: its department first, then its
    pods and GPUs per pod (``surely_wins`` reads those three by place). Whether it reserves across its quota is
    a matter of its age, fixed within the cycle."""
    return (x.department, x.pods, x.gpus_per_pod, x.max_runtime_s, x.cluster, x.cluster_selector, x.data_sources,
            cycle.across_quota(x), x.flavor, x.share)


class OrderSums:
    """Running sums over the cycle's order that the price bounds read (``surely_wins``): made once per cycle,
    each kind on its first use, and shared with the cycle's forks (the order is theirs too). What a bound asks
    of the jobs between a winner's two places then costs bisections, not a walk over those jobs."""

    def __init__(self, cycle: CycleState) -> None:
        self.order = cycle.order
        self.cycle = cycle  # (read only for the shapes' quota age, fixed within the cycle)
        self.kinds: dict = {}
        self.flavors: set[str] | None = None  # of its GPU jobs
        # per flavor, its GPU jobs (pods > 0): their places, milli-GPUs, pods and GPUs per pod
        self.columns: dict[str, tuple[list[int], list[int], list[int], list[int]]] = {}
        self.shapes: dict[str, dict[tuple, Sums]] = {}  # flavor -> shape -> its jobs' milli-GPUs
        self.shape_at: list[tuple | None] | None = None  # per place, its job's shape (None: not a GPU job)
        self.milli_at: list[int] = []

    def total(self, kind, key, start: int, stop: int):
        """The sum of ``kind`` over the jobs of ``key`` at places ``start`` to ``stop`` (excluded)."""
        found = self.kinds.get(kind)
        if found is None:
            found = self.kinds[kind] = self._index(kind)
        sums = found.get(key)
        return 0 if sums is None else sums.total(start, stop)

    def _index(self, kind) -> dict:
        order = self.order
        if kind == "team_gpus":  # a team's GPUs of a flavor
            return _grouped(((x.department, x.team, x.flavor), p, x.total_gpus) for p, x in enumerate(order))
        if kind == "holds":  # a department's credit holds
            return _grouped((x.department, p, x.hold) for p, x in enumerate(order) if x.hold > 0)
        if kind == "all_holds":  # every department's
            return {None: Sums(range(len(order)), [x.hold if x.hold > 0 else 0 for x in order])}
        if kind == "team_holds":  # a team's credit holds
            return _grouped(((x.department, x.team), p, x.hold) for p, x in enumerate(order) if x.hold > 0)
        if kind == "user_gpus":  # a member's GPUs, of every flavor
            return _grouped(((x.department, x.user), p, x.total_gpus) for p, x in enumerate(order))
        if kind == "milli":  # milli-GPUs of a flavor's GPU jobs
            return {f: Sums(*self._column(f)[:2]) for f in self._flavors()}
        if kind == "dept_milli":  # milli-GPUs of a department's GPU jobs of a flavor
            return _grouped(((x.department, x.flavor), p, x.gpu_milli) for p, x in enumerate(order) if x.pods > 0)
        if kind[0] == "lost":  # pods of ``g`` GPUs of a flavor that a flavor's GPU jobs may cost
            g = kind[1]
            found = {}
            for f in self._flavors():
                places, _, pods, gpus = self._column(f)
                found[f] = Sums(places, [n * -(-h // g) for n, h in zip(pods, gpus, strict=True)])
            return found
        raise ValueError(kind)

    def _flavors(self) -> set[str]:
        if self.flavors is None:
            self.flavors = {x.flavor for x in self.order if x.pods > 0}
        return self.flavors

    def _column(self, flavor: str) -> tuple[list[int], list[int], list[int], list[int]]:
        found = self.columns.get(flavor)
        if found is None:
            jobs = [(p, x) for p, x in enumerate(self.order) if x.flavor == flavor and x.pods > 0]
            found = self.columns[flavor] = ([p for p, _ in jobs], [x.gpu_milli for _, x in jobs],
                                            [x.pods for _, x in jobs], [x.gpus_per_pod for _, x in jobs])
        return found

    def shapes_between(self, flavor: str, start: int, stop: int, spent: set[tuple]) -> list[tuple]:
        """The shapes of ``flavor`` at places ``start`` to ``stop`` (excluded), but the ``spent`` ones: (shape,
        the place of its first job there, its jobs there, their milli-GPUs), in the order of those first places.
        By walking the places or by bisecting each shape's, whichever is shorter."""
        shapes = self.shapes.get(flavor)
        if shapes is None:
            shapes = self._shapes(flavor)
        found = []
        if stop - start <= WALK_PER_SHAPE * len(shapes):
            at, milli_at, seen = self.shape_at, self.milli_at, {}
            for place in range(start, stop):
                shape = at[place]
                if shape is None or shape[8] != flavor or shape in spent:
                    continue
                entry = seen.get(shape)
                if entry is None:
                    seen[shape] = entry = [shape, place, 1, milli_at[place]]
                    found.append(entry)
                else:
                    entry[2] += 1
                    entry[3] += milli_at[place]
            return found
        for shape, sums in shapes.items():
            if shape in spent:
                continue
            places = sums.places
            first = bisect_left(places, start)
            end = bisect_left(places, stop, first)
            if first < end:
                found.append((shape, places[first], end - first, sums.sums[end] - sums.sums[first]))
        found.sort(key=lambda entry: entry[1])
        return found

    def _shapes(self, flavor: str) -> dict[tuple, Sums]:
        if self.shape_at is None:
            cycle = self.cycle
            self.shape_at = [_shape(cycle, x) if x.pods > 0 else None for x in self.order]
            self.milli_at = [x.gpu_milli for x in self.order]
        at, milli_at = self.shape_at, self.milli_at
        shapes = self.shapes[flavor] = _grouped(
            (shape, p, milli_at[p]) for p, shape in enumerate(at) if shape is not None and shape[8] == flavor)
        return shapes


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
