"""The cycle's evictions (pure): which running jobs are candidates in each pool, and the three ways a pending
job may have some of them evicted: priority (realtime work starting within its target), reclaim (a head
within its nominal quota taking back lent GPUs) and drain (a head evicting cheap work instead of idling the
GPUs its reservation waits for).

Who may be a victim of whom and the smallest-victim-set search are ``preemption``'s; this module adds what
only a cycle knows: the victims already taken, the disruption budgets and the preemption rate window left,
the cooldown, and when a reclaim is too wasteful to make yet. The cycle records a chosen eviction (the
job's credits and its pending reason); nothing here changes the pools or the quota book.
"""

from __future__ import annotations

import copy
from collections import defaultdict
from collections.abc import Mapping
from dataclasses import dataclass
from operator import attrgetter

from . import reasons, tiers
from .domains import victim_domains
from .fractions import MILLI
from .ordering import REALTIME, Scorer, tier_rank
from .placement import Pool
from .preemption import (
    Candidate,
    Preemptor,
    at_risk_s,
    drain_victim,
    evicted,
    fits_past_reservations,
    priority_victim,
    reclaim_victim,
    search,
)
from .quota import QuotaBook
from .types import PendingJob, Preemption, RunningJob, Snapshot

_PURPOSE = {
    "priority": "start within its target",
    "reclaim": "reclaim its nominal quota",
    "drain": "start now instead of idling the GPUs its reservation drains",
}


@dataclass(frozen=True, slots=True)
class Chosen:
    """Victims chosen for a pending job: it waits for them on ``cluster``."""

    preemption: Preemption
    cluster: str


def share_groups(pool: Pool, ok: Mapping[int, RunningJob]) -> list[tuple[list[RunningJob], list[tuple[int, int]]]]:
    """The fractions of ``pool`` that leave together, by their smallest id, each with the shared GPUs (node
    index, device index) its eviction frees: a fraction's GPUs, every fraction on them, their GPUs, and so on (a
    job with pods on two shared GPUs links them). Evicting all of a group frees its GPUs; evicting part of it
    frees none while a member stays. Only groups whose every job is in ``ok`` (each a victim by itself:
    preemptible, of a tier that may be evicted) and whose devices are known; one protected member keeps the
    whole group off. A group of one is a fraction alone on its GPUs."""
    book = pool.shares
    if book is None:
        return []
    pos = pool.pos
    on: dict[int, list[tuple[int, int]]] = {}  # job -> its shared GPUs
    for jid, job in ok.items():
        if len(job.devices) != len(job.placement):
            continue
        keys = [(pos.get(name), device) for name, device in zip(job.placement, job.devices, strict=True)]
        if all(key in book.gpus for key in keys):
            on[jid] = keys
    groups = []
    done: set[int] = set()
    for first in sorted(on):
        if first in done:
            continue
        members: set[int] = set()
        gpus: set[tuple[int, int]] = set()
        stack, whole = [first], True
        while stack:
            jid = stack.pop()
            if jid in members:
                continue
            members.add(jid)
            if jid not in on:
                whole = False  # a holder that may not be evicted (or whose device is unknown)
                continue
            for key in on[jid]:
                if key not in gpus:
                    gpus.add(key)
                    stack.extend(book.gpus[key].holders)
        done |= members
        if whole:
            groups.append(([ok[jid] for jid in sorted(members)], sorted(gpus)))
    return groups


