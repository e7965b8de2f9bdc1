"""The admission cycle: ``engine_schedule(snapshot) -> CycleResult`` (exported as ``scheduling.core.schedule``).

One pure pass over a frozen snapshot; see docs/scheduling.md for the rules. In short:

1. Index nodes per (cluster, flavor) (``placement.Pool``), subtract running pods, build the quota book and
   the victim candidates (``preemption``).
2. One pass in the pending order (``ordering``: tier, starving first, then score): each job is placed by best
   fit (gang all-or-nothing) when the cohort's quota and the capacity allow it, respecting the EASY reservations
   of the pool's heads. Otherwise a realtime job preempts (priority); the first job to wait in a pool becomes its
   head and reserves, reclaims lent GPUs (bounded) or drains cheap work instead of idling GPUs; the next ones
   to wait reserve too (``reservation_depth``, while their GPUs are under half the pool's).
3. Every job still pending gets a reason code, a one-line message, a detail (``explain``) and an honest
   estimated start (``estimate``). Borrowed capacity of a flavor clears at the highest losing bid of the
   cycle's borrowers of that flavor (capped at each winner's own bid); with no loser it is uncontested and
   the adapter charges the base (reserve) price.

The input is never mutated and every iteration runs over inputs sorted by a total order ending in an id or
name, so the decision is the same for any order of the snapshot's tuples.
"""

from __future__ import annotations

from collections import defaultdict
from types import MappingProxyType

from . import reasons
from .estimate import EstimateView, estimate_pending
from .explain import CAPACITY_RANK, NO_ESTIMATE, capacity_code, quota_note
from .ordering import REALTIME, Scorer, started_starved, tier_rank
from .placement import Pool
from .preemption import (
    Candidate,
    Preemptor,
    at_risk_s,
    drain_victim,
    priority_victim,
    reclaim_victim,
    search,
)
from .quota import QuotaBook
from .types import (
    Admission,
    ClusterInfo,
    CycleResult,
    PendingJob,
    PendingReason,
    Preemption,
    RunningJob,
    Snapshot,
)

# Heads after the first reserve only while the reserved GPUs are under this share of their pool: on a small pool
# a second reservation would close the last GPUs that small jobs backfill into, while on a large one several
# reservations keep the large jobs behind the head from being overtaken by every small job that fits a hole.
MAX_RESERVED_SHARE = 0.5


def _duration(seconds: float) -> str:
    """A wait as a person reads it: seconds under two minutes, minutes under two hours, else hours."""
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"


