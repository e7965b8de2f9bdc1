"""The admission cycle: ``engine_schedule(snapshot) -> CycleResult`` (exported as ``engine.schedule``).

One pure pass over a frozen snapshot; see docs/scheduling.md for the rules. In short:

1. Index nodes per (cluster, flavor) (``topology``, ``placement.Pool``), subtract running pods, build the quota
   book (``quota``) and the victim candidates (``eviction``).
2. One pass in the pending order (``ordering``: tier, the priority band if set, starving first, then score):
   each job is placed by best fit (gang all-or-nothing) when the cohort's quota and the capacity allow it,
   respecting the EASY reservations of the pool's heads. Otherwise a realtime job preempts (priority); the
   first job to wait in a pool becomes its head and reserves, reclaims lent GPUs (bounded) or drains cheap
   work instead of idling GPUs (``eviction`` plans these, on ``preemption``'s victim rules); the next ones to
   wait reserve too (``reservation_depth``, while their GPUs are under half the pool's).
3. Every job still pending gets a reason code, a one-line message, a detail (``explain``) and an honest
   estimated start (``estimate``). Each winner pays its critical bid (inside its quota as on borrowed
   capacity: a bid orders a department's own jobs too): the lowest bid at which it would still have been admitted (``pricing``, a replay of the cycle up to the job); 0 when it
   would have won without bidding, and the adapter then charges the base (reserve) price.

The input is never mutated and every iteration runs over inputs sorted by a total order ending in an id or
name, so the decision is the same for any order of the snapshot's tuples.
"""

from __future__ import annotations

import gc
from dataclasses import replace
from operator import attrgetter
from types import MappingProxyType

from . import domains as topo_domains
from . import fractions, reasons, tiers
from .bookings import Calendar, adjust
from .eviction import Chosen, Evictions
from .explain import CAPACITY_RANK, capacity_code, cycle_figures, duration_text, quota_note, reserved_note
from .fractions import MILLI, gpus_of, milli_of
from .ordering import REALTIME, Scorer, tier_rank
from .outcomes import ADMITTED, Evicting, Outcome, Waiting
from .placement import Pool
from .pricing import critical_bid, fork, price_from, wins_bidding_nothing, wins_in_full
from .quota import QuotaBook
from .resize import Resizer
from .results import pending_reasons, priced_admissions
from .shapes import CPU, MEMORY, demand, place_roles, resource_key, role_text, roles_fit
from .sweeps import Gates
from .teams import SEPARATOR, TeamBook, account
from .teams import limit_note as team_limit_note
from .topology import Topology
from .types import (
    Admission,
    CycleResult,
    PendingJob,
    PendingReason,
    Preemption,
    Role,
    Snapshot,
)
from .user_limits import UserBook, limit_note
from .verdicts import Verdicts

# Heads after the first reserve only while the reserved GPUs are under this share of their pool: on a small pool
# a second reservation would close the last GPUs that small jobs backfill into, while on a large one several
# reservations keep the large jobs behind the head from being overtaken by every small job that fits a hole.
MAX_RESERVED_SHARE = 0.5
# A department's quota waits that its teams' idle guarantees may be the cause of (``Cycle.team_code``).
TEAM_CODES = frozenset({reasons.QUOTA_EXHAUSTED, reasons.QUOTA_LENT_OUT, reasons.BORROW_LIMIT})
_WAITING = {code: Waiting(code) for code in reasons.CODES}  # outcomes are immutable: one per code will do


