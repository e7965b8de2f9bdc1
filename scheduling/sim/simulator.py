"""The discrete-event simulator: replays JobSpecs on a cluster under one policy (``Snapshot -> CycleResult``).

Events: submit, finish, eviction complete (end of a preemption's grace period) and a periodic tick while jobs
wait. All events at the same instant are applied first, then one scheduling cycle runs on a fresh ``Snapshot``
(optionally no more often than ``min_cycle_interval_s``). Preempted jobs are requeued as a new attempt keeping
their original submission time; work since the last checkpoint (and the grace period) is lost. Deterministic:
no clock, no randomness; ties are broken by event sequence numbers and job ids.

Credits (departments with a ``budget``) follow the portal's ledger (quotas/services/), simplified, with the same
arithmetic and refund policy (``scheduling.core.money``): the snapshot
carries each metered department's available credits (balance minus open holds) and each pending job's ``hold``
(worst-case rate = max(base price, bid) x GPUs x max runtime, 0 for an unmetered department); an admitted
attempt holds its admission rate (the base price, or the cycle's clearing price when borrowing was contested
and that is higher) x GPUs x max runtime, at most what is available; when the attempt ends it is charged its GPU-seconds (up to the end, or up to
the eviction decision) at that rate, capped at the hold, and the rest is released. A preemption refunds the
charge in full when the attempt ran inside its department's nominal quota and nothing when it borrowed. Budgets
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

from scheduling.core import ClusterInfo, Dependency, PendingJob, Quota, RunningJob, Snapshot, money, tiers
from scheduling.core.policy import decay_usage
from scheduling.core.reasons import BUDGET_INSUFFICIENT, DEPENDENCY_NEVER_SATISFIED
from scheduling.core.sweeps import Gates

from .scenario import REFILL_PERIODS, JobSpec, SimOptions

FINISH, EVICTED, SUBMIT, TICK = 0, 1, 2, 3
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


class SimContext:
    """What an oracle/baseline policy may know beyond the snapshot (the engine gets none of it)."""

    def __init__(self, sim: Simulator):
        self._sim = sim

    def attained_gpu_s(self, job_id: int, now: float) -> float:
        rec = self._sim.records[job_id]
        cur = 0.0
        if rec.state in ("running", "evicting") and rec.start is not None:
            cur = (now - rec.start) * rec.spec.total_gpus
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
                 prices: dict[tuple[str, str], int] | None = None, clusters: tuple[ClusterInfo, ...] = ()):
        self.nodes = tuple(nodes)
        self.clusters = tuple(clusters)
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
        self.node_flavor = {n.name: n.flavor for n in self.nodes}
        self.node_ok = {n.name: n.usable for n in self.nodes}
        self.node_cluster = {n.name: n.cluster for n in self.nodes}
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
        self.invalid = {"admission": 0, "preemption": 0}
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
    def _enqueue(self, rec: JobRecord, t: float) -> None:
        s = rec.spec
        rec.attempt += 1
        rec.state = "pending"
        rec.pending_since = t
        self.pending[s.id] = PendingJob(
            id=s.id, department=s.department, flavor=s.flavor, tier=s.tier, pods=s.pods, gpus_per_pod=s.gpus_per_pod,
            urgency=s.urgency, user_tier=s.user_tier, user=s.user, submitted_at=s.submit, deadline=s.deadline,
            max_runtime_s=s.max_runtime_s, bid=s.bid, attempt=rec.attempt, hold=self._worst_hold(s),
            cluster_selector=s.cluster_selector, cluster_preference=s.cluster_preference,
            array_id=self.array_ids.get(s.array), array_throttle=s.array_throttle, after=self.after.get(s.id, ()),
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
        rate = money.worst_case_rate(self.prices.get((s.flavor, s.tier), 0), s.bid)
        return money.hold_of(rate, total_gpus=s.total_gpus, max_runtime_s=s.max_runtime_s)

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
        rate, _ = money.admission_rate(self.prices.get((s.flavor, s.tier), 0), borrowed=rec.borrowed, price=price)
        want = money.hold_of(rate, total_gpus=s.total_gpus, max_runtime_s=s.max_runtime_s)
        rec.rate = rate
        rec.hold = max(0, min(want, self.balance[d] - self.held_credits[d]))
        self.held_credits[d] += rec.hold

    def _settle(self, rec: JobRecord, end: float, preempted: bool) -> None:
        """quotas' settle_attempt: charge the GPU-seconds used at the held rate (capped at the hold), release
        the rest and refund per ``money.REFUND_POLICY``: every preemption here is the engine's, so one inside
        nominal quota is refunded in full and a borrowed one not (the simulated cluster never fails, so no
        platform-failure refunds arise)."""
        s = rec.spec
        d = s.department
        if d not in self.budgets:
            return
        used = money.attempt_gpu_seconds(total_gpus=s.total_gpus, ran_s=end - rec.start, max_runtime_s=s.max_runtime_s)
        charge = money.attempt_charge(rec.rate, gpu_seconds=used, hold=rec.hold)
        self.held_credits[d] -= rec.hold
        self.balance[d] -= charge
        self.spent[d]["charged"] += charge
        share, _ = money.refund_share("preempted" if preempted else "succeeded", borrowed=rec.borrowed)
        refund = money.refund_of(charge, share)
        if refund:
            self.balance[d] += refund
            self.spent[d]["refunded"] += refund
        rec.hold = 0

    def _start(self, rec: JobRecord, placement, borrowed: bool, cluster: str, t: float,
               price: int | None = None) -> None:
        s = rec.spec
        del self.pending[s.id]
        self.pend_gpus[s.department] -= s.total_gpus
        self.pend_count[s.department] -= 1
        for name in placement:
            self.node_free[name] -= s.gpus_per_pod
        rec.state = "running"
        rec.start = t
        rec.queued_s += t - rec.pending_since
        rec.borrowed = borrowed
        if rec.first_start is None:
            rec.first_start = t
        self._hold(rec, price)
        self.held[s.department] += s.total_gpus
        self.busy += s.total_gpus
        self.running[s.id] = RunningJob(
            id=s.id, department=s.department, flavor=s.flavor, tier=s.tier, placement=tuple(placement),
            gpus_per_pod=s.gpus_per_pod, started_at=t, max_runtime_s=s.max_runtime_s, borrowed=borrowed,
            urgency=s.urgency, user_tier=s.user_tier, submitted_at=s.submit, bid=s.bid, cluster=cluster,
            deadline=s.deadline, preemptible=tiers.preemptible(s.tier), checkpoint_interval_s=self._ckpt(s),
            array_id=self.array_ids.get(s.array),
        )
        self._push(t + max(s.duration_s - rec.progress_s, 0.0), FINISH, s.id, rec.attempt)

    def _release(self, rec: JobRecord, t: float) -> None:
        s = rec.spec
        rj = self.running.pop(s.id)
        for name in rj.placement:
            self.node_free[name] += s.gpus_per_pod
        self.held[s.department] -= s.total_gpus
        self.busy -= s.total_gpus
        rec.attained_gpu_s += (t - rec.start) * s.total_gpus
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

    def _evicted(self, rec: JobRecord, t: float) -> None:
        """End of grace: free the GPUs, keep checkpointed progress, requeue as a new attempt."""
        ran = t - rec.start
        ck = self._ckpt(rec.spec)
        ran_before = (rec.evict_at if rec.evict_at is not None else t) - rec.start
        # (the epsilon: an eviction decided exactly at a checkpoint, e.g. at min_runtime_s, keeps that checkpoint
        # despite float error in start + interval - start)
        kept = 0.0 if not ck else math.floor(ran_before / ck + 1e-9) * ck
        kept = min(kept, rec.spec.duration_s - rec.progress_s)
        rec.lost_gpu_s += max(ran - kept, 0.0) * rec.spec.total_gpus
        if ran > kept:
            rec.lost_runs.append((rec.start + kept, t))
        rec.progress_s += kept
        rec.last_run_s = ran_before
        self._settle(rec, rec.evict_at if rec.evict_at is not None else t, preempted=True)
        self._release(rec, t)
        self._enqueue(rec, t)

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
            recent_preemptions=sum(n for _, n in self.preempt_times), estimates=False, clusters=self.clusters,
            ended=MappingProxyType(dict(self.ended)) if self.after else MappingProxyType({}),
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
                if not tiers.preemptible(rj.tier):
                    self.realtime_preempted += 1
                n_pre += 1
                rec.preemptions += 1
                rec.state = "evicting"
                rec.evict_at = t
                self.preempt_times.append((t, 1))
                if grace > 0:
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
            if len(a.placement) != s.pods:
                self._bad("admission", f"job {s.id}: {len(a.placement)} placements for {s.pods} pods")
                continue
            need: dict[str, int] = {}
            for name in a.placement:
                need[name] = need.get(name, 0) + s.gpus_per_pod
            ok = all(
                self.node_flavor.get(n) == s.flavor and self.node_ok.get(n) and self.node_free[n] >= g
                for n, g in need.items()
            )
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
            self._start(rec, a.placement, a.borrowed, a.cluster, t, a.price)
            n_adm += 1
        return n_adm, n_pre

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
                elif kind == FINISH:
                    if rec.attempt == attempt and rec.state in ("running", "evicting"):
                        self._finish(rec, t)
                        real = True
                elif kind == EVICTED:
                    if rec.attempt == attempt and rec.state == "evicting":
                        self._evicted(rec, t)
                        real = True
                elif kind == TICK:
                    if self.pending_cycle == t:
                        self.pending_cycle = None
                    if self.next_tick == t:
                        self.next_tick = None
            if not self.pending:
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
        )


def simulate(*, scenario, jobs: list[JobSpec], policy, name: str | None = None,
             options: SimOptions | None = None) -> SimResult:
    """Run one replay. ``policy`` is a callable ``Snapshot -> CycleResult`` (may have ``bind(ctx)``)."""
    sim = Simulator(
        nodes=scenario.nodes(), quotas=scenario.quotas(), policy_obj=scenario.policy(), jobs=jobs, decide=policy,
        options=options or scenario.options, name=name or getattr(policy, "name", "policy"),
        budgets=scenario.budgets(), prices=scenario.prices, clusters=scenario.clusters,
    )
    return sim.run()
