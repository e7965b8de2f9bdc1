"""The one pending order, and the scores it is made of (pure; see docs/scheduling.md, "Orderings").

Pending jobs are taken in the order ``(tier rank, band, group, expedited since | deadline | starving since | -score,
submitted_at, id)``: realtime before elastic before backfill; within a tier, first (band -1) the jobs requeued
after their pods were lost to a node failure (``PendingJob.expedited_since``, an expedited requeue), the earliest
requeued first; then the priority band (jobs whose
weight is at least ``priority_band_weight`` and that have waited ``BAND_ENTRY_SHARE`` of the starvation limit;
one band when it is 0), and within a band (group -1) jobs whose deadline is at risk, earliest deadline first,
when ``deadline_edf_horizon_s`` is set (``at_risk``), then (group 0) starving jobs (the longest starving first),
then (group 1) the others by score. Every
term is documented in ``policy.job_score``, ``starving_since`` and ``band``.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Mapping

from . import tiers
from .policy import fair_factor, in_priority_band, job_score, size_factor, use_ratios
from .teams import SEPARATOR, account, tree_ratios
from .types import TIER_RANK, PendingJob, Policy, RunningJob, Snapshot

REALTIME = tiers.REALTIME.rank
_LOWEST = tiers.LOWEST_RANK

# A job's weight stretches or shrinks its starvation limit only this far: a critical job starves after a
# quarter of the limit, a low one after twice the limit (never later).
STARVATION_WEIGHT_RANGE = (0.5, 4.0)


# A job of the priority band goes ahead of the rest of its tier only once it has waited this share of the
# starvation limit (3 hours at the default 12 h limit, more when the queue is long). Until then it is ordered by
# its score like everyone else, which its weight already favours. Putting every band job ahead at once made each
# urgent arrival take the GPUs being drained for the starving head, which then waited again: on the labs that
# cost about a point of utilisation at load 0.9, where joining after a quarter of the limit costs none and still
# more than halves the urgent waits (docs/simulator.md, "The priority band").
BAND_ENTRY_SHARE = 0.25


# The band of a job whose expedited requeue is under way: ahead of everything else in its tier, the priority band
# and starving jobs included (it was running, and lost its place only to the platform's failure).
EXPEDITED_BAND = -1

# A plain dict: the public mapping is read-only, and every lookup through its proxy costs a little more in
# the functions every pending job passes through several times a cycle.
_RANK = dict(TIER_RANK)


def tier_rank(tier: str) -> int:
    return _RANK.get(tier, _LOWEST)


def starvation_limit(policy: Policy, now: float, pending) -> float:
    """The wait after which a job of weight 1 starves: ``starvation_s``, or ``starvation_queue_factor`` times
    the median wait of the pending non-realtime jobs when that is longer (0 = never starve)."""
    limit = policy.starvation_s
    if limit <= 0 or policy.starvation_queue_factor <= 0:
        return limit
    waits = [now - job.submitted_at for job in pending if _RANK.get(job.tier, _LOWEST) != REALTIME]  # (tier_rank)
    waits.sort()
    if not waits:
        return limit
    return max(limit, policy.starvation_queue_factor * waits[(len(waits) - 1) // 2])


def starving_since(
    policy: Policy, now: float, job: PendingJob, fair: float = 1.0, limit: float | None = None
) -> float | None:
    """When the job started starving: the starvation limit (``starvation_limit``, by default the fixed
    ``starvation_s``) divided by its weight times its department's fair-share factor (the product clamped to
    0.5..4) after its submission, so that urgency and fair share order the starving jobs too. None while it
    does not starve, and always for realtime work (it has its own start target)."""
    if limit is None:
        limit = policy.starvation_s
    if limit <= 0 or tier_rank(job.tier) == REALTIME:
        return None
    since = job.submitted_at + starvation_delay(policy, job.urgency, job.user_tier, fair, limit)
    return since if since <= now else None


def starvation_delay(policy: Policy, urgency: str, user_tier: str, fair: float, limit: float) -> float:
    """How long after its submission a (non-realtime) job starves: ``limit`` divided by its weight times its
    department's fair-share factor, the product clamped to ``STARVATION_WEIGHT_RANGE``."""
    weight = policy.weights.get((urgency, user_tier), policy.default_weight) * fair
    lo, hi = STARVATION_WEIGHT_RANGE
    return limit / min(hi, max(lo, weight))