class Cycle:
    """Mutable working state of one cycle (never the snapshot itself). It owns admission: the order, the
    quota and capacity checks, placement, reservations and each pending job's reason; evictions, prices,
    estimates and figures are delegated to their modules."""

    def __init__(self, snapshot: Snapshot, *, memo: bool = True, fork_prices: bool = True):
        self.snap = snapshot = adjust(snapshot)  # nodes in maintenance now are out of the pools
        self.now = snapshot.now
        self.policy = snapshot.policy
        self.topology = topo = Topology(snapshot)
        self.pools = topo.pools
        self.pools_by_flavor = topo.pools_by_flavor
        self.closed_for: dict[int, dict[str, str]] = {}  # job -> matching clusters closed to admissions

        # The running jobs' pods hold their GPUs until their declared end. The start estimates read the same
        # events at each job's likely end instead (its predicted run time; ``likely_events``).
        # Resizable jobs are held at their minimum size: their other pods' GPUs are open to every job (``resize``).
        self.resizer = Resizer(self)
        self.running = self.resizer.held(sorted(snapshot.running, key=attrgetter("id")))
        self.likely_events: dict[tuple[str, str], list[tuple[float, int, int]]] = {}
        self.running_end: dict[int, float] = {}  # running job -> its likely end (``hold_running``)
        nodes_of = self.hold_running()
        for pool in self.pools.values():
            pool.build()
        # Bookings and maintenance windows hold their GPUs as the pools' first reservations (``bookings``).
        self.calendar = Calendar(snapshot, self.pools, self.running)
        self.cpu_pools = topo.cpu_pools  # the CPU pools (``shapes``), by (cluster, flavor)
        for job in self.running:
            for flavor, node, cpu, mem in job.cpu_pods:
                cpu_pool = self.cpu_pools.get((job.cluster, flavor))
                if cpu_pool is not None:
                    cpu_pool.hold(node, cpu, mem)
        # Jobs whose GPU gang had room but a CPU role of theirs did not: the role and why (``blocked`` says so).
        self.cpu_short: dict[int, tuple[Role, dict]] = {}
        self.cpu_only_admitted = 0  # CPU-only admissions: they change no GPU pool (``Verdicts``)
        # Per job: its CPU roles and what they ask per CPU flavor, with their quota keys (``cpu_needs``).
        self.needs: dict[int, tuple] = {}
        self.cpu_admitted = 0  # admissions that took CPU pods or CPU quota: all a CPU-only job's verdict reads

        self.scorer = Scorer(snapshot)
        inside = self.calendar.inside  # an owner's job running inside its booking counts against the booking
        self.quota = QuotaBook(snapshot.quotas, [j for j in self.running if j.id not in inside] if inside else self.running)
        self.users = UserBook(snapshot.user_limits, self.running)
        self.user_limits = self.users.active  # (fixed for the snapshot: asked by every job judged)
        # (and against its booking, not its team's share either)
        self.teams = TeamBook(snapshot.team_quotas, [j for j in self.running if j.id not in inside] if inside
                              else self.running)
        self.team_quotas = self.teams.active  # (fixed for the snapshot: asked by every job judged)
        if self.team_quotas:
            self.teams.hold_in(self.quota)  # the teams' idle guaranteed GPUs are lent to nobody
        self.evictions = Evictions(snapshot, self.running, self.pools, self.scorer, self.quota, nodes_of)
        self.headroom_held: set[int] = set()
        self.credits = None if snapshot.credits is None else dict(snapshot.credits)
        # (asked of every job with a team: most snapshots have no team with a share of the budget)
        self.team_shares = self.credits is not None and any(SEPARATOR in key for key in self.credits)
        self.admissions: dict[int, Admission] = {}
        self.reasons: dict[int, tuple[str, str, dict]] = {}  # pending job -> (code, message, detail)
        self.gates = Gates(snapshot)  # held, dependencies, array throttles
        # for estimates: (likely end, dept, flavor, gpus, cluster, user, array id or None) of this cycle's admissions
        self.admitted_end: list[tuple[float, str, str, int, str, str, int | None]] = []
        self.heads: dict[int, float] = {}  # reserved heads -> reserved start
        # Pools that take no more reserved heads (reservation_depth reached, or MAX_RESERVED_SHARE of their
        # GPUs reserved): asked of every job that waits, so kept as a set rather than recomputed.
        self.heads_full: set[Pool] = set()
        self.late_realtime = 0  # pending realtime jobs already past their start target
        # Verdicts of waiting jobs, reused by the next job of the same shape while nothing changed (``Verdicts``).
        self.verdicts = Verdicts() if memo else None
        # Prices: a fork of the cycle taken just before a priced winner is admitted (``pricing.price_from``);
        # without ``fork_prices`` each price is found by full replays instead (the reference the tests compare).
        self.fork_prices = fork_prices
        self.before: Cycle | None = None
        self.place = 0  # the place in the order of the job being judged
        self.prices: dict[int, int] = {}  # priced winners' critical bids, as found
        self.order: list[PendingJob] = []
        self.keys: list[tuple] = []  # the order's keys (the prices' replays find a job's new place by them)
        # Shapes of jobs that can neither start nor reserve any more in this cycle (``pricing.surely_wins``).
        self.spent_shapes: set[tuple] = set()
        # Running sums over the order that those bounds read, made on their first use (``pricing.OrderSums``).
        self.order_sums = None

    def hold_running(self) -> dict[int, list[int]]:
        """Subtract the running jobs' pods from the pools, each with its end (``Pool.events``, at the declared
        end; ``likely_events``, at its likely end); returns each running job's node indices in its pool."""
        now, pools, likely_events = self.now, self.pools, self.likely_events
        nodes_of: dict[int, list[int]] = {}
        ends = self.running_end
        shared: dict[tuple[str, str], list] = {}  # fractional jobs per pool: their GPUs are booked per device
        for job in self.running:
            # Its likely end (``RunningJob.likely_end``), or its max runtime once it has run past its prediction
            # (it is still running: the prediction was short), never before now; inline: every job passes here.
            started, max_s, predicted = job.started_at, job.max_runtime_s, job.predicted_runtime_s
            end = started + max_s
            likely = end if predicted is None or predicted >= max_s else started + predicted
            if likely < now:
                likely = end if end > now else now
            ends[job.id] = likely
            key = (job.cluster, job.flavor)
            pool = pools.get(key)
            if pool is None:
                continue
            end = end if end > now else now
            g = job.gpus_per_pod
            pos, free, events = pool.pos, pool.free, pool.events
            nodes = nodes_of[job.id] = [i for i in map(pos.get, job.placement) if i is not None]
            if job.share is not None:
                shared.setdefault(key, []).append(job)
                continue
            if nodes:
                own = likely_events.setdefault(key, [])
                for i in nodes:
                    free[i] -= g
                    events.append((end, i, g))
                    own.append((likely, i, g))
        for key, jobs in shared.items():
            fractions.hold_running(pools[key], jobs, lambda j: max(now, j.started_at + j.max_runtime_s),
                                   lambda j: ends[j.id], likely_events.setdefault(key, []))
        return nodes_of

    # ------------------------------------------------------------ the cycle

    def run(self) -> CycleResult:
        # Each key is computed once: the sort and the prices' replays read the same list.
        pending = self.snap.pending
        keys = self.scorer.cycle_keys(pending)
        ranked = sorted(range(len(keys)), key=keys.__getitem__)
        self.order = order = [pending[i] for i in ranked]
        self.keys = [keys[i] for i in ranked]
        self.outcomes: dict[int, Outcome] = {}
        prices = self.prices
        for place, job in enumerate(order):
            self.place = place
            self.outcomes[job.id] = self.consider(job)
            if self.before is not None:  # a priced winner was admitted: its price, from the state before it
                prices[job.id] = price_from(self, self.before, job, place)
                self.before = None

        resizes = self.resizer.settle()
        admissions, clearing = priced_admissions(self)
        pending_out = pending_reasons(self, [job for job in order if job.id in self.reasons])
        return CycleResult(
            admissions=tuple(admissions),
            preemptions=tuple(self.evictions.preemptions),
            pending=tuple(pending_out),
            clearing_prices=MappingProxyType(clearing),
            figures=MappingProxyType(self.figures(admissions, pending_out)),
            resizes=tuple(resizes),
        )

    def priced(self, job: PendingJob) -> bool:
        """Whether a winner's price is at stake (inside its quota or on borrowed capacity): its critical bid
        (``pricing``). A starving job's place
        in the order does not depend on its bid, so it would have won at any bid and pays no more than the base
        price; neither does a job that bid nothing. Nor a CPU-only job: a price is per GPU-hour and it has
        none, so no price of it is ever charged, and finding one cost a replay of the queue per winner."""
        return job.bid > 0 and job.pods > 0 and not self.starving(job)

    def price_of(self, job: PendingJob) -> int:
        """A winner's price found by full replays (``pricing.wins_in_full``), where no fork was taken."""
        if not self.priced(job):
            return 0
        return critical_bid(job.bid, lambda bid: wins_in_full(self, job, bid))

    def starving(self, job: PendingJob) -> bool:
        return self.scorer.starving_since(job) is not None

    def scoped_quota(self, job: PendingJob, pools: list[Pool]) -> tuple[str | None, list[Pool]] | None:
        """For a department with per-cluster quotas of the job's flavor, whose pools differ in the quota
        scopes they count in: admit the job on the best pool whose scopes have room (None), else choose the
        pools to explain (and preempt or reserve in) by (how far the quota is from allowing it, cluster rank,
        name), and a cluster of them that selects their scopes."""
        dept, flavor, k = job.department, job.flavor, job.gpu_milli
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
            status.append((far, min(self.topology.cluster_rank(job, p.cluster) + (p.cluster,) for p in group), group))
        if room and self.admit(job, sorted(room, key=lambda p: p.cluster)):
            return None
        _, _, group = min(status, key=lambda st: (st[0], st[1]))
        return group[0].cluster, group

    def consider(self, job: PendingJob) -> Outcome:
        """Admit, preempt for, or explain ``job``: first the sweeps' gates (held, dependencies, its array's
        throttle), then, for a job that would wait for the same reason as the last job of its shape with nothing
        changed since, that verdict (``Verdicts``); else it is judged in full."""
        if job.held or job.after or job.array_id is not None:  # (the gates of a plain job are open)
            gate = self.gates.check(job)
            if gate is not None:
                code, detail, note = gate
                return self.pend(job, code, detail, note or None)
        if job.not_before is not None and self.now < job.not_before:
            detail = {"not_before": job.not_before, "attempt": job.attempt}
            if job.expedited_since is not None:
                self.hold_through_backoff(job, detail)
            return self.pend(job, reasons.RETRY_BACKOFF, detail,
                             f"attempt {job.attempt} may start in {duration_text(job.not_before - self.now)}")
        if job.min_pods is not None:
            job = Resizer.sized(self, job)
        memo = self.verdicts
        if memo is None or (self.calendar.active and self.calendar.owned(job)):  # (an owner's path is its own)
            return self.judge(job)
        return memo.judge(self, job)

    def hold_through_backoff(self, job: PendingJob, detail: dict) -> None:
        """An expedited job in its back-off reserves the GPUs it will start on (an EASY reservation from the end
        of its back-off, or later when they are busy until then), as a blocked head does: without it the GPUs
        its lost attempt left would go to the queue behind it during the back-off, for as long as those jobs
        run, and its place at the front would be worth nothing. It neither preempts nor drains for them."""
        depth = self.policy.reservation_depth
        if depth <= 0:
            return
        pools, _ = self.topology.job_pools(job)
        if job.topology_required:
            pools = [p for p in pools if topo_domains.required_level(p, job) is not None]
        fits = []
        for pool in pools:
            if pool in self.heads_full:
                continue
            found = self.earliest_fit(job, pool)
            if found is not None:
                fits.append((max(found[0], job.not_before), self.topology.cluster_rank(job, pool.cluster),
                             pool.cluster, pool, found[1]))
        if not fits:
            return
        when, _, _, pool, spare = min(fits, key=lambda f: (f[0], f[1], f[2]))
        pool.reserve(job.id, when, spare, job.total_gpus, when + job.max_runtime_s)
        if self.calendar.heads(pool) >= depth or pool.reserved_gpus >= MAX_RESERVED_SHARE * pool.gpus_total:
            self.heads_full.add(pool)
        self.heads[job.id] = when
        detail["reserved_from"] = when
        detail["cluster"] = pool.cluster

    def judge(self, job: PendingJob) -> Outcome:
        """Admit, preempt for, or explain ``job``: first where it could run at all, then its credits, then its
        quota and the capacity."""
        if job.roles and job.pods == 0:
            return self.judge_cpu_only(job)
        found = self.job_pools(job)
        if isinstance(found, Waiting):
            return found
        pools = self.outside_refused_namespaces(job, found)
        if isinstance(pools, Waiting):
            return pools
        if job.topology_required:
            pools = self.with_level(job, pools)
            if isinstance(pools, Waiting):
                return pools
        over = self.users.blocked(job) if self.user_limits else None
        if over is not None:
            return self.pend(job, reasons.USER_GPU_LIMIT, over, limit_note(over))
        short = self.short_of_credits(job)
        if short is not None:
            return short
        if job.roles:
            waits = self.cpu_quota(job)
            if waits is not None:
                return waits
        if self.calendar.active and not job.roles and self.calendar.owned(job):
            booked = self.calendar.place_owner(job, pools)  # its booking's GPUs first, outside its quota
            if booked is not None:
                pool, placed, end = booked
                self.prices[job.id] = 0  # its booking's GPUs are its own at any bid: the base price
                self.record(job, pool, placed, end, borrows=False, shaped=False, quota=False)
                return ADMITTED
        if self.team_quotas and self.teams.applies(job):
            waits = self.team_quota(job)
            if waits is not None:
                return waits
        qc = None  # a cluster of the pools whose quota scopes apply (None: the global scope only)
        if (job.department, job.flavor) in self.quota.scoped:
            chosen = self.scoped_quota(job, pools)
            if chosen is None:
                return ADMITTED  # on a cluster whose per-cluster quota has room
            qc, pools = chosen
        return self.consider_quota(job, pools, qc)

    def short_of_credits(self, job: PendingJob) -> Waiting | None:
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
            # A team with a share of the budget has its own entry (by account): what its share leaves.
            share = self.credits.get(account(job.department, job.team)) if job.team and self.team_shares else None
            if share is not None and job.hold > share:
                missing = job.hold - share
                return self.pend(
                    job,
                    reasons.BUDGET_INSUFFICIENT,
                    {"hold": job.hold, "available": share, "missing": missing, "team": job.team},
                    f"team {job.team}'s share of the budget: needs {job.hold}, has {share}, missing {missing} "
                    "milli-credits",
                )
        return None

    def spend_credits(self, job: PendingJob) -> None:
        """Set the job's hold aside from its department's credits (and its team's share, when it has one)."""
        if self.credits is not None and job.hold > 0:
            self.credits[job.department] = self.credits.get(job.department, 0) - job.hold
            if job.team and self.team_shares:
                team = account(job.department, job.team)
                if team in self.credits:
                    self.credits[team] -= job.hold

    # ------------------------------------------------------------ roles on CPU pools (``shapes``)

    def cpu_needs(self, job: PendingJob) -> tuple[tuple[Role, ...], tuple[tuple[str, int, int, str, str | None], ...]]:
        """The job's CPU roles, and per CPU flavor of them (sorted) the millicores and MiB they ask for in all,
        with the quota book's keys of the two (the memory key None where the department has no memory row: its
        memory is not limited there). The quota check, the fit and the admission of a job all read them, so
        they are worked out once per job, kept by its roles' identity (hashing roles by value, as a cache by
        value must, cost more than the work)."""
        found = self.needs.get(job.id)
        if found is not None and found[0] is job.roles:
            return found[1], found[2]
        roles = tuple([r for r in job.roles if r.gpus_per_pod == 0])
        if len(roles) == 1:  # (most jobs: one CPU role, nothing to add up)
            r = roles[0]
            asked = ((r.flavor, r.pods * r.cpu_m, r.pods * r.memory_mib),)
        else:
            asked = demand(roles)
        dept, has = job.department, self.quota.has
        rows = tuple([(flavor, cores, mib, resource_key(flavor, CPU),
                       mem if has(dept, mem := resource_key(flavor, MEMORY)) else None)
                      for flavor, cores, mib in asked])
        self.needs[job.id] = (job.roles, roles, rows)
        return roles, rows

    def cpu_quota(self, job: PendingJob) -> Waiting | None:
        """Why the cores or memory of the job's CPU roles (added up per pool) exceed its department's quota, or
        None. A pool's cores need a quota row, as GPUs do; its memory is limited only where a row says so."""
        dept, check = job.department, self.quota.check
        for flavor, cores, mib, cpu_key, mem_key in self.cpu_needs(job)[1]:
            # (both checks at once where both pass, as most jobs' do; else the cause, in order, below)
            if check(dept, cpu_key, cores)[0] is None and (mem_key is None or check(dept, mem_key, mib)[0] is None):
                continue
            for resource, k, key in ((CPU, cores, cpu_key), (MEMORY, mib, mem_key)):
                if key is None:
                    continue
                # (the full check first: it passes only where the two that name a lasting cause would, and most
                # jobs pass)
                code, detail = self.quota.check(dept, key, k)
                if code is None:
                    continue
                lasting = self.quota.never(dept, key, k) or self.quota.limit_code(dept, key, k)
                if lasting is not None:
                    code, detail = lasting, self.quota.detail(dept, key, k)
                detail.update({"resource": resource, "flavor": flavor,
                               "roles": [r.name for r in self.cpu_needs(job)[0] if r.flavor == flavor]})
                unit = "millicores" if resource == CPU else "MiB"
                return self.pend(job, code, detail, f"{flavor} {resource}: {quota_note(detail)} {unit}")
        return None

    def judge_cpu_only(self, job: PendingJob) -> Outcome:
        """A job none of whose roles uses GPUs: on the first cluster (by rank) whose CPU pools take every role
        now, when its credits and its cores and memory quotas allow it; it never reserves nor preempts."""
        roles = job.roles
        if any(r.pods < 1 or r.cpu_m < 0 or r.memory_mib < 0 for r in roles):
            return self.pend(job, reasons.INVALID_REQUEST, {"roles": [r.name for r in roles]})
        clusters = self.topology.cpu_clusters(job)
        if not clusters:
            if job.flavor not in self.topology.cpu_flavors:
                return self.pend(job, reasons.UNKNOWN_FLAVOR, {"flavor": job.flavor, "cluster": job.cluster})
            closed = {c: self.topology.clusters[c].state for c, fl in self.cpu_pools
                      if fl == job.flavor and self.topology.matches(job, c)
                      and self.topology.clusters[c].state != "active"}
            if closed:
                return self.pend(job, reasons.CLUSTERS_UNAVAILABLE, {reasons.DETAIL_UNAVAILABLE: closed},
                                 "closed to admissions: " + ", ".join(f"{c} ({s})" for c, s in sorted(closed.items())))
            return self.pend(job, reasons.NO_MATCHING_CLUSTER,
                             {reasons.DETAIL_SELECTOR: dict(job.cluster_selector), reasons.DETAIL_CLUSTER: job.cluster,
                              "flavor": job.flavor})  # fmt: skip
        short = self.short_of_credits(job)
        if short is not None:
            return short
        waits = self.cpu_quota(job)
        if waits is not None:
            return waits
        first: tuple[Role, dict] | None = None
        for cluster in clusters:
            placed, missing = place_roles(self.cpu_pools, cluster, roles)
            if placed is not None:
                self.admit_roles(job, cluster, [], placed, end=self.now + job.max_runtime_s, borrows=False)
                return ADMITTED
            if first is None or (first[1].get("never") and not missing[1].get("never")):
                first = missing
        return self.role_short(job, first)

    def role_short(self, job: PendingJob, missing: tuple[Role, dict]) -> Waiting:
        role, detail = missing
        code = reasons.EXCEEDS_CAPACITY if detail.get("never") else reasons.NO_CAPACITY
        return self.pend(job, code, dict(detail), f"{role_text(role)} does not fit on {role.flavor}")

    def admit_roles(self, job: PendingJob, cluster: str, gpu_nodes: list[str], cpu_placed: list[list[int]],
                    *, end: float, borrows: bool, price: int | None = None) -> None:
        """Record the admission of a job of roles: its pods' nodes role by role (the GPU gang's from
        ``gpu_nodes`` in order, each CPU role's from ``cpu_placed``), its cores and memory on the quota book,
        and for a CPU-only job what every admission records (credits, its array's throttle)."""
        placement: list[str] = []
        gpu_at = 0
        cpu = iter(cpu_placed)
        dept = job.department
        for role in job.roles:
            if role.gpus_per_pod > 0:
                placement += gpu_nodes[gpu_at:gpu_at + role.pods]
                gpu_at += role.pods
            else:
                names = self.cpu_pools[(cluster, role.flavor)].names
                placement += [names[i] for i in next(cpu)]
        for _, cores, mib, cpu_key, mem_key in self.cpu_needs(job)[1]:
            self.quota.add(dept, cpu_key, cores, cluster)
            if mem_key is not None:
                self.quota.add(dept, mem_key, mib, cluster)
        if cpu_placed:
            self.cpu_admitted += 1
        if job.pods == 0:  # (a job with GPUs has done this in ``admit``)
            self.cpu_only_admitted += 1
            self.spend_credits(job)
            self.admitted_end.append((self.now + job.likely_runtime_s, dept, job.flavor, 0, cluster, job.user,
                                      job.array_id))
            if job.array_id is not None:
                self.gates.admitted(job)
        self.admissions[job.id] = Admission(job.id, tuple(placement), cluster, borrows, price)

    def cpu_fits(self, job: PendingJob, cluster: str) -> bool:
        """Whether the job's CPU roles fit on ``cluster`` now (nothing is taken; the first role that does not
        is remembered for ``blocked``)."""
        roles = self.cpu_needs(job)[0]
        if roles_fit(self.cpu_pools, cluster, roles):
            return True
        placed, missing = place_roles(self.cpu_pools, cluster, roles)  # (it fails too: for what to say)
        self.cpu_short.setdefault(job.id, missing)
        return False

    def with_level(self, job: PendingJob, pools: list[Pool]) -> list[Pool] | Waiting:
        """``pools`` whose cluster declares the topology level ``job`` requires, or why none is left."""
        kept = [p for p in pools if topo_domains.required_level(p, job) is not None]
        if kept:
            return kept
        name = topo_domains.level_name(job.topology_level)
        return self.pend(
            job, reasons.NO_MATCHING_CLUSTER,
            {"topology_level": job.topology_level, "clusters": sorted({p.cluster for p in pools})},
            f"no cluster it may run on declares the {name} level it requires",
        )

    def outside_refused_namespaces(self, job: PendingJob, pools: list[Pool]) -> list[Pool] | Waiting:
        """``pools`` without the clusters whose namespace quota refused a request this large for the job's
        department and flavor (no admission there until that quota changes), or why none is left."""
        if not self.snap.namespace_quotas:
            return pools
        k = job.total_gpus
        refused = {q.cluster for q in self.snap.namespace_quotas
                   if q.department == job.department and q.flavor == job.flavor and k >= q.total_gpus and self.now < q.until}
        if not refused:
            return pools
        pools = [p for p in pools if p.cluster not in refused]
        if pools:
            return pools
        return self.pend(
            job, reasons.NAMESPACE_QUOTA, {"clusters": sorted(refused), "requested": k},
            "refused by the namespace quota on " + ", ".join(sorted(refused)),
        )

    def job_pools(self, job: PendingJob) -> list[Pool] | Waiting:
        """The pools ``job`` may start in, or why there are none (an invalid request, no cluster it selects,
        every matching cluster closed, no schedulable node, an unknown flavor)."""
        flavor = job.flavor
        if job.pods < 1 or job.gpus_per_pod < 1:
            return self.pend(
                job, reasons.INVALID_REQUEST, {"pods": job.pods, "gpus_per_pod": job.gpus_per_pod}
            )
        if job.cluster_selector and not any(self.topology.selects(job, c) for c in self.topology.clusters):
            return self.pend(
                job,
                reasons.NO_MATCHING_CLUSTER,
                {reasons.DETAIL_SELECTOR: dict(job.cluster_selector), reasons.DETAIL_CLUSTER: job.cluster,
                 "clusters": sorted(self.topology.clusters)},  # fmt: skip
            )
        if job.data_sources and not any(self.topology.matches(job, c) for c in self.topology.clusters):
            missing = self.topology.missing_sources(job)
            return self.pend(
                job,
                reasons.DATA_SOURCE_UNAVAILABLE,
                {"sources": {name: list(where) for name, where in job.data_sources}, "missing": missing},
                "; ".join(f"{c} lacks {', '.join(names)}" for c, names in missing.items()) or "no cluster",
            )
        pools, closed = self.topology.job_pools(job)
        if closed:
            self.closed_for[job.id] = closed
        if pools:
            return pools
        if closed:
            return self.pend(
                job,
                reasons.CLUSTERS_UNAVAILABLE,
                {reasons.DETAIL_UNAVAILABLE: dict(closed), reasons.DETAIL_SELECTOR: dict(job.cluster_selector)},
                "closed to admissions: " + ", ".join(f"{c} ({s})" for c, s in sorted(closed.items())),
            )
        if flavor in self.topology.known_flavors and job.cluster is None:
            offering = self.topology.flavor_clusters[flavor]
            if not job.cluster_selector or any(self.topology.matches(job, c) for c in offering):
                return self.pend(
                    job, reasons.NO_CAPACITY, {"free": 0, "requested": job.total_gpus, "schedulable_nodes": 0}
                )
            # The flavor exists, only not on a cluster the job's selector allows: that is what to change.
            return self.pend(
                job,
                reasons.NO_MATCHING_CLUSTER,
                {reasons.DETAIL_SELECTOR: dict(job.cluster_selector), reasons.DETAIL_CLUSTER: job.cluster,
                 "clusters": sorted(offering), "flavor": flavor},  # fmt: skip
                f"none that offers {flavor} (on {', '.join(sorted(offering))})",
            )
        return self.pend(job, reasons.UNKNOWN_FLAVOR, {"flavor": flavor, "cluster": job.cluster})

    def consider_quota(self, job: PendingJob, pools: list[Pool], qc: str | None) -> Outcome:
        """Admit ``job`` when its quota (scope ``qc``) and ``pools`` allow it; else preempt for it or explain."""
        dept, flavor, k = job.department, job.flavor, job.gpu_milli  # (milli-GPUs: the quota book's unit)
        if self.team_quotas and self.teams.applies(job):
            k = milli_of(self.teams.need(job))  # (its team's idle guaranteed GPUs are counted in use already)
        never = self.quota.never(dept, flavor, k, qc)
        if never is not None:
            detail = self.quota.detail(dept, flavor, k, cluster=qc)
            detail["never"] = True
            return self.pend(
                job, never, detail, "the request exceeds the quota the department could ever use"
            )
        if job.own_preemptible is False and tiers.preemptible(job.tier) and self.quota.borrows(dept, flavor, k, qc):
            # Borrowed GPUs are lent on the promise that they come back: a job that may not be evicted starts
            # only within its department's nominal quota.
            return self.pend(job, reasons.NON_PREEMPTIBLE_NOMINAL, self.quota.detail(dept, flavor, k, cluster=qc))
        limit = self.quota.limit_code(dept, flavor, k, qc)
        if limit is not None:
            # The department itself holds all it may: only its own jobs ending let this one in, or, for
            # realtime work, the eviction of the department's own lower tiers. When those exist but may not be
            # evicted yet (cooldown, disruption budget, rate), that is what the job waits for, and says; so
            # does a job whose victims are already leaving.
            outcome = self.victims_for(job, pools, qc)
            if outcome is not None:
                return outcome
            detail = self.quota.detail(dept, flavor, k, cluster=qc)
            limit, detail = self.team_code(job, limit, detail)
            if self.across_quota(job):
                # Larger than its quota and waited long enough: it reserves even so, or the department's own
                # stream of small jobs would keep it from ever holding GPUs for itself.
                return self.blocked(job, pools, limit, detail)
            return self.pend(job, limit, detail, quota_note(detail))
        code, detail = self.quota.check(dept, flavor, k, cluster=qc)
        if code is not None and self.team_quotas:
            code, detail = self.team_code(job, code, detail)
        if code is None and self.admit(job, pools):
            return ADMITTED
        if code is None and job.id in self.headroom_held:
            return self.pend(
                job,
                reasons.REALTIME_HEADROOM,
                {"headroom_gpus": self.policy.realtime_headroom_gpus, "requested": gpus_of(k)},
            )
        # Blocked by the cohort's quota (others use the GPUs it could have) or by capacity: preempt when the
        # rules allow it, else wait, as the pool's reserved head when it is the first to wait. (A job whose GPUs
        # had room but a CPU role not: no GPU victim would help it.)
        outcome = None if job.id in self.cpu_short else self.victims_for(job, pools, qc)
        if outcome is not None:
            return outcome
        return self.blocked(job, pools, code, detail)

    def team_quota(self, job: PendingJob) -> Outcome | None:
        """Why a job of a department with teams waits at its team's borrowing limit (``teams``), else None."""
        over = self.teams.over_limit(job)
        if over is None:
            return None
        return self.pend(job, reasons.TEAM_BORROW_LIMIT, over, team_limit_note(over))

    def team_code(self, job: PendingJob, code: str, detail: dict) -> tuple[str, dict]:
        """A department's quota wait said at the team's level when GPUs of the department are idle but
        guaranteed to its other teams (``team_quota``), else as it was."""
        if not (self.team_quotas and self.teams.applies(job)):
            return code, detail
        idle = self.teams.held(job.department, job.team, job.flavor)
        if idle <= 0 or code not in TEAM_CODES:
            return code, detail
        detail.update(self.teams.detail(job.department, job.team, job.flavor, job.total_gpus))
        detail["department_idle"] = idle
        detail["guaranteed_to"] = self.teams.holders(job.department, job.team, job.flavor)
        detail["department_code"] = code
        return reasons.TEAM_QUOTA, detail

    def across_quota(self, job: PendingJob) -> bool:
        """Whether ``job`` reserves across its quota: it is larger than its department's nominal quota and has
        waited ``quota_reservation_age_s`` (``Scorer.quota_since``)."""
        return self.scorer.quota_since(job) is not None

    def victims_for(self, job: PendingJob, pools: list[Pool], qc: str | None) -> Outcome | None:
        """A blocked job's victims: the ones already leaving for it, or, for realtime work, new ones by priority
        (or what keeps them from being chosen: cooldown, disruption budget, rate). None when it has none and
        nothing but the blockage itself to say."""
        inflight = self.evictions.inflight.get(job.id)
        if inflight:
            self.pend(job, reasons.PREEMPTION_IN_PROGRESS, {"victims": sorted(inflight), "reason": "in_flight"})
            return Evicting(tuple(sorted(inflight)), "in_flight")
        if tier_rank(job.tier) != REALTIME:  # (a job bound to a domain looks for its victims in one of them)
            return None
        outcome = self.preempt(job, pools, self.quota.borrows(job.department, job.flavor, job.gpu_milli, qc))
        if isinstance(outcome, Evicting):
            return outcome
        code, detail = outcome
        return None if code is None else self.pend(job, code, detail)

    def admit(self, job: PendingJob, pools: list[Pool]) -> bool:
        """Place ``job`` in the best of ``pools`` that fits; whether it borrows is judged on the chosen pool's
        cluster (asked only of the jobs that start: most jobs of a busy cycle wait)."""
        g, n = job.gpus_per_pod, job.pods
        end = self.now + job.max_runtime_s
        share = job.share  # a fraction per pod: on shared GPUs first (``fractions``)
        shaped = bool(job.roles) and bool(self.cpu_needs(job)[0])
        if shaped:  # only the clusters whose CPU pools take the job's CPU roles now
            pools = [p for p in pools if self.cpu_fits(job, p.cluster)]
            if not pools:
                return False
            self.cpu_short.pop(job.id, None)
        if len(pools) == 1:  # (the common case: nothing to rank)
            pool = pools[0]
            index = pool.index_for(end)
            if ((index.capacity(g) if share is None else fractions.capacity(pool, share, end, n)) < n
                    or (job.topology_required and not self.domain_fits(job, pool, index))):
                return False
            if not self.leaves_headroom(job, pool):
                self.headroom_held.add(job.id)
                return False
        else:
            options = []
            held = other = False
            for pool in pools:
                index = pool.index_for(end)
                if ((index.capacity(g) if share is None else fractions.capacity(pool, share, end, n)) >= n
                        and (not job.topology_required or self.domain_fits(job, pool, index))):
                    if not self.leaves_headroom(job, pool):
                        held = True
                        continue
                    options.append((self.topology.cluster_rank(job, pool.cluster), index.free_total(), pool.cluster, pool))
                else:
                    other = True
            if not options:
                # The headroom is its reason only when it alone kept the job out: a cluster whose free GPUs
                # are reserved for a head (or too few) has its own reason, and saying "headroom" there named
                # the wrong cluster's wait beside GPUs free on this one.
                if held and not other:
                    self.headroom_held.add(job.id)
                return False
            # preferred labels, then the cheaper cluster, then best fit (the fullest pool), then the name
            _, _, _, pool = min(options, key=lambda o: (o[0], o[1], o[2]))
        dept = job.department
        # (in milli-GPUs, the quota book's unit)
        need = job.gpu_milli if not (self.team_quotas and self.teams.applies(job)) else milli_of(self.teams.need(job))
        # (a team's job within its team's held guarantee borrows nothing, however much its department does)
        borrows = need > 0 and self.quota.borrows(dept, job.flavor, need, pool.cluster)
        if self.fork_prices and self.priced(job):
            if wins_bidding_nothing(self, job, self.place):
                self.prices[job.id] = 0  # (its critical bid, with no replay)
            else:
                self.before = fork(self, job.id)
        devices: list[int] = []
        if share is None:
            placed = opened = pool.place(g, n, end, n > 1, topo_domains.required_level(pool, job))
        else:
            placed, devices, opened = fractions.place(pool, job, end)
        self.record(job, pool, placed, end, borrows=borrows, shaped=shaped, need=need, opened=opened,
                    devices=devices)
        return True

    def record(self, job: PendingJob, pool: Pool, placed: list[int], end: float, *, borrows: bool,
               shaped: bool, quota: bool = True, need: int | None = None, opened: list[int] | None = None,
               devices: list[int] | tuple[int, ...] = ()) -> None:
        """Record the admission of ``job`` placed on ``pool``'s nodes ``placed`` (ending at ``end``): its pods'
        events, its quota (``need`` milli-GPUs of it: a team's job within its team's guarantee may need less than
        its GPUs),
        its owner's GPUs, its credit hold, its array's count and the admission itself. ``opened``: the nodes whose
        GPUs it takes from the pool (a fraction on a GPU already shared takes none); ``devices``: a fractional
        job's shared GPU per pod."""
        g, dept = job.gpus_per_pod, job.department
        milli = job.gpu_milli  # (what the quota book, the estimates and the figures add up: exact ints)
        if opened is None:
            opened = placed
        likely = self.now + job.likely_runtime_s
        events = pool.events if job.share is None else pool.shared_ends  # (a GPU it opens: ``shared_ends``)
        likely_events = self.likely_events.setdefault((pool.cluster, pool.flavor), [])
        for i in opened:  # (a fraction on a GPU already shared takes no more of the pool)
            events.append((end, i, g))
            likely_events.append((likely, i, g))
        if quota:  # (not on its booking's GPUs: the booking is its quota)
            self.quota.add(dept, job.flavor, milli if need is None else need, pool.cluster)
        if self.user_limits:
            self.users.add(dept, job.user, job.total_gpus)
        if self.team_quotas:
            self.teams.add(dept, job.team, job.flavor, job.total_gpus, likely)
        self.spend_credits(job)
        self.admitted_end.append((likely, dept, job.flavor, milli, pool.cluster, job.user, job.array_id))
        if job.array_id is not None:
            self.gates.admitted(job)
        names = pool.names
        if job.roles:
            cpu_placed, _ = place_roles(self.cpu_pools, pool.cluster, self.cpu_needs(job)[0]) if shaped else ([], None)
            self.admit_roles(job, pool.cluster, [names[i] for i in placed], cpu_placed or [], end=end, borrows=borrows)
            if devices:  # (one per GPU pod, in the order of the gang)
                self.admissions[job.id] = replace(self.admissions[job.id], devices=tuple(devices))
            return
        spread = topo_domains.spread_over(pool, placed) if pool.domains is not None else ""
        self.admissions[job.id] = Admission(job.id, tuple([names[i] for i in placed]), pool.cluster, borrows,
                                            devices=tuple(devices), spread=spread)

    def domain_fits(self, job: PendingJob, pool: Pool, index) -> bool:
        """Whether the gang of a job that requires a level fits in one domain of it in ``index``."""
        li = topo_domains.required_level(pool, job)
        return li is not None and pool.domains.fits(index, job.gpus_per_pod, job.pods, li)

    def earliest_fit(self, job: PendingJob, pool: Pool):
        """When and where the job first fits in ``pool`` (``Pool.earliest_fit``), within one domain of the level
        it requires if it does."""
        li = topo_domains.required_level(pool, job)
        if li is None:
            return pool.earliest_fit(job.gpus_per_pod, job.pods, self.now)
        return pool.domains.earliest_fit(pool, job.gpus_per_pod, job.pods, self.now, li)

    def leaves_headroom(self, job: PendingJob, pool: Pool) -> bool:
        """Whether a realtime job arriving after this admission could still start in time: some GPUs stay
        free, or a running job of the pool can be preempted within half the realtime start target. Without
        it, a pool filled with freshly started jobs (all inside their cooldown) makes realtime work late."""
        headroom = self.policy.realtime_headroom_gpus
        if headroom <= 0 or tier_rank(job.tier) == REALTIME:
            return True
        key = (pool.cluster, pool.flavor)
        if self.evictions.may_evict_soon(key):
            return True
        return (pool.now.free_total() - headroom) * MILLI >= job.gpu_milli

    def preempt(self, job: PendingJob, pools: list[Pool], borrows: bool) -> Evicting | tuple[str | None, dict]:
        """``Evicting`` when victims were chosen (the job waits for them); else (reason code or None, detail)."""
        outcome = self.evictions.preempt(job, pools, borrows)
        if isinstance(outcome, Chosen):
            return self.evicting(job, outcome.preemption, outcome.cluster)
        return outcome

    def evicting(self, job: PendingJob, preemption: Preemption, cluster: str) -> Evicting:
        """The job waits for the victims it chose; its credit hold (and its owner's GPUs, against their limit)
        is set aside now, as on admission, so no later job of the cycle spends the same credits or GPUs."""
        self.spend_credits(job)
        self.users.add(job.department, job.user, job.total_gpus)
        self.pend(
            job,
            reasons.PREEMPTION_IN_PROGRESS,
            {"victims": list(preemption.victim_ids), "reason": preemption.reason, "cluster": cluster},
        )
        return Evicting(preemption.victim_ids, preemption.reason)

    def blocked(
        self, job: PendingJob, pools: list[Pool], quota_code: str | None, quota_detail: dict
    ) -> Outcome:
        """Explain a job that cannot start now, and make it a reserved head of the pool when it is among the
        first to wait there (``reservation_depth``, ``MAX_RESERVED_SHARE``). A job held by the cohort's quota
        reserves too when the GPUs it needs are physically in use (lent-out capacity is capacity); one that
        would fit physically now waits on quota alone. ``detail["head"]`` names the head with the earliest
        reserved start."""
        # (its GPUs as people read them: an exact fraction of a fractional job, added up by no one, is not made)
        g, n, k = job.gpus_per_pod, job.pods, gpus_of(job.gpu_milli)
        missing = self.cpu_short.pop(job.id, None)
        if missing is not None and quota_code is None:  # its GPUs had room, a CPU role did not: CPU never reserves
            return self.role_short(job, missing)
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
            if pool.reservation is not None and pool.reservation.job_id >= 0 and code in (
                reasons.RESERVED_FOR_HEAD,
                reasons.WAITING_FOR_HIGHER_PRIORITY,
            ):
                detail["head"] = pool.reservation.job_id
                detail["reserved_until"] = pool.reservation.until
            if job.topology_required and code != reasons.EXCEEDS_CAPACITY:
                code = self.domain_code(job, pool, code, end, detail)
            cand = (CAPACITY_RANK[code], pool.cluster, code, detail)
            if best is None or cand[:2] < best[:2]:
                best = cand
        _, _, code, detail = best
        detail["free"] = free_total if len(pools) > 1 else detail["free"]
        note = detail.pop("topology_note", None)
        # EASY, deepened: the first jobs blocked by capacity in a pool become its reserved heads, up to
        # reservation_depth of them while their GPUs are less than MAX_RESERVED_SHARE of the pool's; only the
        # first may reclaim or drain for its start. A job reserving across its quota is past the share: on a
        # small pool one head of half the pool would otherwise close reservations to the gang for good.
        depth = self.policy.reservation_depth
        open_pools = pools
        if not self.heads_full.isdisjoint(pools):
            open_pools = [p for p in pools if self.calendar.heads(p) < depth] if self.across_quota(job) else []
        if code != reasons.EXCEEDS_CAPACITY and depth > 0 and not quota_only and open_pools:
            first = all(self.calendar.heads(p) == 0 for p in pools)
            fits = []
            for pool in open_pools:
                found = self.earliest_fit(job, pool)
                if found is not None:
                    fits.append((found[0], self.topology.cluster_rank(job, pool.cluster), pool.cluster, pool, found[1]))
            if not fits and first is False and self.across_quota(job):
                # No room on what the earlier heads leave (they hold it for ever in that plan): it reserves
                # for when they have run too, so that the work that would run past that keeps off its GPUs.
                for pool in open_pools:
                    li = topo_domains.required_level(pool, job)
                    found = (pool.fit_after_heads(g, n, self.now) if li is None
                             else pool.domains.fit_after_heads(pool, g, n, self.now, li))
                    if found is not None:
                        fits.append((found[0], self.topology.cluster_rank(job, pool.cluster), pool.cluster, pool, found[1]))
            if fits:
                when, _, _, pool, spare = min(fits, key=lambda f: (f[0], f[1], f[2]))
                if when > self.now and first:
                    # A head within its nominal quota that would wait long reclaims its lent GPUs (the
                    # guarantee; within one domain for a job bound to one); any head evicts cheap work rather
                    # than idle GPUs while they drain (not one bound to a domain: a drain frees the pool's).
                    borrows = self.quota.borrows(job.department, job.flavor, job.gpu_milli, pool.cluster)
                    if not borrows and when - self.now > self.policy.reclaim_delay_s:
                        outcome = self.preempt(job, [pool], borrows)
                        if isinstance(outcome, Evicting):
                            return outcome
                if when > self.now and first and not job.topology_required:
                    # Only the starvation limit widens the drain to any work of the head's tier: a gang past
                    # the quota age gets the order and the reservation, not the licence to evict others' work
                    # (with it lab1node lost 2.03% of its GPU-hours to preemption, without it 1.8-1.9%).
                    drained = self.evictions.drain(job, pool, when, self.scorer.limit_since(job) is not None)
                    if drained is not None:
                        return self.evicting(job, drained, pool.cluster)
                pool.reserve(job.id, when, spare, job.total_gpus, when + job.max_runtime_s)
                if self.calendar.heads(pool) >= depth or pool.reserved_gpus >= MAX_RESERVED_SHARE * pool.gpus_total:
                    self.heads_full.add(pool)
                detail["reserved_from"] = when
                detail["cluster"] = pool.cluster
                self.heads[job.id] = when
                note = reserved_note(when - self.now) if note is None else f"{note}; {reserved_note(when - self.now)}"
        if self.calendar.holds and quota_code is None:  # a booking or a maintenance window keeps it out
            held = self.calendar.blocking(pools, g, n, end)
            if held is not None:
                kept = {key: detail[key] for key in ("reserved_from", "cluster") if key in detail}
                code, detail = held[0], {**held[1], "requested": k, "pods": n, **kept}
                note = held[2] if note is None else f"{held[2]}; {note[0].lower()}{note[1:]}"
        if quota_code is not None:
            kept = ("reserved_from", "head", "reserved_until", "cluster")
            quota_detail.update({key: detail[key] for key in kept if key in detail})
            return self.pend(job, quota_code, quota_detail, note or quota_note(quota_detail))
        return self.pend(job, code, detail, note)

    def domain_code(self, job: PendingJob, pool: Pool, code: str, end: float, detail: dict) -> str:
        """The capacity reason of a job that requires a level, in ``pool``: too large for any domain of it ever,
        or no domain with room now (whatever the pool has in total), with the note that says how far it is."""
        li = topo_domains.required_level(pool, job)
        g, n = job.gpus_per_pod, job.pods
        if not pool.domains.ever_fits(g, n, li, pool.size):
            largest = pool.domains.largest(pool.size, g, li)
            detail["topology_note"] = (f"no {topo_domains.level_name(job.topology_level)} ever has "
                                       f"{job.total_gpus} GPUs; the largest has {largest}")
            return reasons.EXCEEDS_CAPACITY
        index = pool.index_for(end)
        if pool.domains.fits(index, g, n, li):
            return code  # a domain has room: what keeps it out is what keeps any job out
        note, facts = topo_domains.required_note(pool, job, index)
        detail.update(facts)
        detail["topology_note"] = note
        if code in (reasons.NO_CAPACITY, reasons.NO_FITTING_NODE, reasons.RESERVED_FOR_HEAD) or pool.reservation is None:
            return reasons.NO_FITTING_NODE
        return code

    def pend(self, job: PendingJob, code: str, detail: dict, note: str | None = None) -> Waiting:
        """Record why ``job`` waits: its reason code, a one-line message (with ``note``) and a detail."""
        closed = self.closed_for.get(job.id)
        if closed and reasons.DETAIL_UNAVAILABLE not in detail:
            detail[reasons.DETAIL_UNAVAILABLE] = dict(closed)  # matching clusters it may not start on now
        message = reasons.CODES[code]
        if note:
            message = f"{message[:-1]}: {note}."
        self.reasons[job.id] = (code, message, detail)
        outcome = _WAITING.get(code)
        return Waiting(code) if outcome is None else outcome

    def figures(self, admissions: list[Admission], pending: list[PendingReason]) -> dict[str, float]:
        ev = self.evictions
        return cycle_figures(
            pending_in=len(self.snap.pending),
            running_in=len(self.snap.running),
            admissions=admissions,
            admitted_gpus=gpus_of(sum(row[3] for row in self.admitted_end)),
            pending=pending,
            preemptions=len(ev.preemptions),
            victims=len(ev.taken),
            reservations=sum(len(p.reservations) for p in self.pools.values()),
            capacity_gpus=self.topology.capacity_gpus(),
            free_gpus_after=self.topology.free_gpus(),
            realtime_past_target=self.late_realtime,
        )


def engine_schedule(snapshot: Snapshot) -> CycleResult:
    # A cycle allocates a few objects per pending job, node and running pod and frees almost none of them
    # before it returns, so the cyclic collector would walk them (and the snapshot) again and again meanwhile
    # for nothing: 10-20% of a deep cycle's CPU. It is paused for the cycle and left as it was found; what the
    # cycle drops is freed by reference counting, the rest at the collector's next pass.
    paused = gc.isenabled()
    if paused:
        gc.disable()
    try:
        return Cycle(snapshot).run()
    finally:
        if paused:
            gc.enable()
