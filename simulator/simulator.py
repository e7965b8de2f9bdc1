"""The discrete-event simulator: replays JobSpecs on a cluster under one policy (``Snapshot -> CycleResult``).

Events: submit, finish, eviction complete (end of a preemption's grace period), a node failing and coming back
(``SimOptions.node_failure_every_s``) and a periodic tick while jobs wait. A node failure ends the attempts
running on it as the portal's lost node does: work since the last checkpoint is lost, the attempt is refunded as
the platform's failure, and the job is requeued, expedited (first in its tier after a back-off, ``retries.expedite``)
while the policy's cap allows. All events at the same instant are applied first, then one scheduling cycle runs on a fresh ``Snapshot``
(optionally no more often than ``min_cycle_interval_s``). Preempted jobs are requeued as a new attempt keeping
their original submission time; work since the last checkpoint (and the grace period) is lost. Deterministic:
no clock, no randomness; ties are broken by event sequence numbers and job ids.

Credits (departments with a ``budget``) follow the portal's ledger (quotas/services/), simplified, with the same
arithmetic and refund policy (``billing.money``): the snapshot
carries each metered department's available credits (balance minus open holds) and each pending job's ``hold``
(worst-case rate = max(base price, bid) x GPUs x max runtime, 0 for an unmetered department); an admitted
attempt holds its admission rate (the base price, or the cycle's clearing price when borrowing was contested
and that is higher) x GPUs x max runtime, at most what is available; when the attempt ends it is charged its GPU-seconds (up to the end, or up to
the eviction decision) at that rate, capped at the hold, and the rest is released. A preemption refunds the
charge in full when the attempt ran inside its department's nominal quota and nothing when it borrowed. A
resizable job is settled per lot, as the ledger settles it (``money.resized_lots``, ``lot_usage``,
``lot_settlement``): it holds for the size it was admitted at, each grow adds a lot of borrowed GPUs at the
clearing price of the cycle that decided it (held for the rest of the max runtime), each shrink takes the newest
lots off, and each lot is charged from its own start at its own rate and refunded on its own terms. Budgets
are added again every ``budget_refill`` period counted from the first submission (the portal uses calendar
weeks or months).
"""

from __future__ import annotations

import heapq
import math
import time
from collections import deque
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from billing import money
from engine import ClusterInfo, Dependency, PendingJob, Quota, RunningJob, Snapshot, tiers
from engine.bookings import covers
from engine.domains import HOSTNAME
from engine.policy import decay_usage
from engine.reasons import (
    BUDGET_INSUFFICIENT,
    DEPENDENCY_NEVER_SATISFIED,
    EXCEEDS_CAPACITY,
    NO_CAPACITY,
    NO_FITTING_NODE,
    REALTIME_HEADROOM,
)
from engine.resize import speedup
from engine.retries import expedite
from engine.shapes import CPU_KIND
from engine.sweeps import Gates

from .scenario import REFILL_PERIODS, JobSpec, SimOptions

FINISH, EVICTED, SUBMIT, TICK, NODE_DOWN, NODE_UP, NOTICE_END, RESIZE = 0, 1, 2, 3, 4, 5, 6, 7
COOLDOWN_CODES = frozenset({"preemption_cooldown", "preemption_rate_limit"})


class SimulationError(RuntimeError):
    pass


@dataclass(slots=True)
class JobRecord:
    spec: JobSpec
    attempt: int = 0
    state: str = "future"  # future, pending, running, evicting, done, cancelled (a dependency never met)
    start: float | None = None  # start of the current attempt
    first_start: float | None = None
    finish: float | None = None
    progress_s: float = 0.0  # checkpointed run time carried across attempts
    preemptions: int = 0
    lost_gpu_s: float = 0.0
    attained_gpu_s: float = 0.0  # GPU-seconds executed by finished attempts (incl. lost work)
    queued_s: float = 0.0  # total time spent pending over all attempts
    pending_since: float = 0.0
    borrowed: bool = False
    evict_at: float | None = None  # when the current attempt's eviction was decided
    last_run_s: float = 0.0  # run time of the last attempt that ended (preempted), for Tiresias's guard
    hold: int = 0  # milli-credits held for the current attempt
    rate: int = 0  # milli-credits per GPU-hour the current attempt is charged
    budget_blocked: bool = False  # was ever pending for lack of credits
    runs: list[tuple[float, float]] = field(default_factory=list)  # (start, end) of every attempt that ended
    # (from, to) of the part of each preempted attempt whose work was lost: after its last checkpoint, the
    # grace period included. Useful utilisation leaves it out.
    lost_runs: list[tuple[float, float]] = field(default_factory=list)
    node_failures: int = 0  # attempts ended by a node failure
    failure_lost_gpu_s: float = 0.0  # the part of lost_gpu_s that node failures lost
    expedited: int = 0  # expedited requeues so far
    notices: int = 0  # preemptions announced with notice
    answered: int = 0  # of which the job answered "checkpoint written" before the notice ended
    # when the current attempt wrote the checkpoint its answer announced (None: no answer yet): its eviction
    # loses only the work after it
    checkpoint_at: float | None = None
    # A resizable job (``JobSpec.min_pods``): the pods it computes on now (0: its spec's), the resize waiting for
    # its checkpoint (the new GPU placement) and when it ends, the GPU-seconds of the earlier segments of the
    # attempt (each resize starts a segment at the checkpoint it waited for), when its FINISH is due, and how
    # many resizes it made each way.
    size: int = 0
    resize_to: tuple[str, ...] | None = None
    resize_at: float | None = None
    prior_gpu_s: float = 0.0
    finish_at: float | None = None
    attempt_start: float | None = None
    grows: int = 0
    shrinks: int = 0
    # A metered resizable job's money, as the portal's ledger keeps it: the attempt's sizes as (from when, lots
    # [GPUs, rate, borrowed]), the admission's first, and the clearing price of the grow waiting for its checkpoint.
    sizes: list[tuple[float, list[list[int]]]] = field(default_factory=list)
    resize_price: int | None = None
    # Topology: the run-time factor of the current attempt (above 1 when its gang spans domains of a level the
    # scenario slows down), and of all its gang's starts, those spread over such a level.
    slowdown: float = 1.0
    gang_starts: int = 0
    spread_starts: int = 0


