"""Metrics of one replay (see docs/simulator.md for the definitions). Pure functions over a ``SimResult``."""

from __future__ import annotations

import heapq
import math
from collections import defaultdict
from dataclasses import dataclass, field

from engine import tiers
from engine.types import TIERS, URGENCIES

REALTIME_TARGET_S = 300.0
GPU_CLASSES = ("1", "2", "4", "8", ">8")


def gpu_class(gpus: int) -> str:
    """A job's GPU-count class: the smallest of 1, 2, 4, 8 that is >= its total GPUs, else ">8"."""
    for c in (1, 2, 4, 8):
        if gpus <= c:
            return str(c)
    return ">8"


def percentile(xs, p: float) -> float:
    """Linear interpolation between closest ranks (numpy's default); NaN for an empty list."""
    xs = sorted(xs)
    if not xs:
        return float("nan")
    if len(xs) == 1:
        return float(xs[0])
    pos = (len(xs) - 1) * p / 100.0
    lo = math.floor(pos)
    hi = min(lo + 1, len(xs) - 1)
    return xs[lo] + (xs[hi] - xs[lo]) * (pos - lo)


def mean(xs) -> float:
    xs = list(xs)
    return sum(xs) / len(xs) if xs else float("nan")


def jain(xs) -> float:
    """Jain's fairness index (sum x)^2 / (n * sum x^2): 1 = equal, 1/n = one takes all."""
    xs = list(xs)
    if not xs:
        return float("nan")
    s2 = sum(x * x for x in xs)
    return (sum(xs) ** 2) / (len(xs) * s2) if s2 > 0 else 1.0


def utilisation(busy_gpu_s: float, capacity: int, window: tuple[float, float]) -> float:
    span = window[1] - window[0]
    return busy_gpu_s / (capacity * span) if capacity > 0 and span > 0 else float("nan")


def lost_in_window(jobs, window: tuple[float, float]) -> float:
    """GPU-seconds of work lost to preemption that were executed inside the window (each preempted attempt's
    run after its last checkpoint, grace period included)."""
    w0, w1 = window
    total = 0.0
    for r in jobs:
        for t0, t1 in r.lost_runs:
            lo, hi = max(t0, w0), min(t1, w1)
            if hi > lo:
                total += (hi - lo) * r.spec.total_gpus
    return total


def srpt_fluid_bound(arrivals_work, capacity: int) -> float:
    """Mean completion time of preemptive SRPT on one fluid server of ``capacity`` GPUs processing each job's
    GPU-seconds: a lower bound on the mean JCT of any GPU schedule (jobs made perfectly divisible)."""
    jobs = sorted(arrivals_work)
    if not jobs or capacity <= 0:
        return float("nan")
    heap: list[tuple[float, int]] = []
    t = jobs[0][0]
    i = 0
    total = 0.0
    n = len(jobs)
    arr = {}
    k = 0
    while i < n or heap:
        if not heap:
            t = max(t, jobs[i][0])
        while i < n and jobs[i][0] <= t:
            heapq.heappush(heap, (jobs[i][1], k))
            arr[k] = jobs[i][0]
            k += 1
            i += 1
        rem, kid = heapq.heappop(heap)
        nxt = jobs[i][0] if i < n else math.inf
        done_at = t + rem / capacity
        if done_at <= nxt:
            t = done_at
            total += t - arr[kid]
        else:
            heapq.heappush(heap, (rem - (nxt - t) * capacity, kid))
            t = nxt
    return total / n


def _stats(xs) -> dict[str, float]:
    return {"n": len(xs), "avg": mean(xs), "p50": percentile(xs, 50), "p95": percentile(xs, 95),
            "p99": percentile(xs, 99)}


def compute(res, *, rho: float, alone_waits: dict[str, dict[int, float]] | None = None,
            keep_samples: bool = True, fcfs_waits: dict[int, float] | None = None,
            over_quota: dict[str, list[int]] | None = None) -> dict:
    """All metrics of one replay as a plain dict (JSON-able)."""
    jobs = res.jobs
    started = [r for r in jobs if r.first_start is not None]
    finished = [r for r in jobs if r.finish is not None]
    wait_of = {r.spec.id: r.first_start - r.spec.submit for r in started}
    groups = _wait_groups(started, wait_of)
    out = {
        "policy": res.policy,
        "jobs": len(jobs),
        "finished": len(finished),
        "never_started": len(jobs) - len(started),
        **_unserved(jobs),
        **_utilisation_figures(res, rho),
        **_wait_figures(jobs, finished, wait_of, groups),
        **_completion_figures(res, finished),
        **_run_figures(res),
        **topology_figures(jobs),
    }
    if alone_waits is not None:
        out["sharing"] = sharing_safety(wait_of, alone_waits, fcfs=fcfs_waits, over_quota=over_quota)
    if keep_samples:
        by_tier = groups.tier
        out["samples"] = {t: sorted(by_tier[t]) for t in TIERS if by_tier.get(t)}
    return out