def largest_nominals(snapshot: Snapshot) -> dict[tuple[str, str], int]:
    """Each department's largest nominal quota of each flavor (global or of one cluster): a job larger than it
    can only ever run on borrowed GPUs (``policy.quota_reservation_age_s``)."""
    out: dict[tuple[str, str], int] = {}
    for q in snapshot.quotas:
        key = (q.department, q.flavor)
        out[key] = max(out.get(key, 0), q.nominal)
    return out


def use_inputs(snapshot: Snapshot) -> tuple[dict[str, int], dict[str, int]]:
    """Each department's nominal GPUs and GPUs running now, the inputs of its use ratio with the usage."""
    nominal: dict[str, int] = defaultdict(int)
    for q in snapshot.quotas:
        nominal[q.department] += max(0, q.nominal)
    running: dict[str, int] = defaultdict(int)
    for job in snapshot.running:
        running[job.department] += job.total_gpus
    return nominal, running


def fair_standing(snapshot: Snapshot) -> dict[str, tuple[float, float]]:
    """Each department's fair-share standing in this snapshot: (use ratio, fair factor), as the cycle scores
    its jobs with them (1.0 and 1.0: exactly its share), and each team's account's (``dept/team``: the ratio
    and factor its jobs are scored with, the department's combined with the team's). In name order."""
    nominal, running = use_inputs(snapshot)
    ratios = use_ratios(nominal=nominal, running=running, usage=snapshot.usage)
    ratios.update(tree_ratios(snapshot, ratios))  # the teams' accounts, "dept/team" (``teams.account``)
    return {d: (ratios[d], fair_factor(snapshot.policy, ratios[d])) for d in sorted(ratios)}