@dataclass
class SimResult:
    policy: str
    jobs: list[JobRecord]
    capacity: int
    window: tuple[float, float]
    busy_gpu_s: float  # allocated GPU-seconds inside the window
    useful_gpu_s: float  # busy minus work lost to preemption (whole run)
    end_time: float
    jain_time_avg: float | None
    dept_share: dict[str, dict[str, float]]  # dept -> {backlogged_s, ratio_avg}
    cycle_times: list[float]
    cycles: int
    invalid: dict[str, int]
    wall_s: float
    preemption_events: int
    realtime_preempted: int
    quotas: dict[str, int] = field(default_factory=dict)  # dept -> nominal GPUs (all flavors)
    # dept -> {budget, refilled, charged, refunded, spent, balance_end} (metered departments only)
    spend: dict[str, dict[str, int]] = field(default_factory=dict)
    node_failures: int = 0  # nodes that failed (SimOptions.node_failure_every_s)


class SimContext:
    """What an oracle/baseline policy may know beyond the snapshot (the engine gets none of it)."""

    def __init__(self, sim: Simulator):
        self._sim = sim

    def attained_gpu_s(self, job_id: int, now: float) -> float:
        rec = self._sim.records[job_id]
        cur = 0.0
        if rec.state in ("running", "evicting") and rec.start is not None:
            cur = (now - rec.start) * self._sim._gpus(rec) + rec.prior_gpu_s
        return rec.attained_gpu_s + cur

    def remaining_s(self, job_id: int, now: float) -> float:
        rec = self._sim.records[job_id]
        left = rec.spec.duration_s - rec.progress_s
        if rec.state in ("running", "evicting") and rec.start is not None:
            left -= now - rec.start
        return max(left, 0.0)

    def duration_s(self, job_id: int) -> float:
        return self._sim.records[job_id].spec.duration_s

    def last_run_s(self, job_id: int) -> float:
        """How long the job's last ended (preempted) attempt ran; 0 before its first preemption."""
        return self._sim.records[job_id].last_run_s

    def pending_since(self, job_id: int) -> float:
        """When the job's current attempt started waiting (its submission, or its last eviction)."""
        return self._sim.records[job_id].pending_since