def _unserved(jobs) -> dict:
    """The jobs a replay left without a wait or a completion time, counted by the groups the report's target
    lines average: never started (overall, per tier, per GPU-count class, high and critical non-realtime work)
    and never finished. The averages leave them out (they have no figure to average), so the report scores a
    line as missed whenever a job it covers is in these counts."""
    unstarted = [r for r in jobs if r.first_start is None]
    tier: dict[str, int] = defaultdict(int)
    gpus: dict[str, int] = defaultdict(int)
    for r in unstarted:
        tier[r.spec.tier] += 1
        gpus[gpu_class(r.spec.total_gpus)] += 1
    return {
        "unstarted_tier": {t: tier[t] for t in TIERS if tier.get(t)},
        "unstarted_gpus": {c: gpus[c] for c in GPU_CLASSES if gpus.get(c)},
        "unstarted_urgent_nonrt": sum(
            1 for r in unstarted if r.spec.tier != "realtime" and r.spec.urgency in ("high", "critical")
        ),
        "unfinished": sum(1 for r in jobs if r.finish is None),
    }


@dataclass
class _Waits:
    """First waits of the started jobs, grouped."""

    tier: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    dept: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    urgency: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    gpus: dict[str, list[float]] = field(default_factory=lambda: defaultdict(list))
    urgent: list[float] = field(default_factory=list)  # high and critical jobs outside the realtime tier


def _wait_groups(started, wait_of: dict[int, float]) -> _Waits:
    groups = _Waits()
    for r in started:
        w = wait_of[r.spec.id]
        groups.tier[r.spec.tier].append(w)
        groups.dept[r.spec.department].append(w)
        groups.urgency[r.spec.urgency].append(w)
        groups.gpus[gpu_class(r.spec.total_gpus)].append(w)
        if not tiers.is_realtime(r.spec.tier) and r.spec.urgency in ("high", "critical"):
            groups.urgent.append(w)
    return groups


def topology_figures(jobs) -> dict:
    """For a scenario with topology levels: its gangs (jobs of several GPU pods that started), the share placed
    compactly (no start spread over a level the scenario slows down) and their completion times, compact and
    spread apart. Empty without topology (no gang start was looked at)."""
    gangs = [r for r in jobs if r.gang_starts]
    if not gangs:
        return {}
    compact = [r for r in gangs if not r.spread_starts]
    spread = [r for r in gangs if r.spread_starts]

    def jct(rs):
        return [r.finish - r.spec.submit for r in rs if r.finish is not None]

    every = jct(gangs)
    return {"gangs": len(gangs), "gangs_compact_share": len(compact) / len(gangs),
            "gang_jct_avg": mean(every), "gang_jct_p50": percentile(every, 50), "gang_jct_p95": percentile(every, 95),
            "gang_jct_compact_avg": mean(jct(compact)), "gang_jct_spread_avg": mean(jct(spread))}


def _utilisation_figures(res, rho: float) -> dict:
    util = utilisation(res.busy_gpu_s, res.capacity, res.window)
    # Allocated GPU-time counts work that a preemption later threw away; useful utilisation does not.
    useful = utilisation(res.busy_gpu_s - lost_in_window(res.jobs, res.window), res.capacity, res.window)
    return {
        "rho": rho,
        "utilisation": util,
        "util_over_min_rho": util / min(1.0, rho) if rho > 0 else float("nan"),
        "useful_utilisation": useful,
    }


def _wait_figures(jobs, finished, wait_of: dict[int, float], groups: _Waits) -> dict:
    by_tier, by_dept, by_urg, by_gpus = groups.tier, groups.dept, groups.urgency, groups.gpus
    rt = [r for r in jobs if tiers.is_realtime(r.spec.tier)]
    rt_ok = sum(1 for r in rt if r.first_start is not None and r.first_start - r.spec.submit <= REALTIME_TARGET_S)
    dl = [r for r in jobs if r.spec.deadline is not None]
    dl_ok = sum(1 for r in dl if r.finish is not None and r.finish <= r.spec.deadline + 1e-9)
    return {
        "wait": _stats(list(wait_of.values())),
        "wait_tier": {t: _stats(by_tier[t]) for t in TIERS if by_tier.get(t)},
        "wait_dept": {d: _stats(v) for d, v in sorted(by_dept.items())},
        "wait_urgency": {u: _stats(by_urg[u]) for u in URGENCIES if by_urg.get(u)},
        "wait_gpus": {c: _stats(by_gpus[c]) for c in GPU_CLASSES if by_gpus.get(c)},
        "wait_urgent_nonrt": _stats(groups.urgent),
        # total time queued over all attempts (first wait + every wait after a preemption), finished jobs
        "queued": _stats([r.queued_s for r in finished]),
        "first_wait_finished": _stats([wait_of[r.spec.id] for r in finished]),
        "requeued_jobs": sum(1 for r in jobs if r.attempt > 1),
        "realtime_jobs": len(rt),
        "realtime_within_5min": (rt_ok / len(rt)) if rt else float("nan"),
        "deadline_jobs": len(dl),
        "deadline_attainment": (dl_ok / len(dl)) if dl else float("nan"),
    }