class Cycle:
    """Mutable working state of one cycle (never the snapshot itself)."""

    def __init__(self, snapshot: Snapshot):
        self.snap = snapshot
        self.now = snapshot.now
        self.policy = snapshot.policy
        by_pool: dict[tuple[str, str], list] = defaultdict(list)
        self.known_flavors: set[str] = set()
        for node in snapshot.nodes:
            self.known_flavors.add(node.flavor)
            if node.schedulable:
                by_pool[(node.cluster, node.flavor)].append(node)
        self.pools: dict[tuple[str, str], Pool] = {
            key: Pool(key[0], key[1], nodes) for key, nodes in sorted(by_pool.items())
        }
        self.pools_by_flavor: dict[str, list[Pool]] = defaultdict(list)
        for (_, flavor), pool in sorted(self.pools.items()):
            self.pools_by_flavor[flavor].append(pool)

        # Clusters: listed ones with their labels, state and cost rank; any other cluster a node names is
        # active, unlabelled and of cost rank 0.
        self.clusters: dict[str, ClusterInfo] = {c.name: c for c in sorted(snapshot.clusters, key=lambda c: c.name)}
        for node in snapshot.nodes:
            if node.cluster not in self.clusters:
                self.clusters[node.cluster] = ClusterInfo(node.cluster)
        self.cluster_labels = {name: frozenset(c.labels) for name, c in self.clusters.items()}
        self.flavor_clusters: dict[str, set[str]] = defaultdict(set)
        for node in snapshot.nodes:
            self.flavor_clusters[node.flavor].add(node.cluster)
        self.closed_for: dict[int, dict[str, str]] = {}  # job -> matching clusters closed to admissions

        self.running = sorted(snapshot.running, key=lambda j: j.id)
        self.scorer = Scorer(snapshot)
        # Victims already leaving for a pending job: it waits for them rather than choosing more.
        self.inflight: dict[int, list[int]] = defaultdict(list)
        for job in self.running:
            if job.evicting_for is not None:
                self.inflight[job.evicting_for].append(job.id)
        self.cands: dict[tuple[str, str], list[Candidate]] = defaultdict(list)
        for job in self.running:
            pool = self.pools.get((job.cluster, job.flavor))
            nodes: list[int] = []
            end = max(self.now, job.expected_end)
            if pool is not None:
                for name in job.placement:
                    i = pool.pos.get(name)
                    if i is None:
                        continue
                    pool.free[i] -= job.gpus_per_pod
                    pool.events.append((end, i, job.gpus_per_pod))
                    if not pool.taints[i]:
                        nodes.append(i)
            if job.tier != "realtime" and job.preemptible and pool is not None:
                key = (
                    0 if job.borrowed else 1,
                    -tier_rank(job.tier),
                    job.gpus * at_risk_s(job, self.now),
                    self.scorer.running_score(job),
                    job.id,
                )
                self.cands[(job.cluster, job.flavor)].append(Candidate(job, nodes, key))
        # Running jobs a realtime arrival could preempt within half its start target (realtime headroom).
        soon = self.now + self.policy.realtime_start_target_s / 2 - self.policy.min_runtime_s
        self.evictable_soon: dict[tuple[str, str], int] = {
            key: sum(1 for c in cands if c.job.started_at <= soon) for key, cands in self.cands.items()
        }
        self.headroom_held: set[int] = set()
        for pool in self.pools.values():
            pool.build()
        for cands in self.cands.values():
            cands.sort(key=lambda c: c.key)

        self.quota = QuotaBook(snapshot.quotas, self.running)
        self.credits = None if snapshot.credits is None else dict(snapshot.credits)
        self.budget_left = {
            b.name: b.disruptions_allowed for b in sorted(snapshot.disruption_budgets, key=lambda b: b.name)
        }
        self.rate_left = self.policy.preemption_rate_limit - snapshot.recent_preemptions
        self.taken: set[int] = set()  # victim ids
        self.admissions: dict[int, Admission] = {}
        self.preemptions: list[Preemption] = []
        self.reasons: dict[int, PendingReason] = {}
        self.admitted_end: list[tuple[float, str, str, int, str]] = []  # for estimates: (end, dept, flavor, gpus, cluster)
        self.fail_cache: dict[tuple, tuple[str, dict]] = {}
        self.pool_cache: dict[tuple, tuple[list[Pool], dict[str, str]]] = {}
        self.heads: dict[int, float] = {}  # reserved heads -> reserved start
        self.late_realtime = 0  # pending realtime jobs already past their start target

    # ------------------------------------------------------------ the cycle

    def run(self) -> CycleResult:
        order = sorted(self.snap.pending, key=self.scorer.order_key)
        for job in order:
            self.consider(job)

        clearing = self.clearing_prices()
        admissions = []
        for job in order:
            adm = self.admissions.get(job.id)
            if adm is not None:
                if adm.borrowed:
                    price = clearing.get(job.flavor)
                    adm = Admission(
                        adm.job_id, adm.placement, adm.cluster, True, None if price is None else min(price, job.bid)
                    )
                admissions.append(adm)
        still = [job for job in order if job.id in self.reasons]
        if self.snap.estimates:
            view = EstimateView(
                now=self.now,
                codes={job_id: r[0] for job_id, r in self.reasons.items()},
                pools_by_flavor=self.pools_by_flavor,
                quota=self.quota,
                running=self.running,
                admitted_end=self.admitted_end,
                heads=self.heads,
                allowed=self.open_to,
                rank=self.cluster_rank,
            )
            estimates = estimate_pending(view, still)
        else:
            estimates = dict(self.heads)
        pending_out = []
        for job in still:
            code, message, detail = self.reasons[job.id]
            est = None if code in NO_ESTIMATE else estimates.get(job.id)
            if tier_rank(job.tier) == REALTIME:
                target = job.submitted_at + self.policy.realtime_start_target_s
                detail["start_target"] = target
                self.late_realtime += self.now > target
            pending_out.append(PendingReason(job.id, code, message, MappingProxyType(detail), est))
        return CycleResult(
            admissions=tuple(admissions),
            preemptions=tuple(self.preemptions),
            pending=tuple(pending_out),
            clearing_prices=MappingProxyType(clearing),
            figures=MappingProxyType(self.figures(admissions, pending_out)),
        )

    def starving(self, job: PendingJob) -> bool:
        return self.scorer.starving_since(job) is not None

    def clearing_prices(self) -> dict[str, int]:
        """A uniform price for borrowed capacity, per flavor: the highest bid that lost, i.e. of a job left
        pending that would have had to borrow, could have borrowed (its department's borrowing limit and the
        credits it had at the start of the cycle allow it) and asked for a flavor that exists. Losers are
        judged on the cycle's final quota use, so for a given set of winners the price does not depend on the
        order in which the jobs were considered: a winner that bid at least the price pays the same whatever
        it bid. A winner never pays more than its own bid (the cap is applied per admission); with no loser
        the borrowing is uncontested (no price: the adapter charges the base price)."""
        start_credits = self.snap.credits
        out: dict[str, int] = {}
        for job in self.snap.pending:
            if job.id in self.admissions or job.bid <= out.get(job.flavor, 0):
                continue
            if job.pods < 1 or job.gpus_per_pod < 1 or job.flavor not in self.known_flavors:
                continue
            if start_credits is not None and job.hold > start_credits.get(job.department, 0):
                continue
            dept, flavor, k = job.department, job.flavor, job.gpus
            # (per-cluster quotas: it could have borrowed on one of the clusters open to it)
            scoped = (dept, flavor) in self.quota.scoped
            if not any(
                self.quota.borrows(dept, flavor, k, c)
                and self.quota.never(dept, flavor, k, c) is None
                and self.quota.limit_code(dept, flavor, k, c) is None
                for c in ([p.cluster for p in self.job_pools(job)[0]] if scoped else [None])
            ):
                continue
            out[flavor] = job.bid
        return dict(sorted(out.items()))

    def matches(self, job: PendingJob, cluster: str) -> bool:
        """Whether ``job`` may run on ``cluster`` at all: its pin and every label of its selector."""
        if job.cluster not in (None, cluster):
            return False
        return not job.cluster_selector or self.cluster_labels[cluster].issuperset(job.cluster_selector)

    def open_to(self, job: PendingJob, cluster: str) -> bool:
        return self.matches(job, cluster) and self.clusters[cluster].state == "active"

    def job_pools(self, job: PendingJob) -> tuple[list[Pool], dict[str, str]]:
        """The pools of the job's flavor it may be admitted to (a matching cluster that is active), and the
        matching clusters with such a pool that are closed to admissions, with their state."""
        key = (job.flavor, job.cluster, job.cluster_selector)
        hit = self.pool_cache.get(key)
        if hit is None:
            pools: list[Pool] = []
            closed: dict[str, str] = {}
            for pool in self.pools_by_flavor.get(job.flavor, ()):
                if not self.matches(job, pool.cluster):
                    continue
                state = self.clusters[pool.cluster].state
                if state == "active":
                    pools.append(pool)
                else:  # cordoned or draining: its running work stays, nothing new starts there
                    closed[pool.cluster] = state
            hit = self.pool_cache[key] = (pools, closed)
        return hit

    def cluster_rank(self, job: PendingJob, cluster: str) -> tuple[int, int]:
        """How a cluster ranks for a job before fit: more of its preferred labels first, then the cheaper."""
        pref = 0
        if job.cluster_preference:
            labels = self.cluster_labels[cluster]
            pref = sum(1 for pair in job.cluster_preference if pair in labels)
        return (-pref, self.clusters[cluster].cost_rank)

    def scoped_quota(self, job: PendingJob, pools: list[Pool]) -> tuple[str | None, list[Pool]] | None:
        """For a department with per-cluster quotas of the job's flavor, whose pools differ in the quota
        scopes they count in: admit the job on the best pool whose scopes have room (None), else choose the
        pools to explain (and preempt or reserve in) by (how far the quota is from allowing it, cluster rank,
        name), and a cluster of them that selects their scopes."""
        dept, flavor, k = job.department, job.flavor, job.gpus
        groups: dict[tuple[str, ...], list[Pool]] = {}
        for pool in pools:
            groups.setdefault(self.quota.keys(dept, flavor, pool.cluster), []).append(pool)
        if len(groups) == 1:
            return pools[0].cluster, pools
        room: list[Pool] = []
        status = []
        for group in groups.values():
            c = group[0].cluster
            if self.quota.never(dept, flavor, k, c) is not None:
                far = 3
            elif self.quota.limit_code(dept, flavor, k, c) is not None:
                far = 2
            elif self.quota.check(dept, flavor, k, cluster=c)[0] is not None:
                far = 1
            else:
                far = 0
                room += group
            status.append((far, min(self.cluster_rank(job, p.cluster) + (p.cluster,) for p in group), group))
        if room and self.admit(job, sorted(room, key=lambda p: p.cluster)):
            return None
        _, _, group = min(status, key=lambda st: (st[0], st[1]))
        return group[0].cluster, group

    def consider(self, job: PendingJob) -> None:
        """Admit, preempt for, or explain ``job``."""
        flavor = job.flavor
        k = job.gpus
        if job.pods < 1 or job.gpus_per_pod < 1:
            return self.pend(
                job, reasons.INVALID_REQUEST, {"pods": job.pods, "gpus_per_pod": job.gpus_per_pod}
            )
        if job.cluster_selector and not any(self.matches(job, c) for c in self.clusters):
            return self.pend(
                job,
                reasons.NO_MATCHING_CLUSTER,
                {reasons.DETAIL_SELECTOR: dict(job.cluster_selector), reasons.DETAIL_CLUSTER: job.cluster,
                 "clusters": sorted(self.clusters)},  # fmt: skip
            )
        pools, closed = self.job_pools(job)
        if closed:
            self.closed_for[job.id] = closed
        if not pools:
            if closed:
                return self.pend(
                    job,
                    reasons.CLUSTERS_UNAVAILABLE,
                    {reasons.DETAIL_UNAVAILABLE: dict(closed), reasons.DETAIL_SELECTOR: dict(job.cluster_selector)},
                    "closed to admissions: " + ", ".join(f"{c} ({s})" for c, s in sorted(closed.items())),
                )
            if (
                flavor in self.known_flavors
                and job.cluster is None
                and (not job.cluster_selector or any(self.matches(job, c) for c in self.flavor_clusters[flavor]))
            ):
                return self.pend(
                    job, reasons.NO_CAPACITY, {"free": 0, "requested": k, "schedulable_nodes": 0}
                )
            return self.pend(job, reasons.UNKNOWN_FLAVOR, {"flavor": flavor, "cluster": job.cluster})
        if self.credits is not None and job.hold > 0:
            available = self.credits.get(job.department, 0)
            if job.hold > available:
                missing = job.hold - available
                return self.pend(
                    job,
                    reasons.BUDGET_INSUFFICIENT,
                    {"hold": job.hold, "available": available, "missing": missing},
                    f"needs {job.hold}, has {available}, missing {missing} milli-credits",
                )
        qc = None  # a cluster of the pools whose quota scopes apply (None: the global scope only)
        if (job.department, flavor) in self.quota.scoped:
            chosen = self.scoped_quota(job, pools)
            if chosen is None:
                return None  # admitted on a cluster whose per-cluster quota has room
            qc, pools = chosen
        never = self.quota.never(job.department, flavor, k, qc)
        if never is not None:
            detail = self.quota.detail(job.department, flavor, k, cluster=qc)
            detail["never"] = True
            return self.pend(
                job, never, detail, "the request exceeds the quota the department could ever use"
            )
        realtime = tier_rank(job.tier) == REALTIME
        limit = self.quota.limit_code(job.department, flavor, k, qc)
        if limit is not None:
            # The department itself holds all it may: only its own jobs ending let this one in, or, for
            # realtime work, the eviction of the department's own lower tiers.
            if realtime and job.id not in self.inflight:
                outcome = self.preempt(job, pools, self.quota.borrows(job.department, flavor, k, qc))
                if outcome is None:
                    return None
            detail = self.quota.detail(job.department, flavor, k, cluster=qc)
            return self.pend(job, limit, detail, quota_note(detail))
        code, detail = self.quota.check(job.department, flavor, k, cluster=qc)
        if code is None and self.admit(job, pools):
            return None
        if code is None and job.id in self.headroom_held:
            return self.pend(
                job,
                reasons.REALTIME_HEADROOM,
                {"headroom_gpus": self.policy.realtime_headroom_gpus, "requested": k},
            )
        inflight = self.inflight.get(job.id)
        if inflight:
            return self.pend(
                job, reasons.PREEMPTION_IN_PROGRESS, {"victims": sorted(inflight), "reason": "in_flight"}
            )
        # Blocked by the cohort's quota (others use the GPUs it could have) or by capacity: preempt when the
        # rules allow it, else wait, as the pool's reserved head when it is the first to wait.
        if realtime:
            outcome = self.preempt(job, pools, self.quota.borrows(job.department, flavor, k, qc))
            if outcome is None:
                return None  # preemption under way
            if outcome[0] is not None:
                return self.pend(job, outcome[0], outcome[1])
        return self.blocked(job, pools, code, detail)

    def admit(self, job: PendingJob, pools: list[Pool]) -> bool:
        """Place ``job`` in the best of ``pools`` that fits; whether it borrows is judged on the chosen pool's
        cluster (asked only of the jobs that start: most jobs of a busy cycle wait)."""
        g, n = job.gpus_per_pod, job.pods
        end = self.now + job.max_runtime_s
        options = []
        for pool in pools:
            index = pool.index_for(end)
            if index.capacity(g) >= n:
                if not self.leaves_headroom(job, pool):
                    self.headroom_held.add(job.id)
                    continue
                total = index.free_total() if len(pools) > 1 else 0
                options.append((self.cluster_rank(job, pool.cluster), total, pool.cluster, pool))
        if not options:
            return False
        # preferred labels, then the cheaper cluster, then best fit (the fullest pool), then the name
        _, _, _, pool = min(options, key=lambda o: (o[0], o[1], o[2]))
        borrows = self.quota.borrows(job.department, job.flavor, job.gpus, pool.cluster)
        placed = pool.place(g, n, end)
        for i in placed:
            pool.events.append((end, i, g))
        self.quota.add(job.department, job.flavor, job.gpus, pool.cluster)
        if self.credits is not None and job.hold > 0:
            self.credits[job.department] = self.credits.get(job.department, 0) - job.hold
        self.admitted_end.append((end, job.department, job.flavor, job.gpus, pool.cluster))
        self.admissions[job.id] = Admission(
            job_id=job.id,
            placement=tuple(pool.names[i] for i in placed),
            cluster=pool.cluster,
            borrowed=borrows,
        )
        return True

    def leaves_headroom(self, job: PendingJob, pool: Pool) -> bool:
        """Whether a realtime job arriving after this admission could still start in time: some GPUs stay
        free, or a running job of the pool can be preempted within half the realtime start target. Without
        it, a pool filled with freshly started jobs (all inside their cooldown) makes realtime work late."""
        headroom = self.policy.realtime_headroom_gpus
        if headroom <= 0 or tier_rank(job.tier) == REALTIME:
            return True
        key = (pool.cluster, pool.flavor)
        if self.evictable_soon.get(key, 0) > 0 or not self.cands.get(key):
            # (with no preemptible job running at all, nothing would ever become evictable: the wait would be
            # unbounded, so the job starts)
            return True
        return pool.now.free_total() - job.gpus >= headroom

    def preempt(self, job: PendingJob, pools: list[Pool], borrows: bool):
        """None when victims were chosen (the job waits for them); else (reason code or None, detail)."""
        realtime = tier_rank(job.tier) == REALTIME
        rank = tier_rank(job.tier)
        flavor, dept, k = job.flavor, job.department, job.gpus
        quota = self.quota
        # A reclaim that frees much more than the job needs wastes the victims' work and leaves GPUs idle:
        # it waits until the job has waited reclaim_delay_s (the borrower may end meanwhile).
        waited = self.now - job.submitted_at
        patient = realtime or waited >= self.policy.reclaim_delay_s
        clusters = tuple(p.cluster for p in pools)
        cache_key = (flavor, clusters, dept, realtime, borrows, job.gpus_per_pod, job.pods, patient)
        if cache_key in self.fail_cache:
            return self.fail_cache[cache_key]

        if self.rate_left <= 0:
            # The window's preemptions are used up: do not search (a cycle may see thousands of blocked jobs).
            return (reasons.PREEMPTION_RATE_LIMIT, self.rate_detail(0))

        # (the pools share their quota scopes: the consider step chose them so)
        preemptor = Preemptor(dept, flavor, k, rank, borrows, cluster=clusters[0] if clusters else None)
        min_run, starve_policy = self.policy.min_runtime_s, self.policy

        def eligible_for(relax_cooldown: bool):
            now = self.now

            def eligible(v: RunningJob, removed) -> bool:
                if v.id in self.taken or (not relax_cooldown and now - v.started_at < min_run):
                    return False
                if realtime:
                    return priority_victim(v, preemptor, quota, removed)
                return reclaim_victim(
                    v, preemptor, quota, removed, started_starved=started_starved(starve_policy, v)
                )

            return eligible

        def attempt(relax_cooldown: bool, budgets):
            best = None
            for pool in pools:
                cands = self.cands.get((pool.cluster, flavor))
                if not cands:
                    continue
                found = search(
                    cands,
                    pool=pool,
                    g=job.gpus_per_pod,
                    pods=job.pods,
                    quota=quota,
                    dept=dept,
                    flavor=flavor,
                    k=k,
                    eligible=eligible_for(relax_cooldown),
                    budget_left=budgets,
                )
                if found is not None and (best is None or len(found) < len(best[1])):
                    best = (pool, found)
            return best

        best = attempt(False, self.budget_left)
        if best is not None and not realtime and (not patient or sum(c.job.gpus for c in best[1]) > 2 * k):
            best = None  # too wasteful for now: wait (reserved) and retry once patient
            wasteful = True
        else:
            wasteful = False
        if best is not None:
            pool, victims = best
            # Reclaims may use only half of the window's preemptions: realtime work keeps the rest.
            allowed = self.rate_left if realtime else self.rate_left - (self.policy.preemption_rate_limit + 1) // 2
            if len(victims) <= allowed:
                self.commit_preemption(job, pool, victims, "priority" if realtime else "reclaim")
                return None
            result = (reasons.PREEMPTION_RATE_LIMIT, self.rate_detail(len(victims)))
            return result  # not cached: the rate budget is what blocks
        relaxed = None if wasteful else attempt(True, self.budget_left)
        if wasteful:
            result = (None, {})
        elif relaxed is not None:
            min_run = self.policy.min_runtime_s
            at = max(c.job.started_at + min_run for c in relaxed[1])
            result = (
                reasons.PREEMPTION_COOLDOWN,
                {
                    "victims_needed": len(relaxed[1]),
                    "min_runtime_s": min_run,
                    "preemptible_at": at,
                },
            )
        elif attempt(True, None) is not None:
            # Name the candidates' budgets that are short (else all of the candidates' budgets: together they
            # are), not every budget of the snapshot: with the cluster's own PDBs read, that may be every PDB of
            # every job namespace.
            covering = {
                (b, self.budget_left[b] < c.job.pods)
                for pool in pools
                for c in self.cands.get((pool.cluster, flavor), ())
                for b in c.job.disruption_budgets
                if b in self.budget_left
            }
            short = sorted({b for b, is_short in covering if is_short}) or sorted({b for b, _ in covering})
            result = (reasons.DISRUPTION_BUDGET, {"budgets": short})
        else:
            result = (None, {})
        self.fail_cache[cache_key] = result
        return result

    def drain(self, job: PendingJob, pool: Pool, when: float) -> bool:
        """Instead of reserving GPUs that would idle until ``when``, evict cheap work now: the head of the queue
        preempts running jobs when the work they lose since their last checkpoint is less than
        ``drain_ratio`` times the GPU-time the drain would leave idle. Who may be a victim is
        ``preemption.drain_victim``; on top of it, never within the cooldown and never a job with more than
        ``drain_max_loss_s`` at risk (it waits for the victim's next checkpoint). Drains, like reclaims, use
        at most half of the window's preemption budget."""
        ratio = self.policy.drain_ratio
        if ratio <= 0 or self.rate_left - (self.policy.preemption_rate_limit + 1) // 2 <= 0:
            return False
        cands = self.cands.get((pool.cluster, pool.flavor))
        if not cands:
            return False
        idle = min(pool.now.free_total(), job.gpus) * (when - self.now)
        if idle <= 0:
            return False
        quota, now, policy = self.quota, self.now, self.policy
        preemptor = Preemptor(
            job.department,
            job.flavor,
            job.gpus,
            tier_rank(job.tier),
            quota.borrows(job.department, job.flavor, job.gpus, pool.cluster),
            starving=self.starving(job),
            cluster=pool.cluster,
        )

        def eligible(v: RunningJob, removed) -> bool:
            if v.id in self.taken or now - v.started_at < policy.min_runtime_s:
                return False
            if at_risk_s(v, now) > policy.drain_max_loss_s:
                return False  # wait for its next checkpoint
            return drain_victim(v, preemptor, quota, removed, started_starved=started_starved(policy, v))

        victims = search(
            cands,
            pool=pool,
            g=job.gpus_per_pod,
            pods=job.pods,
            quota=quota,
            dept=job.department,
            flavor=job.flavor,
            k=job.gpus,
            eligible=eligible,
            budget_left=self.budget_left,
        )
        if not victims:
            return False
        lost = sum(c.job.gpus * at_risk_s(c.job, now) for c in victims)
        allowed = self.rate_left - (self.policy.preemption_rate_limit + 1) // 2
        if lost > ratio * idle or len(victims) > allowed:
            return False
        self.commit_preemption(job, pool, victims, "drain")
        return True

    def commit_preemption(self, job: PendingJob, pool: Pool, victims: list[Candidate], why: str) -> None:
        ids = tuple(sorted(c.job.id for c in victims))
        for c in victims:
            self.taken.add(c.job.id)
            for b in c.job.disruption_budgets:
                if b in self.budget_left:
                    self.budget_left[b] -= c.job.pods
        self.rate_left -= len(victims)
        if self.credits is not None and job.hold > 0:
            self.credits[job.department] = self.credits.get(job.department, 0) - job.hold
        purpose = {
            "priority": "start within its target",
            "reclaim": "reclaim its nominal quota",
            "drain": "start now instead of idling the GPUs its reservation drains",
        }[why]
        message = (
            f"Job {job.id} ({job.tier}) preempts {len(victims)} job(s) on {pool.cluster}/{job.flavor} to {purpose}."
        )
        self.preemptions.append(Preemption(job.id, ids, why, message))
        self.pend(
            job, reasons.PREEMPTION_IN_PROGRESS, {"victims": list(ids), "reason": why, "cluster": pool.cluster}
        )

    def rate_detail(self, needed: int) -> dict[str, object]:
        detail: dict[str, object] = {
            "allowed_now": max(0, self.rate_left),
            "limit": self.policy.preemption_rate_limit,
            "window_s": self.policy.preemption_window_s,
        }
        if needed:
            detail["victims_needed"] = needed
        return detail

    def blocked(
        self, job: PendingJob, pools: list[Pool], quota_code: str | None, quota_detail: dict
    ) -> bool:
        """Explain a job that cannot start now, and make it a reserved head of the pool when it is among the
        first to wait there (``reservation_depth``, ``MAX_RESERVED_SHARE``). A job held by the cohort's quota
        reserves too when the GPUs it needs are physically in use (lent-out capacity is capacity); one that
        would fit physically now waits on quota alone. ``detail["head"]`` names the head with the earliest
        reserved start."""
        g, n, k = job.gpus_per_pod, job.pods, job.gpus
        if quota_code is not None and any(p.now.capacity(g) >= n and p.reservation is None for p in pools):
            return self.pend(job, quota_code, quota_detail, quota_note(quota_detail))
        # (nor does it reserve behind another head: the GPUs are there, its quota is what it waits for)
        quota_only = quota_code is not None and any(p.now.capacity(g) >= n for p in pools)
        end = self.now + job.max_runtime_s
        best: tuple[int, str, str, dict] | None = None  # (capacity rank, cluster, code, detail)
        free_total = 0
        for pool in pools:
            code, free = capacity_code(pool, g, n, pool.crossed(end) > 0)
            free_total += free
            detail: dict[str, object] = {"free": free, "requested": k, "pods": n, "cluster": pool.cluster}
            if pool.reservation is not None and code in (
                reasons.RESERVED_FOR_HEAD,
                reasons.WAITING_FOR_HIGHER_PRIORITY,
            ):
                detail["head"] = pool.reservation.job_id
                detail["reserved_until"] = pool.reservation.until
            cand = (CAPACITY_RANK[code], pool.cluster, code, detail)
            if best is None or cand[:2] < best[:2]:
                best = cand
        _, _, code, detail = best
        detail["free"] = free_total if len(pools) > 1 else detail["free"]
        note = None
        # EASY, deepened: the first jobs blocked by capacity in a pool become its reserved heads, up to
        # reservation_depth of them while their GPUs are less than MAX_RESERVED_SHARE of the pool's; only the
        # first may reclaim or drain for its start.
        depth = self.policy.reservation_depth
        if (
            code != reasons.EXCEEDS_CAPACITY
            and depth > 0
            and not quota_only
            and all(
                p.reservation is None
                or (len(p.reservations) < depth and p.reserved_gpus < MAX_RESERVED_SHARE * p.gpus_total)
                for p in pools
            )
        ):
            first = all(p.reservation is None for p in pools)
            fits = []
            for pool in pools:
                found = pool.earliest_fit(g, n, self.now)
                if found is not None:
                    fits.append((found[0], self.cluster_rank(job, pool.cluster), pool.cluster, pool, found[1]))
            if fits:
                when, _, _, pool, spare = min(fits, key=lambda f: (f[0], f[1], f[2]))
                if when > self.now and first:
                    # A head within its nominal quota that would wait long reclaims its lent GPUs (the
                    # guarantee); any head evicts cheap work rather than idle GPUs while they drain.
                    borrows = self.quota.borrows(job.department, job.flavor, k, pool.cluster)
                    if not borrows and when - self.now > self.policy.reclaim_delay_s:
                        outcome = self.preempt(job, [pool], borrows)
                        if outcome is None:
                            return None
                    if self.drain(job, pool, when):
                        return None
                pool.reserve(job.id, when, spare, k)
                detail["reserved_from"] = when
                detail["cluster"] = pool.cluster
                self.heads[job.id] = when
                note = f"GPUs are reserved for it in {_duration(when - self.now)}"
        if quota_code is not None:
            kept = ("reserved_from", "head", "reserved_until", "cluster")
            quota_detail.update({key: detail[key] for key in kept if key in detail})
            return self.pend(job, quota_code, quota_detail, note or quota_note(quota_detail))
        return self.pend(job, code, detail, note)

    def pend(self, job: PendingJob, code: str, detail: dict, note: str | None = None) -> bool:
        closed = self.closed_for.get(job.id)
        if closed and reasons.DETAIL_UNAVAILABLE not in detail:
            detail[reasons.DETAIL_UNAVAILABLE] = dict(closed)  # matching clusters it may not start on now
        message = reasons.CODES[code]
        if note:
            message = f"{message[:-1]}: {note}."
        self.reasons[job.id] = (code, message, detail)
        return False

    def figures(self, admissions: list[Admission], pending: list[PendingReason]) -> dict[str, float]:
        capacity = sum(sum(p.size[i] for i in p.indexed) for p in self.pools.values())
        free = sum(p.now.free_total() for p in self.pools.values())
        by_code: dict[str, int] = defaultdict(int)
        for r in pending:
            by_code[r.code] += 1
        out: dict[str, float] = {
            "pending": len(self.snap.pending),
            "running": len(self.snap.running),
            "admitted": len(admissions),
            "admitted_gpus": sum(gpus for _, _, _, gpus, _ in self.admitted_end),
            "borrowed": sum(1 for a in admissions if a.borrowed),
            "preemptions": len(self.preemptions),
            "victims": len(self.taken),
            "still_pending": len(pending),
            "reservations": sum(len(p.reservations) for p in self.pools.values()),
            "capacity_gpus": capacity,
            "free_gpus_after": free,
            "utilisation_after": (capacity - free) / capacity if capacity else 0.0,
            "estimates_known": sum(1 for r in pending if r.estimated_start is not None),
            "realtime_past_target": self.late_realtime,
        }
        for code in sorted(by_code):
            out[f"reason.{code}"] = by_code[code]
        return out


def engine_schedule(snapshot: Snapshot) -> CycleResult:
    return Cycle(snapshot).run()