class Simulator:
    def __init__(self, *, nodes, quotas: tuple[Quota, ...], policy_obj, jobs: list[JobSpec], decide,
                 options: SimOptions | None = None, name: str = "policy", budgets: dict[str, int] | None = None,
                 prices: dict[tuple[str, str], int] | None = None, clusters: tuple[ClusterInfo, ...] = (),
                 topology=None, bookings: tuple = (), maintenance: tuple = ()):
        self.nodes = tuple(nodes)
        self.clusters = tuple(clusters)
        # Topology (``scenario.TopologySpec``): each node's domain per level, for the slowdown of a spread gang;
        # with ``topology_placement: ignore`` the engine is not told the levels (placement as on a flat network).
        self.topology = topology
        self.node_domains = ({n.name: tuple(dict(n.labels).get(k, n.name if k == HOSTNAME else None)
                                            for k in topology.levels) for n in nodes}
                             if topology is not None else {})
        self.engine_clusters = self.clusters
        if topology is not None and (options or SimOptions()).topology_placement == "ignore":
            self.engine_clusters = tuple(replace(c, topology_levels=()) for c in self.clusters)
        # what an admission must respect across clusters (checked like placements): the state, the labels
        self.cluster_open = {c.name: c.state == "active" for c in self.clusters}
        self.cluster_labels = {c.name: frozenset(c.labels) for c in self.clusters}
        self.quotas = tuple(quotas)
        self.policy_obj = policy_obj
        self.decide = decide
        self.opt = options or SimOptions()
        self.name = name
        self.capacity = sum(n.gpus - n.used_by_others for n in self.nodes if n.usable)
        self.node_free = {n.name: n.gpus - n.used_by_others for n in self.nodes}
        self.shared: dict[tuple[str, int], int] = {}  # (node, device) -> fractions running on that shared GPU
        self.node_flavor = {n.name: n.flavor for n in self.nodes}
        self.node_ok = {n.name: n.usable for n in self.nodes}
        self.node_cluster = {n.name: n.cluster for n in self.nodes}
        # a CPU pool's nodes: free millicores and MiB (its GPUs, none, stay in node_free)
        self.cpu_free = {n.name: [n.cpu_m, n.memory_mib] for n in self.nodes if n.kind == CPU_KIND}
        self.records: dict[int, JobRecord] = {j.id: JobRecord(spec=j) for j in jobs}
        if len(self.records) != len(jobs):
            raise SimulationError("duplicate job ids")
        self.pending: dict[int, PendingJob] = {}
        self.running: dict[int, RunningJob] = {}
        self.events: list[tuple] = []
        self.seq = 0
        nominal: dict[str, int] = {}
        for q in self.quotas:
            nominal[q.department] = nominal.get(q.department, 0) + q.nominal
        self.nominal = nominal
        depts = sorted({j.department for j in jobs} | set(nominal))
        self.held = dict.fromkeys(depts, 0)
        self.pend_gpus = dict.fromkeys(depts, 0)
        self.pend_count = dict.fromkeys(depts, 0)
        self.usage = dict.fromkeys(depts, 0.0)
        self.busy = 0
        subs = [j.submit for j in jobs]
        self.window = (min(subs), max(subs)) if subs else (0.0, 0.0)
        self.t = self.window[0]
        self.busy_gpu_s = 0.0
        self.jain_int = 0.0
        self.jain_time = 0.0
        self.dept_back = dict.fromkeys(depts, 0.0)
        self.dept_ratio = dict.fromkeys(depts, 0.0)
        self.preempt_times: deque[tuple[float, int]] = deque()
        self.cycle_times: list[float] = []
        self.invalid = {"admission": 0, "preemption": 0, "idle": 0}
        self.preemption_events = 0
        self.realtime_preempted = 0
        # credits: only departments with a budget are metered (as departments with a wallet in the portal)
        self.budgets = dict(sorted((budgets or {}).items()))
        self.prices = dict(prices or {})
        self.balance = dict(self.budgets)
        self.held_credits = dict.fromkeys(self.budgets, 0)
        self.spent = {d: {"budget": b, "refilled": 0, "charged": 0, "refunded": 0} for d, b in self.budgets.items()}
        period = REFILL_PERIODS[self.opt.budget_refill]
        self.refill_period = period
        self.next_refill = self.window[0] + period if (period and self.budgets) else math.inf
        self.next_tick: float | None = None
        self.last_cycle = -math.inf
        self.pending_cycle: float | None = None
        self.ctx = SimContext(self)
        # policies whose decision changes with time alone (aging, attained service) get periodic ticks
        self.time_dependent = bool(getattr(decide, "time_dependent", True))
        self.last_codes: set[str] = set()
        # the oracle/baseline gets its context (attained service, true remaining time); ``policy_obj`` is the
        # core Policy, which has none
        if hasattr(decide, "bind"):
            decide.bind(self.ctx)
        self._sweeps(jobs)
        for j in jobs:
            self._push(j.submit, SUBMIT, j.id, 0)
        # the calendar's windows, from the first submission on; a cycle at each start and end (owners waiting for
        # their booking start then, and what a window held is free again)
        t0 = self.window[0]
        self.bookings = tuple(replace(b, start=b.start + t0, end=b.end + t0) for b in bookings)
        self.maintenance = tuple(replace(m, start=m.start + t0, end=m.end + t0) for m in maintenance)
        for w in (*self.bookings, *self.maintenance):
            self._push(w.start, TICK, 0, 0)
            self._push(w.end, TICK, 0, 0)
        self.node_index = {n.name: i for i, n in enumerate(self.nodes)}
        self.node_failures = 0
        # nodes fail in name order, one every node_failure_every_s while there is work (``_node_down``)
        self.failing = [self.node_index[name] for name in sorted(self.node_index)]
        if self.opt.node_failure_every_s and self.failing and jobs:
            self._push(self.window[0] + self.opt.node_failure_every_s, NODE_DOWN, self.failing[0], 0)

    def _sweeps(self, jobs: list[JobSpec]) -> None:
        """Arrays and dependencies by the core's ids: an array's name -> a number, a trace key -> the job's id;
        ``ended`` holds how the jobs that others wait for ended (every job the simulator runs succeeds)."""
        names = sorted({j.array for j in jobs if j.array is not None})
        self.array_ids = {name: i + 1 for i, name in enumerate(names)}
        by_key = {j.key: j.id for j in jobs}
        tasks: dict[str, list[int]] = {}
        for j in sorted(jobs, key=lambda j: j.id):
            if j.array is not None:
                tasks.setdefault(j.array, []).append(j.id)
        self.after: dict[int, tuple[Dependency, ...]] = {}
        for j in jobs:
            if j.after:
                self.after[j.id] = tuple(
                    Dependency(cond, tuple(i for k in keys for i in (tasks[k[1:]] if k.startswith("@") else [by_key[k]])),
                               ", ".join(keys)) for cond, keys in j.after)
        self.ended: dict[int, str] = {}

    # ---------------------------------------------------------------- events
    def _push(self, t, kind, job_id, attempt):
        self.seq += 1
        heapq.heappush(self.events, (t, kind, self.seq, job_id, attempt))

    def _advance(self, t: float) -> None:
        """Integrate utilisation, usage and fairness from self.t to t (state constant in between)."""
        dt = t - self.t
        if dt <= 0:
            return
        w0, w1 = self.window
        lo, hi = max(self.t, w0), min(t, w1)
        dtw = hi - lo if hi > lo else 0.0
        if dtw > 0:
            self.busy_gpu_s += self.busy * dtw
            self._fairness(dtw)
        hl = self.policy_obj.usage_half_life_s
        if hl and hl > 0:
            for d, g in self.held.items():
                self.usage[d] = decay_usage(self.usage[d], dt, g, hl)
        self.t = t

    def _fairness(self, dt: float) -> None:
        cap = self.capacity or 1
        ratios = []
        for d, n in self.pend_count.items():
            if n <= 0:
                continue
            nom = self.nominal.get(d, 0)
            if nom <= 0:
                continue
            fair = min(self.held[d] + self.pend_gpus[d], nom) / cap
            r = (self.held[d] / cap) / fair
            ratios.append(r)
            self.dept_back[d] += dt
            self.dept_ratio[d] += r * dt
        if ratios:
            s = sum(ratios)
            s2 = sum(r * r for r in ratios)
            jain = (s * s) / (len(ratios) * s2) if s2 > 0 else 0.0
            self.jain_int += jain * dt
            self.jain_time += dt

    # ---------------------------------------------------------------- state changes
    def _enqueue(self, rec: JobRecord, t: float, *, expedited_since: float | None = None,
                 not_before: float | None = None) -> None:
        s = rec.spec
        rec.attempt += 1
        rec.state = "pending"
        rec.pending_since = t
        self.pending[s.id] = PendingJob(
            expedited_since=expedited_since, not_before=not_before, own_preemptible=s.preemptible,
            id=s.id, department=s.department, flavor=s.flavor, tier=s.tier, pods=s.pods, gpus_per_pod=s.gpus_per_pod,
            urgency=s.urgency, user_tier=s.user_tier, user=s.user, submitted_at=s.submit, deadline=s.deadline,
            max_runtime_s=s.max_runtime_s, bid=s.bid, attempt=rec.attempt, hold=self._worst_hold(s),
            cluster_selector=s.cluster_selector, cluster_preference=s.cluster_preference, share=s.share,
            array_id=self.array_ids.get(s.array), array_throttle=s.array_throttle, after=self.after.get(s.id, ()),
            roles=s.roles, min_pods=s.min_pods,
        )
        self.pend_gpus[s.department] += s.total_gpus
        self.pend_count[s.department] += 1

    def _ckpt(self, s: JobSpec) -> float | None:
        ck = s.checkpoint_interval_s if s.checkpoint_interval_s is not None else self.opt.checkpoint_interval_s
        return ck if ck else None

    # ---------------------------------------------------------------- credits
    def _worst_hold(self, s: JobSpec) -> int:
        """quotas' hold_for: worst-case rate (base price, or the bid if higher) x GPUs x max runtime."""
        if s.department not in self.budgets:
            return 0
        rate = money.worst_case_rate(self._base_price(s), s.bid)
        return money.hold_of(rate, total_gpus=s.total_gpus, max_runtime_s=s.max_runtime_s)

    def _base_price(self, s: JobSpec) -> int:
        """quotas' job_base_rate: its tier's base price on its flavor, with the surcharge it pays for running
        non-preemptible."""
        return money.surcharged(self.prices.get((s.flavor, s.tier), 0), s.price_surcharge_pct)

    def _refill(self, t: float) -> None:
        while t >= self.next_refill:
            for d, b in self.budgets.items():
                self.balance[d] += b
                self.spent[d]["refilled"] += b
            self.next_refill += self.refill_period

    def _credits(self):
        if not self.budgets:
            return None
        return MappingProxyType({d: self.balance[d] - self.held_credits[d] for d in self.budgets})

    def _hold(self, rec: JobRecord, price: int | None) -> None:
        """quotas.services.on_job_admitted: hold the admission rate x GPUs x max runtime (partial if short)."""
        s = rec.spec
        rec.hold = rec.rate = 0
        d = s.department
        if d not in self.budgets:
            return
        rate, _ = money.admission_rate(self._base_price(s), borrowed=rec.borrowed, price=price)
        # a resizable job holds for the size it was admitted at (its grows hold more, ``_resized``)
        want = money.hold_of(rate, total_gpus=self._gpus(rec), max_runtime_s=s.max_runtime_s)
        rec.rate = rate
        rec.hold = max(0, min(want, self.balance[d] - self.held_credits[d]))
        self.held_credits[d] += rec.hold
        if s.min_pods is not None:
            rec.sizes = [(rec.start, [[self._gpus(rec), rate, int(rec.borrowed)]])]

    def _hold_grow(self, rec: JobRecord, t: float, gpus: int) -> None:
        """quotas.services.on_job_resized: the attempt's lots at its new size of ``gpus`` GPUs (``money.resized_lots``:
        a grow's GPUs borrowed at the clearing price it was decided at, a shrink taking the newest off), and a grow's
        GPUs held for the rest of the max runtime (partial if short)."""
        s = rec.spec
        d = s.department
        if d not in self.budgets or not rec.sizes:
            return
        lots = rec.sizes[-1][1]
        have = sum(lot[0] for lot in lots)
        rate = 0
        if gpus > have:
            rate, _ = money.admission_rate(self._base_price(s), borrowed=True, price=rec.resize_price)
            left = max(0.0, s.max_runtime_s - (t - rec.attempt_start)) if s.max_runtime_s else 0.0
            want = money.hold_of(rate, total_gpus=gpus - have, max_runtime_s=left)
            extra = max(0, min(want, self.balance[d] - self.held_credits[d]))
            rec.hold += extra
            self.held_credits[d] += extra
        rec.sizes.append((t, money.resized_lots(lots, gpus=gpus, rate=rate)))

    def _settle(self, rec: JobRecord, end: float, preempted: bool, outcome: str | None = None) -> None:
        """quotas' settle_attempt: charge the GPU-seconds used at the held rate (capped at the hold), release
        the rest and refund per ``money.REFUND_POLICY``: every preemption here is the engine's, so one inside
        nominal quota is refunded in full and a borrowed one not; an attempt a node failure ended (``outcome``
        ``platform_failure``) is refunded in full."""
        s = rec.spec
        d = s.department
        if d not in self.budgets:
            return
        outcome = outcome or ("preempted" if preempted else "succeeded")
        if rec.sizes:  # a resizable job: lot by lot, each from its own start at its own rate, on its own terms
            _, cost, lots = money.lot_usage(rec.sizes, start=rec.attempt_start, end=end,
                                            max_runtime_s=s.max_runtime_s)
            charge = min(cost, rec.hold)
            refund = min(charge, sum(back for _, back, _ in money.lot_settlement(
                lots, outcome=outcome, decided_by_portal=True, charged=charge)))
            rec.sizes = []
        else:
            used = rec.prior_gpu_s + money.attempt_gpu_seconds(total_gpus=self._gpus(rec), ran_s=end - rec.start,
                                                              max_runtime_s=s.max_runtime_s)
            charge = money.attempt_charge(rec.rate, gpu_seconds=used, hold=rec.hold)
            share, _ = money.refund_share(outcome, borrowed=rec.borrowed)
            refund = money.refund_of(charge, share)
        self.held_credits[d] -= rec.hold
        self.balance[d] -= charge
        self.spent[d]["charged"] += charge
        if refund:
            self.balance[d] += refund
            self.spent[d]["refunded"] += refund
        rec.hold = 0

    @staticmethod
    def _split(s: JobSpec, placement) -> tuple[tuple[str, ...], tuple[tuple[str, str, int, int], ...]]:
        """An admission's placement (role by role for a job of roles) as its GPU pods' nodes and its CPU pods
        (pool, node, millicores, MiB), as ``RunningJob`` holds them."""
        if not s.roles:
            return tuple(placement), ()
        gpu, cpu, at = [], [], 0
        for r in s.roles:
            nodes = placement[at:at + r.pods]
            at += r.pods
            if r.gpus_per_pod:
                gpu += nodes
            else:
                cpu += [(r.flavor, n, r.cpu_m, r.memory_mib) for n in nodes]
        return tuple(gpu), tuple(cpu)

    def _start(self, rec: JobRecord, placement, borrowed: bool, cluster: str, t: float,
               price: int | None = None, devices: tuple[int, ...] = ()) -> None:
        s = rec.spec
        del self.pending[s.id]
        self.pend_gpus[s.department] -= s.total_gpus
        self.pend_count[s.department] -= 1
        placement, cpu_pods = self._split(s, placement)
        rec.size = len(placement) if s.min_pods is not None else 0
        rec.prior_gpu_s = 0.0
        rec.resize_to = rec.resize_at = None
        rec.attempt_start = t
        if s.share is not None:  # a shared GPU is taken once, by its first fraction (``engine.fractions``)
            for name, device in zip(placement, devices, strict=True):
                key = (name, device)
                self.shared[key] = self.shared.get(key, 0) + 1
                if self.shared[key] == 1:
                    self.node_free[name] -= 1
        else:
            for name in placement:
                self.node_free[name] -= s.gpus_per_pod
        for _, name, cpu_m, mib in cpu_pods:
            self.cpu_free[name][0] -= cpu_m
            self.cpu_free[name][1] -= mib
        rec.state = "running"
        rec.start = t
        rec.queued_s += t - rec.pending_since
        rec.borrowed = borrowed
        if rec.first_start is None:
            rec.first_start = t
        self._hold(rec, price)
        self.held[s.department] += self._gpus(rec)
        self.busy += self._gpus(rec)
        self.running[s.id] = RunningJob(
            id=s.id, department=s.department, flavor=s.flavor, tier=s.tier, placement=tuple(placement),
            gpus_per_pod=s.gpus_per_pod, started_at=t, max_runtime_s=s.max_runtime_s, borrowed=borrowed,
            urgency=s.urgency, user_tier=s.user_tier, submitted_at=s.submit, bid=s.bid, cluster=cluster,
            deadline=s.deadline, preemptible=tiers.is_preemptible(s.tier, s.preemptible), own_preemptible=s.preemptible,
            checkpoint_interval_s=self._ckpt(s),
            array_id=self.array_ids.get(s.array), cpu_pods=cpu_pods,
            min_pods=s.min_pods, max_pods=s.pods if s.min_pods is not None else None,
            share=s.share, devices=tuple(devices),
        )
        rec.slowdown = self._slowdown(rec, placement)
        self._due(rec, t)

    # ---------------------------------------------------------------- resizable jobs
    def _gpus(self, rec: JobRecord) -> int:
        """The GPUs the job computes on now (a resizable job's current size; its spec's otherwise)."""
        return rec.size * rec.spec.gpus_per_pod if rec.size else rec.spec.total_gpus

    def _rate(self, rec: JobRecord) -> float:
        """Work per second at its current size and placement, where its spec's duration is the work at its maximum
        size on a compact placement."""
        s = rec.spec
        # a gang spread over a level the scenario slows down does its work slower by that factor
        return (speedup(rec.size, s.pods, s.scaling_efficiency) if rec.size else 1.0) / rec.slowdown

    def _due(self, rec: JobRecord, t: float) -> None:
        rec.finish_at = t + max(rec.spec.duration_s - rec.progress_s, 0.0) / self._rate(rec)
        self._push(rec.finish_at, FINISH, rec.spec.id, rec.attempt)

    def _may_grow(self) -> bool:
        """Whether a running resizable job is below its maximum with no resize under way (a cycle may grow it
        into GPUs an event freed, even with nothing pending)."""
        return any(rec.size and rec.size < rec.spec.pods and rec.resize_to is None
                   for rec in map(self.records.get, self.running) if rec is not None and rec.state == "running")

    def _resize(self, rec: JobRecord, placement: tuple[str, ...], t: float, price: int | None = None) -> None:
        """The engine decided a resize: it waits for the job's next checkpoint, or for its answer to a notice
        when it declares one (it writes a checkpoint on demand). A grow's new GPUs are held from now (promised to
        it); a shrink's stay in use until then."""
        s = rec.spec
        rj = self.running[s.id]
        notice = self._notice(s)
        ck = self._ckpt(s)
        if notice > 0 and self._answers(s):
            at = t + notice * self.opt.notice_answer
        elif ck:
            at = rec.start + math.ceil((t - rec.start) / ck - 1e-9) * ck
        else:
            at = t
        new_nodes = list(placement)
        for name in rj.placement:
            if name in new_nodes:
                new_nodes.remove(name)
        for name in new_nodes:
            self.node_free[name] -= s.gpus_per_pod
        union = rj.placement + tuple(new_nodes)
        self.running[s.id] = replace(rj, placement=union, resizing=True)
        rec.resize_to = tuple(placement)
        rec.resize_at = at
        rec.resize_price = price
        self._push(at, RESIZE, s.id, rec.attempt)

    def _resized(self, rec: JobRecord, t: float) -> None:
        """At the checkpoint: the work so far is kept, the job goes on at its new size (a new segment)."""
        s = rec.spec
        rj = self.running[s.id]
        target = list(rec.resize_to)
        gpus = self._gpus(rec)
        rec.progress_s = min(s.duration_s, rec.progress_s + (t - rec.start) * self._rate(rec))
        rec.prior_gpu_s += (t - rec.start) * gpus
        rec.attained_gpu_s += (t - rec.start) * gpus
        rec.runs.append((rec.start, t))
        keep = list(target)
        for name in rj.placement:  # the union's pods that the target does not keep are freed
            if name in keep:
                keep.remove(name)
            else:
                self.node_free[name] += s.gpus_per_pod
        new_size = len(target)
        if new_size > rec.size:
            rec.grows += 1
        elif new_size < rec.size:
            rec.shrinks += 1
        delta = (new_size - rec.size) * s.gpus_per_pod
        self.held[s.department] += delta
        self.busy += delta
        rec.size = new_size
        self._hold_grow(rec, t, self._gpus(rec))
        rec.start = t
        rec.resize_to = rec.resize_at = None
        self.running[s.id] = replace(rj, placement=tuple(target), resizing=False)
        self._due(rec, t)

    def _slowdown(self, rec: JobRecord, placement) -> float:
        """The run-time factor of a gang placed on ``placement``: the scenario's for the outermost level whose
        domains its pods span (1 for a single node, or without topology)."""
        if self.topology is None or len(placement) < 2:
            return 1.0
        rec.gang_starts += 1
        domains = self.node_domains
        spread = ""
        for li, level in enumerate(self.topology.levels):
            first = domains[placement[0]][li]
            if first is None or any(domains[n][li] != first for n in placement):
                spread = level
                break
        factor = self.topology.factor(spread)
        if factor > 1.0:
            rec.spread_starts += 1
        return factor

    def _release(self, rec: JobRecord, t: float) -> None:
        s = rec.spec
        rj = self.running.pop(s.id)
        if s.share is not None:  # its GPUs free once their last fraction leaves
            for name, device in zip(rj.placement, rj.devices, strict=True):
                key = (name, device)
                self.shared[key] -= 1
                if not self.shared[key]:
                    del self.shared[key]
                    self.node_free[name] += 1
        else:
            for name in rj.placement:
                self.node_free[name] += s.gpus_per_pod
        for _, name, cpu_m, mib in rj.cpu_pods:
            self.cpu_free[name][0] += cpu_m
            self.cpu_free[name][1] += mib
        self.held[s.department] -= self._gpus(rec)
        self.busy -= self._gpus(rec)
        rec.attained_gpu_s += (t - rec.start) * self._gpus(rec)
        rec.resize_to = rec.resize_at = None
        rec.runs.append((rec.start, t))

    def _finish(self, rec: JobRecord, t: float) -> None:
        self._settle(rec, t, preempted=False)
        self._release(rec, t)
        rec.state = "done"
        rec.finish = t
        rec.progress_s = rec.spec.duration_s
        self.ended[rec.spec.id] = "succeeded"

    def _cancel(self, rec: JobRecord, t: float) -> None:
        """A dependency it waits for can never be met: it leaves the queue without running (as the portal
        cancels it)."""
        s = rec.spec
        del self.pending[s.id]
        self.pend_gpus[s.department] -= s.total_gpus
        self.pend_count[s.department] -= 1
        rec.queued_s += t - rec.pending_since
        rec.state = "cancelled"
        self.ended[s.id] = "cancelled"

    def _notice(self, s: JobSpec) -> float:
        return s.notice_s if s.notice_s is not None else self.opt.notice_s

    def _answers(self, s: JobSpec) -> bool:
        """Whether the job answers a notice: every job that checkpoints at all, when the scenario's jobs do."""
        return self.opt.notice_answer is not None and self._ckpt(s) is not None

    def _notice_end(self, rec: JobRecord, t: float) -> None:
        """The victim answered "checkpoint written" (``notice_answer`` of its notice), or its notice ended
        without an answer: the eviction goes ahead now, with its grace period, as one without notice would."""
        if self._answers(rec.spec):
            rec.answered += 1
            rec.checkpoint_at = t
        rec.evict_at = t
        if self.opt.preemption_grace_s > 0:
            self._push(t + self.opt.preemption_grace_s, EVICTED, rec.spec.id, rec.attempt)
        else:
            self._evicted(rec, t)

    def _evicted(self, rec: JobRecord, t: float) -> None:
        """End of grace: free the GPUs, keep checkpointed progress, requeue as a new attempt."""
        ran = t - rec.start
        ck = self._ckpt(rec.spec)
        ran_before = (rec.evict_at if rec.evict_at is not None else t) - rec.start
        # (the epsilon: an eviction decided exactly at a checkpoint, e.g. at min_runtime_s, keeps that checkpoint
        # despite float error in start + interval - start)
        kept = 0.0 if not ck else math.floor(ran_before / ck + 1e-9) * ck
        if rec.checkpoint_at is not None:  # the checkpoint its answer announced: the work up to it is kept
            kept = max(kept, rec.checkpoint_at - rec.start)
            rec.checkpoint_at = None
        rate = self._rate(rec)
        kept = min(kept, (rec.spec.duration_s - rec.progress_s) / rate)
        rec.lost_gpu_s += max(ran - kept, 0.0) * self._gpus(rec)
        if ran > kept:
            rec.lost_runs.append((rec.start + kept, t))
        rec.progress_s += kept * rate
        rec.last_run_s = ran_before
        self._settle(rec, rec.evict_at if rec.evict_at is not None else t, preempted=True)
        self._release(rec, t)
        self._enqueue(rec, t)

    def _node_down(self, i: int, t: float) -> None:
        """Node ``i`` fails: no admission there until it comes back, and every attempt with a pod on it ends (an
        eviction under way included) and is requeued, expedited while the policy allows."""
        node = self.nodes[i]
        if self.running or self.pending or any(e[1] in (SUBMIT, FINISH, EVICTED, NOTICE_END) for e in self.events):
            nxt = self.failing[(self.failing.index(i) + 1) % len(self.failing)]
            self._push(t + self.opt.node_failure_every_s, NODE_DOWN, nxt, 0)
        if not self.node_ok[node.name]:
            return
        self.node_failures += 1
        self.node_ok[node.name] = False
        self.nodes = self.nodes[:i] + (replace(node, schedulable=False),) + self.nodes[i + 1:]
        self._push(t + self.opt.node_repair_s, NODE_UP, i, 0)
        hit = sorted(jid for jid, rj in self.running.items()
                     if node.name in rj.placement or any(p[1] == node.name for p in rj.cpu_pods))
        pol = self.policy_obj
        for jid in hit:
            rec = self.records[jid]
            if rec.state == "evicting":
                self._evicted(rec, t)  # the preemption's requeue, which the failure only brings forward
                continue
            ran = t - rec.start
            ck = self._ckpt(rec.spec)
            kept = 0.0 if not ck else math.floor(ran / ck + 1e-9) * ck
            rate = self._rate(rec)
            kept = min(kept, (rec.spec.duration_s - rec.progress_s) / rate)
            lost = max(ran - kept, 0.0) * self._gpus(rec)
            rec.lost_gpu_s += lost
            rec.failure_lost_gpu_s += lost
            if ran > kept:
                rec.lost_runs.append((rec.start + kept, t))
            rec.progress_s += kept * rate
            rec.node_failures += 1
            self._settle(rec, t, preempted=False, outcome="platform_failure")
            self._release(rec, t)
            fast = expedite("NodeLost", done=rec.expedited, limit=getattr(pol, "expedited_requeues", 0),
                            first_backoff_s=getattr(pol, "expedited_backoff_s", 0.0), tier=rec.spec.tier)
            if fast.expedited:
                rec.expedited = fast.number
                self._enqueue(rec, t, expedited_since=t, not_before=t + fast.backoff_s)
                self._push(t + fast.backoff_s, TICK, 0, 0)  # a cycle when its back-off ends
            else:
                self._enqueue(rec, t)

    def _node_up(self, i: int) -> None:
        node = self.nodes[i]
        self.node_ok[node.name] = True
        self.nodes = self.nodes[:i] + (replace(node, schedulable=True),) + self.nodes[i + 1:]

    # ---------------------------------------------------------------- the cycle
    def _snapshot(self, t: float) -> Snapshot:
        win = self.policy_obj.preemption_window_s
        while self.preempt_times and self.preempt_times[0][0] <= t - win:
            self.preempt_times.popleft()
        self._refill(t)
        return Snapshot(
            now=t, nodes=self.nodes, running=tuple(self.running.values()), pending=tuple(self.pending.values()),
            quotas=self.quotas, policy=self.policy_obj, credits=self._credits(),
            usage=MappingProxyType(dict(self.usage)),
            recent_preemptions=sum(n for _, n in self.preempt_times), estimates=False, clusters=self.engine_clusters,
            ended=MappingProxyType(dict(self.ended)) if self.after else MappingProxyType({}),
            bookings=self.bookings, maintenance=self.maintenance,
        )

    def _bad(self, kind: str, msg: str) -> None:
        if self.opt.strict:
            raise SimulationError(f"{self.name}: invalid {kind}: {msg}")
        self.invalid[kind] += 1

    def _cycle(self, t: float) -> tuple[int, int]:
        snap = self._snapshot(t)
        c0 = time.perf_counter()
        res = self.decide(snap)
        self.cycle_times.append(time.perf_counter() - c0)
        self.last_cycle = t
        self.last_codes = {p.code for p in res.pending} if res.pending else set()
        if BUDGET_INSUFFICIENT in self.last_codes:
            for p in res.pending:
                if p.code == BUDGET_INSUFFICIENT and p.job_id in self.records:
                    self.records[p.job_id].budget_blocked = True
        if DEPENDENCY_NEVER_SATISFIED in self.last_codes:
            for p in res.pending:
                rec = self.records.get(p.job_id)
                if p.code == DEPENDENCY_NEVER_SATISFIED and rec is not None and rec.state == "pending":
                    self._cancel(rec, t)
        gates = Gates(snap)  # an admission must pass the sweeps' gates too, whatever the policy
        n_pre = 0
        grace = self.opt.preemption_grace_s
        for p in res.preemptions:
            for vid in p.victim_ids:
                rj = self.running.get(vid)
                rec = self.records.get(vid)
                if rj is None or rec is None or rec.state != "running":
                    self._bad("preemption", f"victim {vid} is not running")
                    continue
                if not tiers.is_preemptible(rj.tier, rj.own_preemptible):
                    self.realtime_preempted += 1  # (a job that was never to be a victim)
                n_pre += 1
                rec.preemptions += 1
                rec.state = "evicting"
                rec.evict_at = t
                self.preempt_times.append((t, 1))
                notice = self._notice(rec.spec)
                if notice > 0:
                    # told first: it keeps running (its GPUs promised to the preemptor) until it answers, or
                    # its notice ends, and only then is it evicted (the grace period starts there)
                    rec.notices += 1
                    rec.evict_at = None
                    self.running[vid] = replace(rj, preemptible=False, evicting_for=p.preemptor_id)
                    part = self.opt.notice_answer if self._answers(rec.spec) else 1.0
                    self._push(t + notice * part, NOTICE_END, vid, rec.attempt)
                elif grace > 0:
                    # its GPUs are promised to the preemptor until the grace period ends
                    self.running[vid] = replace(rj, preemptible=False, evicting_for=p.preemptor_id)
                    self._push(t + grace, EVICTED, vid, rec.attempt)
                else:
                    self._evicted(rec, t)
        self.preemption_events += n_pre
        n_adm = 0
        for a in res.admissions:
            rec = self.records.get(a.job_id)
            if rec is None or rec.state != "pending":
                self._bad("admission", f"job {a.job_id} is not pending")
                continue
            s = rec.spec
            pods = sum(r.pods for r in s.roles) if s.roles else s.pods
            if s.min_pods is not None and s.min_pods <= len(a.placement) <= s.pods:
                pods = len(a.placement)  # a resizable job, admitted at a size of its range
            if len(a.placement) != pods:
                self._bad("admission", f"job {s.id}: {len(a.placement)} placements for {pods} pods")
                continue
            gpu_nodes, cpu_pods = self._split(s, a.placement)
            need: dict[str, int] = {}
            if s.share is not None and len(a.devices) != len(gpu_nodes):
                self._bad("admission", f"job {s.id}: {len(a.devices)} GPU devices for {len(gpu_nodes)} fractional pods")
                continue
            if s.share is not None:
                # a fraction takes a whole GPU only where it opens one: on a GPU already shared it needs none
                # (``_start`` counts the same way), so a node with no whole GPU free can still take it
                opened = {(n, d) for n, d in zip(gpu_nodes, a.devices, strict=True) if (n, d) not in self.shared}
                for name, _ in opened:
                    need[name] = need.get(name, 0) + 1
                for name in gpu_nodes:
                    need.setdefault(name, 0)
            else:
                for name in gpu_nodes:
                    need[name] = need.get(name, 0) + s.gpus_per_pod
            want: dict[str, list[int]] = {}
            for pool, name, cpu_m, mib in cpu_pods:
                w = want.setdefault(name, [0, 0, pool])
                w[0] += cpu_m
                w[1] += mib
            ok = all(
                self.node_flavor.get(n) == s.flavor and self.node_ok.get(n) and self.node_free[n] >= g
                for n, g in need.items()
            ) and all(self.node_flavor.get(n) == w[2] and self.node_ok.get(n) and n in self.cpu_free
                      and self.cpu_free[n][0] >= w[0] and self.cpu_free[n][1] >= w[1] for n, w in want.items())
            need.update(dict.fromkeys(want, 0))  # (the cluster check below covers the CPU pods' nodes too)
            if not ok:
                self._bad("admission", f"job {s.id} does not fit on {a.placement}")
                continue
            closed = gates.check(self.pending[s.id])
            if closed is not None:
                self._bad("admission", f"job {s.id} is kept out by its sweep: {closed[0]}")
                continue
            if any(self.node_cluster[n] != a.cluster for n in need) or not self.cluster_open.get(a.cluster, True) or (
                s.cluster_selector and not self.cluster_labels.get(a.cluster, frozenset()).issuperset(s.cluster_selector)
            ):
                self._bad("admission", f"job {s.id} may not start on cluster {a.cluster} ({a.placement})")
                continue
            gates.admitted(self.pending[s.id])
            self._start(rec, a.placement, a.borrowed, a.cluster, t, a.price, a.devices)
            n_adm += 1
        for rz in res.resizes:
            rec = self.records.get(rz.job_id)
            rj = self.running.get(rz.job_id)
            if rec is None or rj is None or rec.state != "running" or rj.resizing or rec.spec.min_pods is None:
                self._bad("admission", f"job {rz.job_id} cannot be resized now")
                continue
            s = rec.spec
            if not s.min_pods <= rz.pods <= s.pods or any(
                    self.node_flavor.get(n) != s.flavor or not self.node_ok.get(n) for n in rz.placement):
                self._bad("admission", f"job {s.id}: resize to {rz.placement} is outside its range or pool")
                continue
            need: dict[str, int] = {}
            for n in rz.placement:
                need[n] = need.get(n, 0) + 1
            for n in rj.placement:
                need[n] = need.get(n, 0) - 1
            if any(k > 0 and self.node_free[n] < k * s.gpus_per_pod for n, k in need.items()):
                self._bad("admission", f"job {s.id}: grown pods do not fit on {rz.placement}")
                continue
            self._resize(rec, tuple(rz.placement), t, rz.price)
        self._check_idle(res.pending)
        return n_adm, n_pre

    # The reasons that say "no room": a job given one of them must not fit the GPUs left free after the cycle
    # (it was judged with at least those free). Every other reason names what it waits for instead of room:
    # quota, credits, a reserved head, a higher-priority job, its dependencies, a hold (docs/scheduling.md).
    NO_ROOM = frozenset({NO_CAPACITY, NO_FITTING_NODE, EXCEEDS_CAPACITY})

    def _check_idle(self, pending) -> None:
        """No GPU stays idle while a job that fits it and may start waits, other than for a documented reason:
        a job told there is no room must not fit the GPUs free after the cycle's admissions, and one held for
        the realtime headroom must not leave it after starting (``realtime_headroom_gpus`` free) either."""
        headroom = self.policy_obj.realtime_headroom_gpus
        for p in pending:
            if p.code not in self.NO_ROOM and p.code != REALTIME_HEADROOM:
                continue
            job = self.pending.get(p.job_id)
            if job is None:
                continue
            for cluster, free in self._free_by_cluster(job).items():
                fits = sum(f // job.gpus_per_pod for f in free) >= job.pods if job.gpus_per_pod > 0 else False
                if not fits:
                    continue
                if p.code == REALTIME_HEADROOM and sum(free) - job.total_gpus < headroom:
                    continue  # the documented reason: starting it would leave less than the headroom free
                self._bad("idle", f"job {job.id} ({job.pods} x {job.gpus_per_pod} GPUs) waits with {p.code} "
                                  f"while {sum(free)} GPUs of {job.flavor} on {cluster} are free ({sorted(free)})")
                break

    def _free_by_cluster(self, job: PendingJob) -> dict[str, list[int]]:
        """The free GPUs of each usable node of the job's flavor, by cluster it may start on."""
        out: dict[str, list[int]] = {}
        now = self.last_cycle  # (nodes in a maintenance window under way are out of service, as the engine has them)
        down = [m for m in self.maintenance if m.start <= now < m.end]
        for n in self.nodes:
            if self.node_flavor.get(n.name) != job.flavor or not self.node_ok.get(n.name):
                continue
            if down and any(covers(m, n) for m in down):
                continue
            c = self.node_cluster[n.name]
            if not self.cluster_open.get(c, True) or (
                job.cluster_selector and not self.cluster_labels.get(c, frozenset()).issuperset(job.cluster_selector)
            ):
                continue
            if self.node_free[n.name] > 0:
                out.setdefault(c, []).append(self.node_free[n.name])
        return out

    def _wake_for_cooldown(self, t: float) -> float | None:
        """The next instant a cooldown or the preemption rate window expires (the engine may act then)."""
        pol = self.policy_obj
        times = [rj.started_at + pol.min_runtime_s for rj in self.running.values()
                 if rj.preemptible and rj.started_at + pol.min_runtime_s > t]
        if self.preempt_times:
            times.append(self.preempt_times[0][0] + pol.preemption_window_s)
        times = [x for x in times if x > t]
        return min(times) if times else None

    # ---------------------------------------------------------------- main loop
    def run(self) -> SimResult:
        w0 = time.perf_counter()
        ev = self.events
        opt = self.opt
        idle_ticks = 0
        while ev:
            t = ev[0][0]
            self._advance(t)
            real = False
            while ev and ev[0][0] == t:
                _, kind, _, jid, attempt = heapq.heappop(ev)
                rec = self.records.get(jid)
                if kind == SUBMIT:
                    self._enqueue(rec, t)
                    real = True
                elif kind == RESIZE:
                    if rec.attempt == attempt and rec.state == "running" and rec.resize_at == t:
                        self._resized(rec, t)
                        real = True
                elif kind == FINISH:
                    if rec.attempt == attempt and rec.state in ("running", "evicting") and rec.finish_at == t:
                        self._finish(rec, t)
                        real = True
                elif kind == EVICTED:
                    if rec.attempt == attempt and rec.state == "evicting":
                        self._evicted(rec, t)
                        real = True
                elif kind == NOTICE_END:
                    if rec.attempt == attempt and rec.state == "evicting" and rec.evict_at is None:
                        self._notice_end(rec, t)
                        real = True
                elif kind == NODE_DOWN:
                    self._node_down(jid, t)
                    real = True
                elif kind == NODE_UP:
                    self._node_up(jid)
                    real = True
                elif kind == TICK:
                    if self.pending_cycle == t:
                        self.pending_cycle = None
                    if self.next_tick == t:
                        self.next_tick = None
            if not self.pending and not (real and self._may_grow()):
                continue
            at = self.last_cycle + opt.min_cycle_interval_s
            if opt.min_cycle_interval_s and at > t:  # (float-safe: the deferred tick lands exactly on ``at``)
                if self.pending_cycle is None or self.pending_cycle > at:
                    self.pending_cycle = at
                    self._push(at, TICK, 0, 0)
                continue
            n_adm, n_pre = self._cycle(t)
            rounds = 0
            while n_pre and opt.preemption_grace_s <= 0 and rounds < opt.follow_up_cycles and self.pending:
                n_adm2, n_pre = self._cycle(t)
                n_adm += n_adm2
                rounds += 1
            # stop ticking when nothing can change any more (nothing running or arriving, cycle did nothing)
            idle_ticks = 0 if (real or n_adm or n_pre) else idle_ticks + 1
            if not self.pending:
                continue
            wake = self._wake_for_cooldown(t) if self.last_codes & COOLDOWN_CODES else None
            if BUDGET_INSUFFICIENT in self.last_codes and self.next_refill < math.inf:
                wake = self.next_refill if wake is None else min(wake, self.next_refill)
            if self.time_dependent and opt.tick_s and (self.running or len(ev) > 0 or idle_ticks < 3):
                wake = t + opt.tick_s if wake is None else min(wake, t + opt.tick_s)
            if wake is not None and (self.next_tick is None or self.next_tick <= t or wake < self.next_tick):
                self.next_tick = wake
                self._push(wake, TICK, 0, 0)
        end = self.t
        lost = sum(r.lost_gpu_s for r in self.records.values())
        total_exec = sum(r.attained_gpu_s for r in self.records.values())
        dept_share = {
            d: {"backlogged_s": self.dept_back[d],
                "ratio_avg": (self.dept_ratio[d] / self.dept_back[d]) if self.dept_back[d] > 0 else float("nan")}
            for d in self.dept_back
        }
        return SimResult(
            policy=self.name, jobs=list(self.records.values()), capacity=self.capacity, window=self.window,
            busy_gpu_s=self.busy_gpu_s, useful_gpu_s=total_exec - lost, end_time=end,
            jain_time_avg=(self.jain_int / self.jain_time) if self.jain_time > 0 else None,
            dept_share=dept_share, cycle_times=self.cycle_times, cycles=len(self.cycle_times),
            invalid=dict(self.invalid), wall_s=time.perf_counter() - w0, preemption_events=self.preemption_events,
            realtime_preempted=self.realtime_preempted, quotas=dict(self.nominal),
            spend={d: dict(v, spent=v["charged"] - v["refunded"], balance_end=self.balance[d])
                   for d, v in self.spent.items()},
            node_failures=self.node_failures,
        )


def simulate(*, scenario, jobs: list[JobSpec], policy, name: str | None = None,
             options: SimOptions | None = None) -> SimResult:
    """Run one replay. ``policy`` is a callable ``Snapshot -> CycleResult`` (may have ``bind(ctx)``)."""
    sim = Simulator(
        nodes=scenario.nodes(), quotas=scenario.quotas(), policy_obj=scenario.policy(), jobs=jobs, decide=policy,
        options=options or scenario.options, name=name or getattr(policy, "name", "policy"),
        budgets=scenario.budgets(), prices=scenario.prices, clusters=scenario.clusters,
        topology=scenario.topology,
        bookings=scenario.bookings, maintenance=scenario.maintenance,
    )
    return sim.run()