class Evictions:
    """Victim candidates and what the cycle has spent of its eviction budgets.

    ``running`` is sorted by id and ``pools`` hold the running jobs' pods already (a candidate's nodes are
    the untainted nodes its pods run on); ``scorer`` ranks candidates of equal work at risk."""

    def __init__(
        self,
        snapshot: Snapshot,
        running: list[RunningJob],
        pools: dict[tuple[str, str], Pool],
        scorer: Scorer,
        quota: QuotaBook,
        nodes_of: dict[int, list[int]] | None = None,
    ):
        self.now = snapshot.now
        self.policy = snapshot.policy
        self.quota = quota
        self.scorer = scorer
        # Victims already leaving for a pending job: it waits for them rather than choosing more.
        self.inflight: dict[int, list[int]] = defaultdict(list)
        for job in running:
            if job.evicting_for is not None:
                self.inflight[job.evicting_for].append(job.id)
        self.cands: dict[tuple[str, str], list[Candidate]] = defaultdict(list)
        now, running_score = self.now, scorer.running_score
        by_tier: dict[str, tuple[bool, int]] = {}  # tier -> (whether it may be evicted, minus its rank)
        fractional: dict[tuple[str, str], dict[int, tuple[RunningJob, tuple]]] = defaultdict(dict)
        for job in running:
            if not job.preemptible:
                continue
            facts = by_tier.get(job.tier)
            if facts is None:
                facts = by_tier[job.tier] = (tiers.preemptible(job.tier), -tier_rank(job.tier))
            key = (job.cluster, job.flavor)
            pool = pools.get(key)
            # the job's own choice, when it made one, instead of its tier's
            if not (facts[0] if job.own_preemptible is None else job.own_preemptible) or pool is None:
                continue
            taints = pool.taints
            if nodes_of is None:
                nodes = [i for i in map(pool.pos.get, job.placement) if i is not None and not taints[i]]
            else:  # (the cycle's indices of the job's nodes)
                nodes = [i for i in nodes_of[job.id] if not taints[i]]
            # (at_risk_s, inline: every candidate passes here)
            ran = now - job.started_at
            ran = ran if ran > 0.0 else 0.0
            interval = job.checkpoint_interval_s
            # (a fraction's work is its share of a GPU's)
            gpus = len(job.placement) * job.gpus_per_pod if job.share is None else job.gpu_milli / MILLI
            order = (
                0 if job.borrowed else 1,
                facts[1],
                gpus * (ran if interval is None or interval <= 0 else ran % interval),
                running_score(job),
                job.id,
            )
            if job.share is not None:  # (a fraction is a victim with every fraction on its GPUs: below)
                fractional[key][job.id] = (job, order)
                continue
            self.cands[key].append(Candidate(job, nodes, order))
        for key, found in fractional.items():
            self.cands[key].extend(_fraction_candidates(pools[key], found))
        for cands in self.cands.values():
            cands.sort(key=attrgetter("key"))
        # Running jobs a realtime arrival could preempt within half its start target (realtime headroom).
        soon = self.now + self.policy.realtime_start_target_s / 2 - self.policy.min_runtime_s
        self.evictable_soon: dict[tuple[str, str], int] = {
            key: sum(1 for c in cands if c.started_at <= soon) for key, cands in self.cands.items()
        }
        self.budget_left = {
            b.name: b.disruptions_allowed for b in sorted(snapshot.disruption_budgets, key=lambda b: b.name)
        }
        self.rate_left = self.policy.preemption_rate_limit - snapshot.recent_preemptions
        self.taken: set[int] = set()  # victim ids
        self.preemptions: list[Preemption] = []
        self.fail_cache: dict[tuple, tuple[str | None, dict]] = {}

    def fork(self, quota: QuotaBook, scorer: Scorer) -> Evictions:
        """A copy whose spent budgets and chosen victims change apart from these, over another cycle's quota
        book and scorer (the candidates, fixed for the snapshot, are shared)."""
        other = copy.copy(self)
        other.quota, other.scorer = quota, scorer
        other.taken, other.preemptions = set(self.taken), list(self.preemptions)
        other.budget_left = dict(self.budget_left)
        other.fail_cache = {key: (code, dict(detail)) for key, (code, detail) in self.fail_cache.items()}
        return other

    def may_evict_soon(self, key: tuple[str, str]) -> bool:
        """Whether a realtime job arriving now in this pool would find a victim within half its target, or
        the pool runs nothing preemptible at all (then waiting for one would be unbounded)."""
        return self.evictable_soon.get(key, 0) > 0 or not self.cands.get(key)

    def _reclaim_share(self) -> int:
        """Evictions left for reclaims and drains: realtime work keeps half of the window's."""
        return self.rate_left - (self.policy.preemption_rate_limit + 1) // 2

    def preempt(self, job: PendingJob, pools: list[Pool], borrows: bool) -> Chosen | tuple[str | None, dict]:
        """Priority (realtime) or reclaim evictions for ``job``: ``Chosen`` when victims were chosen (the job
        waits for them), else why none were: (reason code, detail), or (None, {}) when nothing blocks but the
        capacity itself (the job then waits, reserved)."""
        realtime = tier_rank(job.tier) == REALTIME
        rank = tier_rank(job.tier)
        flavor, dept, k = job.flavor, job.department, job.total_gpus
        quota = self.quota
        # A reclaim that frees much more than the job needs wastes the victims' work and leaves GPUs idle:
        # it waits until the job has waited reclaim_delay_s (the borrower may end meanwhile).
        waited = self.now - job.submitted_at
        patient = realtime or waited >= self.policy.reclaim_delay_s
        clusters = tuple(p.cluster for p in pools)
        end = self.now + job.max_runtime_s
        crossed = tuple(p.crossed(end) for p in pools)  # reservations it must keep off grow during the cycle
        own = job.own_preemptible  # (a preemptible realtime job may not evict its like: ``priority_victim``)
        cache_key = (flavor, clusters, dept, realtime, borrows, job.gpus_per_pod, job.pods, patient, crossed, own,
                     job.topology_level if job.topology_required else None)
        if cache_key in self.fail_cache:
            return self.fail_cache[cache_key]

        if self.rate_left <= 0:
            # The window's preemptions are used up: do not search (a cycle may see thousands of blocked jobs).
            return (reasons.PREEMPTION_RATE_LIMIT, self.rate_detail(0))

        # (the pools share their quota scopes: the cycle chose them so)
        preemptor = Preemptor(dept, flavor, k, rank, borrows, cluster=clusters[0] if clusters else None,
                              preemptible=tiers.is_preemptible(job.tier, job.own_preemptible))
        min_run, now, scorer = self.policy.min_runtime_s, self.now, self.scorer

        def eligible_for(relax_cooldown: bool):
            def eligible(v: RunningJob, removed) -> bool:
                if v.id in self.taken or (not relax_cooldown and now - v.started_at < min_run):
                    return False
                if realtime:
                    return priority_victim(v, preemptor, quota, removed)
                return reclaim_victim(v, preemptor, quota, removed, first=scorer.comes_back_first(v, job))

            return eligible

        def attempt(relax_cooldown: bool, budgets):
            best = None
            for pool in pools:
                cands = self.cands.get((pool.cluster, flavor))
                if not cands:
                    continue
                # A job bound to one domain of a level looks for victims in each domain large enough for it
                # (victims elsewhere would free GPUs it may not use); the smallest set wins, ties to the
                # domain first in name order.
                for within in victim_domains(pool, job):
                    found = self._search(job, pool, cands, eligible_for(relax_cooldown), budgets, within)
                    if found is not None and not fits_past_reservations(pool, found, job.gpus_per_pod, job.pods, end,
                                                                        within):
                        found = None  # the GPUs it frees are a head's: the job could not start on them
                    if found is not None and (best is None or evicted(found) < evicted(best[1])):
                        best = (pool, found)
            return best

        best = attempt(False, self.budget_left)
        # (what the victims free, in whole GPUs: fractions that leave together free their GPUs)
        if best is not None and not realtime and (not patient or sum(c.gpus for c in best[1]) > 2 * k):
            best = None  # too wasteful for now: wait (reserved) and retry once patient
            wasteful = True
        else:
            wasteful = False
        if best is not None:
            pool, victims = best
            # Reclaims may use only half of the window's preemptions: realtime work keeps the rest.
            allowed = self.rate_left if realtime else self._reclaim_share()
            if evicted(victims) <= allowed:
                return Chosen(self.commit(job, pool, victims, "priority" if realtime else "reclaim"), pool.cluster)
            return (reasons.PREEMPTION_RATE_LIMIT, self.rate_detail(evicted(victims)))  # not cached: the rate blocks
        result = (None, {}) if wasteful else self._blocked_by(pools, flavor, attempt)
        self.fail_cache[cache_key] = result
        return result

    def _blocked_by(self, pools: list[Pool], flavor: str, attempt) -> tuple[str | None, dict]:
        """Why no victims could be chosen: the cooldown (there are victims once it has passed), the disruption
        budgets (there are victims they do not let go), or (None, {}): nothing but the capacity itself.
        ``attempt(relax_cooldown, budgets)`` is the search (budgets None: ignore them)."""
        min_run = self.policy.min_runtime_s
        relaxed = attempt(True, self.budget_left)
        if relaxed is not None:
            at = max(c.started_at + min_run for c in relaxed[1])
            return (
                reasons.PREEMPTION_COOLDOWN,
                {"victims_needed": evicted(relaxed[1]), "min_runtime_s": min_run, "preemptible_at": at},
            )
        if attempt(True, None) is None:
            return (None, {})
        # Name the candidates' budgets that are short (else all of the candidates' budgets: together they
        # are), not every budget of the snapshot: with the cluster's own PDBs read, that may be every PDB of
        # every job namespace.
        covering = {
            (b, self.budget_left[b] < n)
            for pool in pools
            for c in self.cands.get((pool.cluster, flavor), ())
            for b, n in c.budgets
            if b in self.budget_left
        }
        short = sorted({b for b, is_short in covering if is_short}) or sorted({b for b, _ in covering})
        return (reasons.DISRUPTION_BUDGET, {"budgets": short})

    def drain(self, job: PendingJob, pool: Pool, when: float, starving: bool) -> Preemption | None:
        """Instead of reserving GPUs that would idle until ``when``, evict cheap work now: the head of the queue
        preempts running jobs when the work they lose since their last checkpoint is less than
        ``drain_ratio`` times the GPU-time the drain would leave idle. Who may be a victim is
        ``preemption.drain_victim``; on top of it, never within the cooldown and never a job with more than
        ``drain_max_loss_s`` at risk (it waits for the victim's next checkpoint). Drains, like reclaims, use
        at most half of the window's preemption budget."""
        ratio = self.policy.drain_ratio
        if ratio <= 0 or self._reclaim_share() <= 0:
            return None
        cands = self.cands.get((pool.cluster, pool.flavor))
        if not cands:
            return None
        idle = min(pool.now.free_total(), job.total_gpus) * (when - self.now)
        if idle <= 0:
            return None
        quota, now, policy, scorer = self.quota, self.now, self.policy, self.scorer
        preemptor = Preemptor(
            job.department,
            job.flavor,
            job.total_gpus,
            tier_rank(job.tier),
            quota.borrows(job.department, job.flavor, job.gpu_milli, pool.cluster),
            starving=starving,
            cluster=pool.cluster,
            preemptible=tiers.is_preemptible(job.tier, job.own_preemptible),
        )

        def eligible(v: RunningJob, removed) -> bool:
            if v.id in self.taken or now - v.started_at < policy.min_runtime_s:
                return False
            if at_risk_s(v, now) > policy.drain_max_loss_s:
                return False  # wait for its next checkpoint
            return drain_victim(v, preemptor, quota, removed, first=scorer.comes_back_first(v, job))

        victims = self._search(job, pool, cands, eligible, self.budget_left)
        if not victims:
            return None
        lost = sum(m.total_gpus * at_risk_s(m, now) for c in victims for m in c.members)
        if lost > ratio * idle or evicted(victims) > self._reclaim_share():
            return None
        return self.commit(job, pool, victims, "drain")

    def _search(self, job: PendingJob, pool: Pool, cands: list[Candidate], eligible, budgets, within=None):
        """The smallest victim set in ``pool`` that lets the whole of ``job`` start (``preemption.search``),
        within one domain's nodes when ``within`` names them."""
        return search(
            cands,
            pool=pool,
            g=job.gpus_per_pod,
            pods=job.pods,
            quota=self.quota,
            dept=job.department,
            flavor=job.flavor,
            k=job.gpu_milli,
            eligible=eligible,
            budget_left=budgets,
            within=within,
        )

    def commit(self, job: PendingJob, pool: Pool, victims: list[Candidate], why: str) -> Preemption:
        ids = tuple(sorted(m.id for c in victims for m in c.members))
        for c in victims:
            self.taken.update(m.id for m in c.members)
            for b, n in c.budgets:
                if b in self.budget_left:
                    self.budget_left[b] -= n
        self.rate_left -= len(ids)  # (each job of a group counts: the window counts victims, as the portal does)
        message = (
            f"Job {job.id} ({job.tier}) preempts {len(ids)} job(s) on {pool.cluster}/{job.flavor} "
            f"to {_PURPOSE[why]}."
        )
        preemption = Preemption(job.id, ids, why, message)
        self.preemptions.append(preemption)
        return preemption

    def rate_detail(self, needed: int) -> dict[str, object]:
        detail: dict[str, object] = {
            "allowed_now": max(0, self.rate_left),
            "limit": self.policy.preemption_rate_limit,
            "window_s": self.policy.preemption_window_s,
        }
        if needed:
            detail["victims_needed"] = needed
        return detail


def _fraction_candidates(pool: Pool, found: dict[int, tuple[RunningJob, tuple]]) -> list[Candidate]:
    """The victims the pool's fractions make (``found``: each fraction that may be evicted, with its own key):
    one per group that leaves together (``share_groups``), freeing its shared GPUs, 1 GPU each. A group sits in
    the total order where its most protected member would (not borrowed before borrowed, the higher tier), with
    the work its members lose together (their shares of their GPUs' work at risk, summed), then the highest
    score among them, then its smallest id: it goes after every job its most protected member goes after, and
    before a lone job of that kind only where it loses less work."""
    taints = pool.taints
    out = []
    for members, gpus in share_groups(pool, {jid: job for jid, (job, _) in found.items()}):
        nodes = [i for i, _ in gpus if not taints[i]]
        if len(members) == 1:
            job = members[0]
            out.append(Candidate(job, nodes, found[job.id][1], h=1, gpus=len(gpus)))
            continue
        keys = [found[m.id][1] for m in members]
        top = max(k[:2] for k in keys)
        key = (top[0], top[1], sum(k[2] for k in keys), max(k[3] for k in keys), min(k[4] for k in keys))
        out.append(Candidate(None, nodes, key, members=tuple(members), gpus=len(gpus)))
    return out