class Scorer:
    """Scores of one cycle: the departments' use ratios are computed once from the snapshot."""

    def __init__(self, snapshot: Snapshot):
        self.policy = snapshot.policy
        self.now = snapshot.now
        nominal, running = use_inputs(snapshot)
        self.ratios = use_ratios(nominal=nominal, running=running, usage=snapshot.usage)
        # The fair-share tree: a team's account ("dept/team") combines its ratio inside its department with the
        # department's; a job is scored by its account's ratio (``_account``), its department's without a team.
        self.tree = tree_ratios(snapshot, self.ratios)
        self.ratios.update(self.tree)
        self._use = (nominal, running, snapshot.usage)  # to recompute a ratio without one running job
        self._without: dict[int, dict[str, float]] = {}  # running job id -> use ratios once it is evicted
        self._first: dict[tuple[int, int], bool] = {}  # (victim id, preemptor id) -> comes_back_first
        self.starvation_limit = starvation_limit(self.policy, self.now, snapshot.pending)
        self.quota_age = self.policy.quota_reservation_age_s
        self.nominals = largest_nominals(snapshot) if self.quota_age > 0 else {}
        self._scores: dict[int, float] = {}
        self._fair: dict[str, float] = {}  # department -> fair factor (it depends on the department alone)
        # (urgency, user tier, department) -> starvation delay: the same for every job of the combination
        self._delays: dict[tuple[str, str, str], float] = {}
        self._bands: dict[tuple[str, str], int] = {}  # (urgency, user tier) -> band
        self.band_entry = BAND_ENTRY_SHARE * max(0.0, self.starvation_limit)
        # ``_combination``'s, by (urgency, user tier, department, team)
        self._terms: dict[tuple[str, str, str, str], tuple[bool, float | None, float]] = {}
        self._sizes: dict[float, float] = {}  # GPU-hours -> size factor
        self._running: dict[tuple, float] = {}  # (urgency, user tier, department, GPU-seconds) -> score before the bid

    def fork(self) -> Scorer:
        """A scorer for a replay in which one job bids otherwise: the caches that hold a pending job's score
        start empty; the rest depends on no bid and is shared."""
        other = copy.copy(self)
        other._scores, other._first = {}, {}
        return other

    def score(self, job: PendingJob, ratios: Mapping[str, float] | None = None) -> float:
        """The job's score this cycle; with ``ratios``, as it would be with those use ratios (not cached)."""
        s = None if ratios is not None else self._scores.get(job.id)
        if s is None:
            acct = _account(job, self.ratios)
            ratio = (self.ratios if ratios is None else ratios).get(acct, 1.0)
            s = job_score(
                self.policy,
                self.now,
                urgency=job.urgency,
                user_tier=job.user_tier,
                submitted_at=job.submitted_at,
                deadline=job.deadline,
                bid=job.bid,
                use_ratio=ratio,
                gpu_hours=job.total_gpus * job.max_runtime_s / 3600.0,
                fair=self.fair(acct) if ratios is None else fair_factor(self.policy, ratio),
            )
            if ratios is None:
                self._scores[job.id] = s
        return s

    def running_score(self, job: RunningJob) -> float:
        """A running job's score without aging or deadline (for the victim order): ``job_score``'s, whose terms
        but the bid are the same for every running job of an urgency, user tier, department and size."""
        acct = _account(job, self.ratios)
        combo = (job.urgency, job.user_tier, acct, len(job.placement) * job.gpus_per_pod * job.max_runtime_s)
        base = self._running.get(combo)
        if base is None:
            base = self._running[combo] = job_score(
                self.policy,
                self.now,
                urgency=job.urgency,
                user_tier=job.user_tier,
                submitted_at=job.submitted_at,
                deadline=None,
                bid=0,
                use_ratio=self.ratios.get(acct, 1.0),
                gpu_hours=job.total_gpus * job.max_runtime_s / 3600.0,
                aging=False,
                fair=self.fair(acct),
            )
        return base + self.policy.bid_weight * job.bid

    def fair(self, department: str) -> float:
        """The fair factor of an account: a department, or a team's ``dept/team`` (``teams.account``)."""
        f = self._fair.get(department)
        if f is None:
            f = self._fair[department] = fair_factor(self.policy, self.ratios.get(department, 1.0))
        return f

    def quota_since(self, job: PendingJob) -> float | None:
        """When a job larger than its department's nominal quota of its flavor started starving for that
        reason alone: ``quota_reservation_age_s`` after its submission (None before, for smaller jobs, for
        realtime work and when the age is 0). Such a job reserves across its quota (``Cycle.blocked``)."""
        age = self.quota_age
        if (
            age <= 0
            or job.pods * job.gpus_per_pod <= self.nominals.get((job.department, job.flavor), 0)
            or tier_rank(job.tier) == REALTIME
        ):
            return None
        since = job.submitted_at + age
        return since if since <= self.now else None

    def starving_since(self, job: PendingJob, ratios: Mapping[str, float] | None = None) -> float | None:
        """``starving_since`` with this cycle's starvation limit and the job's department's fair factor (from
        ``ratios`` when given, not cached), or ``quota_since`` when that is earlier."""
        quota = self.quota_since(job) if self.quota_age > 0 else None
        regular = self.limit_since(job, ratios)
        if quota is None or (regular is not None and regular <= quota):
            return regular
        return quota

    def limit_since(self, job: PendingJob, ratios: Mapping[str, float] | None = None) -> float | None:
        """When the job started starving by the starvation limit alone (None while it does not)."""
        limit = self.starvation_limit
        if limit <= 0 or tier_rank(job.tier) == REALTIME:
            return None
        acct = _account(job, self.ratios)
        if ratios is not None:
            fair = fair_factor(self.policy, ratios.get(acct, 1.0))
            delay = starvation_delay(self.policy, job.urgency, job.user_tier, fair, limit)
        else:
            key = (job.urgency, job.user_tier, acct)
            delay = self._delays.get(key)
            if delay is None:
                delay = self._delays[key] = starvation_delay(
                    self.policy, job.urgency, job.user_tier, self.fair(acct), limit
                )
        since = job.submitted_at + delay
        return since if since <= self.now else None

    def comes_back_first(self, victim: RunningJob, preemptor: PendingJob) -> bool:
        """Whether ``victim``, evicted for ``preemptor``, would queue ahead of it: it would take its GPUs back
        as soon as they are free, and the eviction would repeat every cooldown for nothing. Both keys are
        those of the cycle after the eviction: the departments' use without the victim's GPUs (a department
        running less gains score faster), the victim with its original submission, urgency, deadline and bid.
        (Asked for every candidate a victim search looks at, often again: kept per pair for the cycle.)"""
        pair = (victim.id, preemptor.id)
        first = self._first.get(pair)
        if first is not None:
            return first
        ratios = self._without.get(victim.id)
        if ratios is None:
            nominal, running, usage = self._use
            fewer = dict(running)
            fewer[victim.department] = fewer.get(victim.department, 0) - victim.total_gpus
            ratios = use_ratios(nominal=nominal, running=fewer, usage=usage)
            if self.tree:  # (the teams' part of each ratio is kept: one job moves a department's the most)
                for acct, r in self.tree.items():
                    dept = acct.partition(SEPARATOR)[0]
                    ratios[acct] = r - self.ratios.get(dept, 1.0) + ratios.get(dept, 1.0)
            self._without[victim.id] = ratios
        as_pending = PendingJob(
            id=victim.id, department=victim.department, flavor=victim.flavor, tier=victim.tier,
            pods=victim.pods, gpus_per_pod=victim.gpus_per_pod, urgency=victim.urgency,
            user_tier=victim.user_tier, submitted_at=victim.submitted_at, deadline=victim.deadline,
            max_runtime_s=victim.max_runtime_s, bid=victim.bid, team=victim.team,
        )  # fmt: skip
        first = self._first[pair] = self.order_key(as_pending, ratios) < self.order_key(preemptor, ratios)
        return first

    def band(self, job: PendingJob) -> int:
        """0 for a job of the priority band (weight at least ``priority_band_weight``, when that is set) that has
        waited ``BAND_ENTRY_SHARE`` of this cycle's starvation limit, else 1."""
        if self.policy.priority_band_weight <= 0:
            return 1
        key = (job.urgency, job.user_tier)
        band = self._bands.get(key)
        if band is None:
            band = self._bands[key] = 0 if in_priority_band(self.policy, *key) else 1
        if band == 0 and self.now - job.submitted_at < self.band_entry:
            return 1
        return band

    def at_risk(self, job: PendingJob) -> bool:
        """Whether ``job`` goes first in its tier and band under earliest-deadline-first: a non-realtime job
        whose deadline has not passed and whose slack (deadline - now - likely run time) is at most
        ``deadline_edf_horizon_s``. A negative slack rules a job out (past saving) only when its run time is
        predicted: ``max_runtime_s`` is an upper bound, and a job may well finish long before it."""
        horizon = self.policy.deadline_edf_horizon_s
        if horizon <= 0 or job.deadline is None or tier_rank(job.tier) == REALTIME or job.deadline <= self.now:
            return False
        slack = job.deadline - self.now - job.likely_runtime_s
        return slack <= horizon and (slack >= 0 or job.predicted_runtime_s is None)

    def order_key(self, job: PendingJob, ratios: Mapping[str, float] | None = None) -> tuple:
        """The job's key in the pending order; with ``ratios``, as it would be with those use ratios."""
        if ratios is None:
            return self.cycle_key(job)
        rank = tier_rank(job.tier)
        if job.expedited_since is not None:
            return (rank, EXPEDITED_BAND, 0, job.expedited_since, job.submitted_at, job.id)
        band = self.band(job)
        if self.at_risk(job):
            return (rank, band, -1, job.deadline, job.submitted_at, job.id)
        since = None if rank == REALTIME else self.starving_since(job, ratios)
        if since is not None:
            return (rank, band, 0, since, job.submitted_at, job.id)
        return (rank, band, 1, -self.score(job, ratios), job.submitted_at, job.id)

    def cycle_key(self, job: PendingJob) -> tuple:
        """``order_key`` with this cycle's use ratios (``cycle_keys`` of one job)."""
        return self.cycle_keys((job,))[0]

    def key_at_bid(self, job: PendingJob, key: tuple, bid: int) -> tuple:
        """``cycle_key`` of ``job`` had it bid ``bid``, from its own cycle key ``key``, without copying the job
        (what a price's bound asks of every winner). Only the score group's key reads the bid: the expedited,
        at-risk, starving and band terms read none, so a bid never moves a job between groups, and any other
        key is the same at every bid. The score is computed again with the same floating-point operations, not
        by taking the bid's term out of the key (that would not give back the same float)."""
        if key[2] != 1:
            return key
        return self.cycle_keys((job,), bid)[0]

    def cycle_keys(self, jobs, bid: int | None = None) -> list[tuple]:
        """``order_key`` with this cycle's use ratios, for every pending job of the sort: the same terms, in the
        same floating-point operations, with what depends only on (urgency, user tier, department) and on the
        size looked up once per combination instead of once per job (and the policy's terms read once).
        ``bid``: every job's keys as if it had bid that (``key_at_bid``)."""
        policy, now, band_entry = self.policy, self.now, self.band_entry
        terms_of, sizes = self._terms, self._sizes
        edf = policy.deadline_edf_horizon_s > 0
        quota_age, nominals = self.quota_age, self.nominals
        points, aging = policy.weight_points, policy.aging_per_minute
        horizon, boost, bid_weight = policy.deadline_horizon_s, policy.deadline_boost, policy.bid_weight
        keys = []
        append = keys.append
        for job in jobs:
            combo = (job.urgency, job.user_tier, job.department, job.team)
            terms = terms_of.get(combo)
            if terms is None:
                terms = terms_of[combo] = self._combination(job)
            in_band, delay, weight_fair = terms
            rank = _RANK.get(job.tier, _LOWEST)
            submitted = job.submitted_at
            if job.expedited_since is not None:
                append((rank, EXPEDITED_BAND, 0, job.expedited_since, submitted, job.id))
                continue
            band = 0 if in_band and not now - submitted < band_entry else 1
            deadline = job.deadline
            if deadline is not None and edf and self.at_risk(job):
                append((rank, band, -1, deadline, submitted, job.id))
                continue
            since = None
            if delay is not None and rank != REALTIME:
                since = submitted + delay
                if since > now:
                    since = None
            if (  # ``quota_since``, inline
                quota_age > 0
                and rank != REALTIME
                and job.pods * job.gpus_per_pod > nominals.get((job.department, job.flavor), 0)
                and submitted + quota_age <= now
                and (since is None or submitted + quota_age < since)
            ):
                since = submitted + quota_age
            if since is not None:
                append((rank, band, 0, since, submitted, job.id))
                continue
            gpu_hours = job.pods * job.gpus_per_pod * job.max_runtime_s / 3600.0
            size = sizes.get(gpu_hours)
            if size is None:
                size = sizes[gpu_hours] = size_factor(policy, gpu_hours)
            # job_score's terms, in its order
            score = weight_fair * size * (points + aging * max(0.0, now - submitted) / 60.0)
            if deadline is not None and horizon > 0:
                proximity = 1.0 - (deadline - now) / horizon
                score += boost * min(1.0, max(0.0, proximity))
            score += bid_weight * (job.bid if bid is None else bid)
            append((rank, band, 1, -score, submitted, job.id))
        return keys

    def _combination(self, job: PendingJob) -> tuple[bool, float | None, float]:
        """(in the priority band by weight, starvation delay or None, weight x fair factor) of the job's
        urgency, user tier and department."""
        policy = self.policy
        in_band = policy.priority_band_weight > 0 and in_priority_band(policy, job.urgency, job.user_tier)
        fair = self.fair(_account(job, self.ratios))
        limit = self.starvation_limit
        delay = None if limit <= 0 else starvation_delay(policy, job.urgency, job.user_tier, fair, limit)
        weight = policy.weights.get((job.urgency, job.user_tier), policy.default_weight)
        return in_band, delay, weight * fair


def _account(job, ratios) -> str:
    """The job's fair-share account: its department, or its team's inside it (``teams.account``) when the team is
    in the fair-share tree (a team named for its share of the budget alone is scored as its department)."""
    if not job.team:
        return job.department
    acct = account(job.department, job.team)
    return acct if acct in ratios else job.department
