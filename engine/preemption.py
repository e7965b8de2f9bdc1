"""Victim selection: who may be a victim of whom (three rules, one per kind of preemption), and the smallest
valid set of running jobs whose eviction lets a preemptor in.

Kinds: *priority* (a realtime job must start within its target), *reclaim* (a department within its nominal
quota takes back lent GPUs), *drain* (the queue's head evicts cheap work rather than idle GPUs while they
drain for it). The rules are pure functions of the victim, the preemptor and the quota book
(``priority_victim``, ``reclaim_victim``, ``drain_victim``); the engine adds the cycle-wide guards.

Candidates (per pool, computed once a cycle) are ordered by the total order
``(not borrowed, -tier rank, work at risk, score, id)``: borrowers first, then lower tiers (backfill before
elastic), then the least work lost since the last checkpoint (GPUs x seconds, ``at_risk_s``), then lower
score, then the smaller id. A *group* of fractions that leave together (below) is one candidate: its first two
fields are its most protected member's, its work at risk the sum of its members', its score the highest of
theirs, its id the smallest.

The search walks the candidates in that order, adding each *eligible* one until the preemptor fits physically
(enough pods of its size on the pool's nodes) and quota-wise (its department's limits and the cohort pool
after the victims' GPUs return), then drops every victim it can spare, last added first. The result is
minimal (no victim can be removed) and, among minimal sets, prefers the cheapest victims by the order above.
A single sufficient victim (a job, or a group) always wins, and among those the one that loses the least work,
then frees the fewest GPUs (evicting a 4-GPU gang for a 1-GPU job leaves 3 GPUs idle until a job of that size
comes along).

Never a victim: realtime jobs, ``preemptible=False`` jobs (being evicted already), jobs taken as victims
earlier in the cycle, jobs that have run less than ``policy.min_runtime_s`` (relaxed only to *explain* a
wait), jobs of which any disruption budget has no room left for their pods (a pod may be covered by several
budgets; the Eviction API refuses if any of them has no room, so every one of the job's budgets is charged all
of its pods). Fractions of a GPU are victims by their GPUs (``eviction.share_groups``): a fraction alone on its
GPU is a victim as a one-GPU job is (it frees that GPU, gives back its share of the quota and loses its share of
the GPU's work); fractions sharing a GPU are one victim *group*, evicted together or not at all (evicting some
frees nothing while the others stay): each member passes the rule, the cooldown and its disruption budgets, one
protected member (realtime, ``preemptible=False``) keeps the group off, the set's size counts each member
(``evicted``), and so does the rate window.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from fractions import Fraction
from itertools import chain

from .fractions import milli_of
from .ordering import REALTIME, tier_rank
from .placement import Pool
from .quota import QuotaBook
from .types import RunningJob

# ---------------------------------------------------------------- who may be a victim of whom


@dataclass(frozen=True, slots=True)
class Preemptor:
    """What the victim rules need to know of the pending job that preempts."""

    department: str
    flavor: str
    total_gpus: int | Fraction  # (GPUs; the rules count them in the quota book's milli-GPUs)
    rank: int  # tier rank
    borrows: bool  # it would take its department beyond its nominal quota
    starving: bool = False
    cluster: str | None = None  # the cluster of the pool it would start in (selects per-cluster quotas)
    preemptible: bool = False  # it is itself preemptible (a realtime job that chose to be, a session the lab made so)


def at_risk_s(job: RunningJob, now: float) -> float:
    """Seconds of the job's work an eviction now would lose: those since its last checkpoint (all of its run
    when it declares no checkpoint interval)."""
    ran = max(0.0, now - job.started_at)
    interval = job.checkpoint_interval_s
    if interval is None or interval <= 0:
        return ran
    return ran % interval


def _yields_to_realtime(v: RunningJob, p: Preemptor) -> bool:
    """Of the realtime tier only a job that chose to be preemptible (a session the lab lets yield) is a victim,
    and only of realtime work that is not preemptible itself: two such jobs would evict each other in turn."""
    return tier_rank(v.tier) == REALTIME and p.rank == REALTIME and v.own_preemptible is True and not p.preemptible


def priority_victim(v: RunningJob, p: Preemptor, quota: QuotaBook, removed: Mapping[str, int]) -> bool:
    """Realtime work that must start within its target: any lower tier of another department, even when the
    realtime job borrows to start (Kueue's borrowWithinCohort with its threshold at the realtime tier). A
    realtime job is never preempted, so it cannot start on idle borrowed GPUs and give them back later; the
    alternative is a late start whenever the other departments run within their nominal quotas, which on a
    lab whose quotas fill the cluster is most of the time. The victim department's claim is bounded by the
    quota check the search makes anyway (its lending limit, the realtime department's borrowing limit), and
    its evicted job loses only the work since its last checkpoint and queues again at once.

    Its own department's lower tiers too, unless that just moves the borrowing around: when the realtime job
    borrows and its department is within nominal, the victim would come back in its department's nominal
    share, ahead of the preemptor, and the eviction would repeat every cooldown for nothing."""
    if tier_rank(v.tier) <= p.rank and not _yields_to_realtime(v, p):
        return False
    if v.department != p.department:
        return True
    gone = removed.get(p.department, 0)
    return (
        not p.borrows
        or quota.over_nominal(p.department, p.flavor, gone, p.cluster)
        or quota.within_nominal(p.department, p.flavor, milli_of(p.total_gpus) - gone - v.gpu_milli, p.cluster)
    )


def reclaim_victim(
    v: RunningJob, p: Preemptor, quota: QuotaBook, removed: Mapping[str, int], *, first: bool
) -> bool:
    """A department within its nominal quota takes back lent GPUs: only from other departments' borrowers
    while those stay above their nominal quota, never of a higher tier than the preemptor (dev/test work does
    not evict training), never a job that would queue ahead of the preemptor once evicted (``first``: it
    would take the GPUs back as soon as they are free, say because it starves, and the eviction would repeat
    every cooldown)."""
    if v.department == p.department or tier_rank(v.tier) < p.rank or first:
        return False
    return v.borrowed and quota.over_nominal(v.department, p.flavor, removed.get(v.department, 0), v.cluster)


def drain_victim(
    v: RunningJob, p: Preemptor, quota: QuotaBook, removed: Mapping[str, int], *, first: bool
) -> bool:
    """The queue's head evicts cheap work instead of idling GPUs while they drain: lower tiers of anyone,
    borrowers above their nominal quota, its own department's work of its tier or lower, and, once the head
    starves, any work of its tier or lower. Never higher tiers, never a job that would queue ahead of the head
    once evicted (``first``). For a realtime head every candidate qualifies (realtime work is never one), as
    every candidate of another department does for ``priority_victim``."""
    vrank = tier_rank(v.tier)
    if vrank < p.rank or first or (vrank == REALTIME and not _yields_to_realtime(v, p)):
        return False
    over = v.borrowed and quota.over_nominal(v.department, p.flavor, removed.get(v.department, 0), v.cluster)
    if v.department == p.department:
        return True
    return p.starving or vrank > p.rank or over


def fits_past_reservations(pool: Pool, victims: list[Candidate], g: int, pods: int, end: float,
                           within: frozenset[int] | None = None) -> bool:
    """Whether a job of ``pods`` x ``g`` GPUs ending at ``end`` could start once ``victims`` are gone, keeping off
    the GPUs of every reservation it would run past (the search counts only free GPUs). A victim's GPUs count
    for such a job only beyond what the heads' plans already take: a victim due to end before a head's
    reserved start was part of that head's plan; one due to end later was not, so its GPUs are spare."""
    m = pool.crossed(end)
    if m == 0:
        return True
    freed: dict[int, list[Candidate]] = defaultdict(list)
    for c in victims:
        for i in c.nodes:
            freed[i].append(c)
    reservations = pool.reservations[:m]
    fit = 0
    for i in (pool.indexed if within is None else sorted(within)):
        units = freed.get(i, ())
        value = pool.free[i] + sum(c.h for c in units)
        for r in reservations:
            left = r.spare.get(i)
            if left is not None:
                left += sum(c.h for c in units if c.end > r.until)
                if left < value:
                    value = left
        if value > 0:
            fit += value // g
            if fit >= pods:
                return True
    return False


# ---------------------------------------------------------------- the search


class Candidate:
    """One victim of the search: a running job, or a *group* of fractions that leave together (every job on a
    set of shared GPUs: evicting them all frees those GPUs, evicting some frees nothing). A group is evicted
    whole or not at all, each member under the victim rules, the cooldown and its disruption budgets.

    ``job``: the job of a one-job candidate, None for a group; ``members``: its jobs (by id); ``nodes``: the
    pool's index of each unit it frees on an untainted indexed node, ``h`` GPUs each (a pod of a whole-GPU job,
    a shared GPU of fractions: 1); ``gpus``: the GPUs it frees in all; ``end``: when they would be free anyway
    (its members' latest expected end); ``gone``: milli-GPUs it gives back per department; ``budgets``: the pods
    it charges to each disruption budget; ``key``: its place in the total order."""

    __slots__ = ("job", "members", "nodes", "h", "gpus", "end", "gone", "budgets", "key")

    def __init__(self, job: RunningJob | None, nodes: list[int], key: tuple, *,
                 members: tuple[RunningJob, ...] | None = None, h: int | None = None, gpus: int | None = None):
        self.job = job
        self.members = (job,) if members is None else members
        self.nodes = nodes
        self.key = key
        if job is not None:
            self.h = job.gpus_per_pod if h is None else h
            self.gpus = len(job.placement) * job.gpus_per_pod if gpus is None else gpus
            self.end = job.expected_end
            self.gone = {job.department: job.gpu_milli}
            self.budgets = tuple((b, job.pods) for b in job.disruption_budgets)
        else:
            self.h = 1 if h is None else h
            self.gpus = len(nodes) if gpus is None else gpus
            self.end = max(m.expected_end for m in self.members)
            gone: dict[str, int] = {}
            budgets: dict[str, int] = {}
            for m in self.members:
                gone[m.department] = gone.get(m.department, 0) + m.gpu_milli
                for b in m.disruption_budgets:
                    budgets[b] = budgets.get(b, 0) + m.pods
            self.gone = gone
            self.budgets = tuple(sorted(budgets.items()))

    @property
    def started_at(self) -> float:
        """When its last member started (the cooldown holds for each member)."""
        return max(m.started_at for m in self.members)


def evicted(victims: list[Candidate]) -> int:
    """How many jobs a victim set evicts (a group counts each of its members): the size the search minimises
    and the preemption rate window counts."""
    return sum(len(c.members) for c in victims)


def all_eligible(c: Candidate, eligible: Callable[[RunningJob, Mapping[str, int]], bool],
                 removed: Mapping[str, int]) -> bool:
    """Whether every member of ``c`` is a victim under the rule ``eligible``, each judged with the members
    before it gone (as the search would judge them as victims one after another)."""
    job = c.job
    if job is not None:
        return eligible(job, removed)
    seen = dict(removed)
    for m in c.members:
        if not eligible(m, seen):
            return False
        seen[m.department] = seen.get(m.department, 0) + m.gpu_milli
    return True


MAX_SET_FOR_SEEDS = 4  # beyond this size the seeded retries cost more than they save
SEEDS = 4  # how many alternative first victims the search tries when looking for a smaller set


def search(
    cands: list[Candidate],
    *,
    pool: Pool,
    g: int,
    pods: int,
    quota: QuotaBook,
    dept: str,
    flavor: str,
    k: int,  # the preemptor's milli-GPUs (the quota book's unit)
    eligible: Callable[[RunningJob, Mapping[str, int]], bool],
    budget_left: Mapping[str, int] | None,
    within: frozenset[int] | None = None,
) -> list[Candidate] | None:
    """The victim set, or None. ``budget_left`` None ignores disruption budgets (explanations only). ``within``:
    the nodes of the one domain the job must start in (a required topology level): only the GPUs its victims
    free there count, and only jobs with a pod there are candidates.

    Greedy-then-prune in candidate order gives a minimal set; to find a *smallest* one it is repeated with
    each of the first ``SEEDS`` candidates forced first; the smallest result wins, ties to the earlier seed
    (so the preference order decides between equally small sets). Neither the single-victim walk nor the
    seeds are tried where they cannot find a smaller set than the first one: every set has at least
    ``_fewest`` victims."""
    if within is not None:
        cands = [c for c in cands if not within.isdisjoint(c.nodes)]
    best = _greedy(cands, None, pool, g, pods, quota, dept, flavor, k, eligible, budget_left, within)
    if not best:
        return None  # no set, or the job fits without victims (it waits on a reservation, not on capacity)
    size = evicted(best)
    fewest = _fewest(cands, pool, g, pods, within) if len(best) > 1 else 1
    if fewest < 2:
        single = _single(cands, pool, g, pods, quota, dept, flavor, k, eligible, budget_left, within)
        if single is not None:
            return single
    if size > MAX_SET_FOR_SEEDS or size <= fewest:
        return best  # (no seed can find a smaller set than one of the fewest victims any set needs)
    for seed in cands[:SEEDS]:
        if any(seed is c for c in best):
            continue
        found = _greedy(cands, seed, pool, g, pods, quota, dept, flavor, k, eligible, budget_left, within)
        if found is not None and evicted(found) < size:
            best, size = found, evicted(found)
            if size == 1:
                break
    return best


def _fewest(cands: list[Candidate], pool: Pool, g: int, pods: int, within: frozenset[int] | None) -> int:
    """A lower bound on the victims of any set that lets ``pods`` x ``g`` GPUs in: a victim's pod of ``h`` GPUs
    adds at most ``ceil(h / g)`` pods of ``g`` to its node's room, whatever else leaves that node (the room of
    a node freed of ``H`` GPUs grows by at most ``ceil(H / g)``, and ``ceil`` adds up to no less), so each victim
    adds at most the most any candidate's pods do, and the pods missing now need that many victims at least.
    A gang of whole nodes on half-busy nodes needs a victim per node; the search then stops at the first set
    of that size instead of trying its seeds, and skips the single-victim walk when one cannot be enough."""
    missing = pods - _capacity(pool, g, within)
    if missing <= 0:
        return 1  # (its quota alone may want victims: one may do)
    most = max((len(c.nodes) * -(-c.h // g) for c in cands), default=0)
    return -(-missing // most) if most > 0 else 1


def _capacity(pool: Pool, g: int, within: frozenset[int] | None) -> int:
    """Pods of ``g`` GPUs that fit on the pool's free GPUs now (on ``within``'s nodes only, when given)."""
    if within is None:
        return pool.now.capacity(g)
    free = pool.free
    return sum(free[i] // g for i in within if free[i] > 0)


def _single(cands, pool, g, pods, quota, dept, flavor, k, eligible, budget_left, within=None):
    """The candidate whose eviction alone lets the preemptor in and frees the fewest GPUs (the earliest in
    preference order among those), or None."""
    free = pool.free
    base = _capacity(pool, g, within)
    best = None
    best_cost = None  # (work at risk, GPUs) of the best so far: only a cheaper candidate can replace it
    for c in cands:
        if best_cost is not None and (c.key[2], c.gpus) >= best_cost:
            continue
        # The physical test first: it is the cheapest, and most candidates alone free too little.
        nodes = c.nodes if within is None else [i for i in c.nodes if i in within]
        h = c.h
        if len(nodes) == 1:  # (most victims run one pod)
            old = free[nodes[0]]
            cap = base + (old + h if old + h > 0 else 0) // g - (old if old > 0 else 0) // g
        else:
            cap = base
            seen: dict[int, int] = {}
            for i in nodes:
                old = free[i] + seen.get(i, 0)
                seen[i] = seen.get(i, 0) + h
                cap += max(0, old + h) // g - max(0, old) // g
        if cap < pods or not all_eligible(c, eligible, {}):
            continue
        if budget_left is not None and any(n > budget_left.get(b, n) for b, n in c.budgets):
            continue
        if quota.check(dept, flavor, k, c.gone, pool.cluster)[0] is None:
            best = c
            best_cost = (c.key[2], c.gpus)
    return None if best is None else [best]


def _greedy(cands, seed, pool, g, pods, quota, dept, flavor, k, eligible, budget_left, within=None):
    free = pool.free
    delta: dict[int, int] = defaultdict(int)
    removed: dict[str, int] = defaultdict(int)
    used_budget: dict[str, int] = defaultdict(int)
    cap = _capacity(pool, g, within)
    # quota, incrementally, in every scope the preemptor's GPUs on this cluster count in: the cohort pool's
    # draw after the removals, and the preemptor's own limits. A victim's GPUs return to a scope only when its
    # department's use on this cluster counts there.
    usage = quota.usage
    scopes = []
    for key in quota.keys(dept, flavor, pool.cluster):
        nominal, limit, _ = quota.limits.get((dept, key), (0, 0, 0))
        scopes.append([key, quota.pool_used.get(key, 0), quota.pool_cap.get(key, 0),
                       None if limit is None else nominal + limit, defaultdict(int)])  # fmt: skip
    # (department, scope) -> (whether its use here counts in the scope, its guaranteed GPUs there)
    counts: dict[tuple[str, str], tuple[bool, int]] = {}

    def apply(c: Candidate, sign: int) -> None:  # (quota.over inline: every candidate walked comes here)
        nonlocal cap
        for d, milli in c.gone.items():
            change = sign * milli
            removed[d] += change
            for scope in scopes:
                key, gone = scope[0], scope[4]
                found = counts.get((d, key))
                if found is None:
                    found = counts[(d, key)] = (quota.counts(d, flavor, pool.cluster, key), quota.guaranteed(d, key))
                if not found[0]:
                    continue
                before = usage[(d, key)] - gone[d]
                gone[d] += change
                gu, after = found[1], before - change  # (max(0, used - guaranteed) before and after)
                scope[1] += (after - gu if after > gu else 0) - (before - gu if before > gu else 0)
        h = sign * c.h
        for i in c.nodes:
            if within is not None and i not in within:
                continue  # (its GPUs there are of no use to a job bound to the domain)
            old = free[i] + delta[i]
            delta[i] += h
            cap += (old + h if old + h > 0 else 0) // g - (old if old > 0 else 0) // g

    def fits() -> bool:
        if cap < pods:
            return False
        for key, draw, pool_cap, ceiling, gone in scopes:
            used = usage[(dept, key)] - gone[dept]
            if ceiling is not None and used + k > ceiling:
                return False
            if draw + quota.over(dept, key, used + k) - quota.over(dept, key, used) > pool_cap:
                return False
        return True

    chosen: list[Candidate] = []
    # (lazily: the walk usually stops long before the end of the candidates)
    order = cands if seed is None else chain((seed,), (c for c in cands if c is not seed))
    for c in order:
        if not all_eligible(c, eligible, removed):
            continue
        if budget_left is not None and c.budgets:
            budgets = [(b, n) for b, n in c.budgets if b in budget_left]
            if any(used_budget[b] + n > budget_left[b] for b, n in budgets):
                continue
            for b, n in budgets:
                used_budget[b] += n
        chosen.append(c)
        apply(c, 1)
        if fits():
            break
    else:
        return None
    # Drop every victim that can be spared, last added first (incremental: O(victims)). The spared are marked
    # and left out at the end: removing each from a list was quadratic, and a long walk on a full pool chooses
    # thousands before the set fits.
    spared = [False] * len(chosen)
    for at in range(len(chosen) - 1, -1, -1):
        c = chosen[at]
        apply(c, -1)
        if fits():
            spared[at] = True
        else:
            apply(c, 1)
    return [c for c, gone in zip(chosen, spared, strict=True) if not gone]