def _completion_figures(res, finished) -> dict:
    """Job completion times and how far they are above the two lower bounds."""
    jct = [r.finish - r.spec.submit for r in finished]
    dur_lb = mean(r.spec.duration_s for r in finished)
    srpt_lb = srpt_fluid_bound([(r.spec.submit, r.spec.total_gpus * r.spec.duration_s) for r in finished], res.capacity)
    lb = max(dur_lb, srpt_lb) if finished else float("nan")
    return {
        "jct_avg": mean(jct),
        "jct_p95": percentile(jct, 95),
        "jct_lb_duration": dur_lb,
        "jct_lb_srpt_fluid": srpt_lb,
        "jct_over_lb": mean(jct) / lb if finished and lb > 0 else float("nan"),
    }


def _run_figures(res) -> dict:
    """Fairness, preemptions, the engine's cycles and the money of one replay."""
    jobs = res.jobs
    busy_total = sum(r.attained_gpu_s for r in jobs)
    lost = sum(r.lost_gpu_s for r in jobs)
    lost_preempt = lost - sum(r.failure_lost_gpu_s for r in jobs)
    ct = res.cycle_times
    return {
        "jain": res.jain_time_avg if res.jain_time_avg is not None else float("nan"),
        "dept_share_ratio": {d: v["ratio_avg"] for d, v in sorted(res.dept_share.items())},
        "preemptions": res.preemption_events,
        "preemptions_per_job": res.preemption_events / len(jobs) if jobs else 0.0,
        "gpu_hours_lost": lost / 3600.0,
        "lost_pct_of_busy": 100.0 * lost / busy_total if busy_total > 0 else 0.0,
        # of which preemption lost (the rest: node failures), and how many victims were told and answered
        "gpu_hours_lost_preemption": lost_preempt / 3600.0,
        "notices": sum(r.notices for r in jobs),
        "notices_answered": sum(r.answered for r in jobs),
        "realtime_preempted": res.realtime_preempted,
        "cycle_ms_avg": 1000 * mean(ct) if ct else float("nan"),
        "cycle_ms_p95": 1000 * percentile(ct, 95) if ct else float("nan"),
        "cycle_ms_max": 1000 * max(ct) if ct else float("nan"),
        "cycles": res.cycles,
        "invalid": res.invalid,
        "wall_s": res.wall_s,
        "sim_end_s": res.end_time,
        "spend": res.spend,
        "budget_blocked_jobs": sum(1 for r in jobs if r.budget_blocked),
    }


def sharing_safety(wait_of: dict[int, float], alone: dict[str, dict[int, float]], slack_s: float = 60.0, *,
                   fcfs: dict[int, float] | None = None, over_quota: dict[str, list[int]] | None = None) -> dict:
    """Per department: wait in the shared cluster vs alone on its nominal quota, over the jobs that could run
    alone (and started in both). ``safe`` when the shared average <= the alone average + ``slack_s``;
    ``safe_worst`` when the longest shared wait <= the longest alone wait + ``slack_s``.

    A job larger than its department's private cluster can never start alone, so it has no alone wait; such
    jobs (``over_quota``: dept -> job ids) are compared with their wait under FCFS on the shared cluster
    (``fcfs``: job id -> wait) instead, and reported separately (a job that never started is left out)."""
    per = {}
    for d, aw in sorted(alone.items()):
        ids = sorted(i for i in aw if i in wait_of)
        if not ids:
            continue
        sw = [wait_of[i] for i in ids]
        al = [aw[i] for i in ids]
        s, a = mean(sw), mean(al)
        per[d] = {"n": len(ids), "shared_avg": s, "alone_avg": a, "shared_max": max(sw), "alone_max": max(al),
                  "safe": s <= a + slack_s, "safe_worst": max(sw) <= max(al) + slack_s}
    out = {"departments": per, "safe": sum(1 for v in per.values() if v["safe"]),
           "safe_worst": sum(1 for v in per.values() if v["safe_worst"]), "of": len(per)}
    if over_quota is not None and fcfs is not None:
        big = {}
        all_s, all_f = [], []
        for d, ids in sorted(over_quota.items()):
            both = [i for i in sorted(ids) if i in wait_of and i in fcfs]
            if not both:
                continue
            sw = [wait_of[i] for i in both]
            fw = [fcfs[i] for i in both]
            all_s += sw
            all_f += fw
            big[d] = {"n": len(both), "shared_avg": mean(sw), "fcfs_avg": mean(fw), "shared_max": max(sw),
                      "fcfs_max": max(fw)}
        out["over_quota"] = {
            "departments": big, "n": len(all_s), "shared_avg": mean(all_s), "fcfs_avg": mean(all_f),
            "shared_max": max(all_s) if all_s else float("nan"), "fcfs_max": max(all_f) if all_f else float("nan"),
            "jobs": sum(len(v) for v in over_quota.values()),
        }
    return out
