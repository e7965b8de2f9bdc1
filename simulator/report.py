"""The policy comparison: run every (scenario, load, seed, policy), aggregate over seeds, write a markdown report
and PNG plots (utilisation vs load, wait CDFs per tier, per-department fairness)."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import re
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from engine.types import TIERS

from . import policies
from .metrics import GPU_CLASSES
from .plots import plots
from .runner import run_one

LOADS = (0.5, 0.7, 0.9, 1.1)
SCENARIO_DIR = Path(__file__).resolve().parents[2] / "scenarios"


def _task(args):
    path, pol, load, seed, trace_dir, limit = args
    t0 = time.perf_counter()
    try:
        m = run_one(path, pol, load=load, seed=seed, trace_dir=trace_dir, limit=limit)
    except FileNotFoundError as exc:
        return {"policy": pol, "load": load, "seed": seed, "error": str(exc), "scenario": Path(path).stem}
    m["task_s"] = time.perf_counter() - t0
    return m


_CODE = Path(__file__).resolve().parents[1]


@functools.lru_cache(maxsize=16)
def _fingerprint(path: str) -> str:
    """The scenario file and the engine/simulator source: a recorded replay is reused only while both match."""
    h = hashlib.sha256(Path(path).read_bytes())
    for src in sorted([*(_CODE / "core").rglob("*.py"), *(_CODE / "sim").rglob("*.py")]):
        h.update(src.read_bytes())
    return h.hexdigest()[:16]


def _key(path, pol, load, seed, limit) -> str:
    return json.dumps([Path(path).stem, pol, load, seed, limit, _fingerprint(path)])


def run_grid(scenarios, *, policies_=policies.DEFAULT, loads=LOADS, seeds=(1, 2, 3), trace_dir=None,
             limit=None, workers=None, log=print, checkpoint: Path | None = None):
    """Every (scenario, load, seed, policy) replay. With ``checkpoint`` (a JSON-lines file) each finished replay
    is appended as it completes and replays already in the file are not run again: a grid that takes an hour
    survives an interruption and is continued by running the same command again."""
    tasks = [(str(s), p, ld, sd, trace_dir, limit) for s in scenarios for ld in loads for sd in seeds
             for p in policies_]
    done: dict[str, dict] = {}
    if checkpoint is not None and checkpoint.exists():
        for line in checkpoint.read_text().splitlines():
            try:
                m = json.loads(line)
            except ValueError:
                continue  # a line cut short by the interruption
            done[m.get("_key", "")] = m
    out = []
    todo = []
    for t in tasks:
        m = done.get(_key(t[0], t[1], t[2], t[3], t[5]))
        if m is not None and "error" not in m:
            out.append(m)
        else:
            todo.append(t)
    if out:
        log(f"  {len(out)} replay(s) taken from {checkpoint}, {len(todo)} to run")
    slow_first = {"portal": 0, "tiresias": 1}  # (by policy kind)  # start the long replays first so the pool finishes together
    todo.sort(key=lambda t: slow_first.get(policies.kind(t[1]), 2))
    workers = workers or min(2, os.cpu_count() or 1)

    def finished(t, m):
        m["_key"] = _key(t[0], t[1], t[2], t[3], t[5])
        out.append(m)
        if checkpoint is not None:
            checkpoint.parent.mkdir(parents=True, exist_ok=True)
            with checkpoint.open("a") as fh:
                fh.write(json.dumps(m, default=str) + "\n")
        log(_line(m))

    if workers <= 1:
        for t in todo:
            finished(t, _task(t))
    else:
        with ProcessPoolExecutor(max_workers=workers) as ex:
            futures = {ex.submit(_task, t): t for t in todo}
            for fut in as_completed(futures):
                finished(futures[fut], fut.result())
    order = {_key(t[0], t[1], t[2], t[3], t[5]): i for i, t in enumerate(tasks)}
    out.sort(key=lambda m: order.get(m["_key"], len(order)))
    return out


def _line(m):
    if "error" in m:
        return f"  {m['scenario']} {m['policy']} load={m['load']} seed={m['seed']}: SKIPPED ({m['error']})"
    return (f"  {m['scenario']:10s} load={m['load']} seed={m['seed']} {m['policy']:20s} util={m['utilisation']:.3f} "
            f"wait={m['wait']['avg']:.0f}s jain={m['jain']:.3f} wall={m['wall_s']:.1f}s")


def _avg(vals):
    vals = [v for v in vals if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return sum(vals) / len(vals) if vals else float("nan")


def aggregate(results):
    """(scenario, load, policy) -> seed-averaged headline figures."""
    groups = defaultdict(list)
    for m in results:
        if "error" not in m:
            groups[(m["scenario"], m["load"], m["policy"])].append(m)
    agg = {}
    for key, ms in groups.items():
        a = {"seeds": len(ms), "rho": _avg(m["rho"] for m in ms)}
        for f in ("utilisation", "useful_utilisation", "util_over_min_rho", "realtime_within_5min", "deadline_attainment", "jct_avg",
                  "jct_p95", "jct_over_lb", "jain", "preemptions_per_job", "gpu_hours_lost", "lost_pct_of_busy",
                  "cycle_ms_avg", "cycle_ms_p95", "wall_s", "never_started", "realtime_preempted"):
            a[f] = _avg(m[f] for m in ms)
        a["wait_avg"] = _avg(m["wait"]["avg"] for m in ms)
        for t in TIERS:
            for s in ("avg", "p50", "p95", "p99"):
                a[f"wait_{t}_{s}"] = _avg(m["wait_tier"].get(t, {}).get(s) for m in ms)
        a["wait_critical_avg"] = _avg(m["wait_urgency"].get("critical", {}).get("avg") for m in ms)
        a["wait_urgent_nonrt_avg"] = _avg(m.get("wait_urgent_nonrt", {}).get("avg") for m in ms)
        a["wait_gpus"] = {
            c: {s: _avg(m.get("wait_gpus", {}).get(c, {}).get(s) for m in ms) for s in ("n", "avg", "p50", "p95", "p99")}
            for c in GPU_CLASSES if any(c in m.get("wait_gpus", {}) for m in ms)
        }
        for f in ("queued", "first_wait_finished"):
            for s in ("avg", "p95"):
                a[f"{f}_{s}"] = _avg(m.get(f, {}).get(s) for m in ms)
        a["requeued_jobs"] = _avg(m.get("requeued_jobs") for m in ms)
        # jobs left without a wait or a completion time, per seed (NaN for replays recorded before they were counted)
        a["unstarted_tier"] = {t: _avg(m["unstarted_tier"].get(t, 0) for m in ms if "unstarted_tier" in m)
                               for t in TIERS}
        a["unstarted_gpus"] = {c: _avg(m["unstarted_gpus"].get(c, 0) for m in ms if "unstarted_gpus" in m)
                               for c in GPU_CLASSES}
        a["unstarted_urgent_nonrt"] = _avg(m.get("unstarted_urgent_nonrt") for m in ms)
        a["unfinished"] = _avg(m.get("unfinished") for m in ms)
        sh = [m["sharing"] for m in ms if "sharing" in m]
        a["safe"] = _avg(x["safe"] / max(x["of"], 1) for x in sh)
        a["safe_worst"] = _avg(x.get("safe_worst", 0) / max(x["of"], 1) for x in sh)
        a["sharing_shared_max"] = _avg(max((v["shared_max"] for v in x["departments"].values()), default=None)
                                       for x in sh)
        a["sharing_alone_max"] = _avg(max((v["alone_max"] for v in x["departments"].values()), default=None)
                                      for x in sh)
        oq = [x["over_quota"] for x in sh if "over_quota" in x]
        a["over_quota"] = {f: _avg(x.get(f) for x in oq) for f in ("jobs", "n", "shared_avg", "fcfs_avg",
                                                                   "shared_max", "fcfs_max")} if oq else None
        spend_depts = sorted({d for m in ms for d in (m.get("spend") or {})})
        a["spend"] = {d: _avg(m.get("spend", {}).get(d, {}).get("spent") for m in ms) for d in spend_depts}
        a["budget"] = {d: _avg(m.get("spend", {}).get(d, {}).get("budget") for m in ms) for d in spend_depts}
        a["budget_blocked_jobs"] = _avg(m.get("budget_blocked_jobs") for m in ms)
        a["min_cycle_interval_s"] = ms[0].get("min_cycle_interval_s", 0.0)
        a["policy_kind"] = ms[0].get("policy_kind", policies.kind(key[2]))
        depts = sorted({d for m in ms for d in m["wait_dept"]})
        a["wait_dept"] = {d: _avg(m["wait_dept"].get(d, {}).get("avg") for m in ms) for d in depts}
        a["dept_share_ratio"] = {d: _avg(m["dept_share_ratio"].get(d) for m in ms) for d in depts}
        a["invalid"] = sum(sum(m["invalid"].values()) for m in ms)
        a["engine"] = ms[0].get("engine")
        agg[key] = a
    return agg


def _f(x, nd=0, pct=False):
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "–"
    if pct:
        return f"{100 * x:.{nd}f}%"
    return f"{x:,.{nd}f}"


def _h(seconds):
    if seconds is None or (isinstance(seconds, float) and math.isnan(seconds)):
        return "–"
    if seconds < 120:
        return f"{seconds:.0f}s"
    if seconds < 7200:
        return f"{seconds / 60:.0f}m"
    return f"{seconds / 3600:.1f}h"


def markdown(results, agg, *, out: Path, title="Policy comparison", meta=None) -> str:
    lines = [f"# {title}", ""]
    if meta:
        lines += [f"- {k}: {v}" for k, v in meta.items()] + [""]
    present = [p for p in policies.REGISTRY if any(k[2] == p for k in agg)] or list(policies.DEFAULT)
    lines += ["Policies:", ""] + [f"- `{p}`: {policies.DESCRIPTIONS[p]}" for p in present] + [""]
    scen_loads = sorted({(k[0], k[1]) for k in agg})
    for scen, load in scen_loads:
        rows = [(k[2], v) for k, v in agg.items() if k[0] == scen and k[1] == load]
        order = {p: i for i, p in enumerate(policies.REGISTRY)}
        rows.sort(key=lambda r: order.get(r[0], 99))
        any_v = rows[0][1]
        lines += [f"## {scen} at target load {load} (offered rho = {any_v['rho']:.2f}, {any_v['seeds']} seed(s))", ""]
        lines += ["| policy | util | useful util | util/min(1,rho) | wait avg | realtime p95 | RT <5min | critical avg | "
                  "elastic avg | backfill avg | JCT avg | JCT/LB | deadlines | Jain | safe depts | preempt/job | "
                  "lost GPU-h (%) | never started | cycle ms avg/p95 |",
                  "|" + "---|" * 19]
        for p, a in rows:
            lines.append(
                f"| {p} | {_f(a['utilisation'], 3)} | {_f(a.get('useful_utilisation'), 3)} | "
                f"{_f(a['util_over_min_rho'], 3)} | {_h(a['wait_avg'])} | "
                f"{_h(a['wait_realtime_p95'])} | {_f(a['realtime_within_5min'], 1, True)} | "
                f"{_h(a['wait_critical_avg'])} | {_h(a['wait_elastic_avg'])} | {_h(a['wait_backfill_avg'])} | "
                f"{_h(a['jct_avg'])} | {_f(a['jct_over_lb'], 2)} | {_f(a['deadline_attainment'], 1, True)} | "
                f"{_f(a['jain'], 3)} | {_f(a['safe'], 0, True)} | {_f(a['preemptions_per_job'], 3)} | "
                f"{_f(a['gpu_hours_lost'], 0)} ({_f(a['lost_pct_of_busy'], 1)}%) | {_f(a['never_started'], 0)} | "
                f"{_f(a['cycle_ms_avg'], 2)}/{_f(a['cycle_ms_p95'], 2)} |"
            )
        lines.append("")
        depts = sorted({d for _, a in rows for d in a["wait_dept"]})
        if depts:
            lines += ["Average wait per department:", "",
                      "| policy | " + " | ".join(depts) + " |", "|" + "---|" * (len(depts) + 1)]
            for p, a in rows:
                lines.append(f"| {p} | " + " | ".join(_h(a["wait_dept"].get(d)) for d in depts) + " |")
            lines.append("")
        lines += _gpu_class_table(rows) + _queued_table(rows) + _sharing_table(rows) + _spend_table(rows)
        lines += _losses(rows)
    lines += _targets_section(agg, results)
    lines += ["## Plots", ""]
    for png in sorted(out.glob("*.png")):
        lines.append(f"![{png.stem}]({png.name})")
    lines.append("")
    return "\n".join(lines)


def _gpu_class_table(rows):
    classes = [c for c in GPU_CLASSES if any(c in a["wait_gpus"] for _, a in rows)]
    if not classes:
        return []
    out = ["First wait by GPU-count class (a job's class is the smallest of 1, 2, 4, 8 GPUs that holds its total "
           "GPUs, else >8), avg / p95 (jobs per seed):", "",
           "| policy | " + " | ".join(f"{c} GPU" for c in classes) + " |", "|" + "---|" * (len(classes) + 1)]
    for p, a in rows:
        cells = []
        for c in classes:
            w = a["wait_gpus"].get(c)
            cells.append("–" if not w else f"{_h(w['avg'])} / {_h(w['p95'])} ({_f(w['n'], 0)})")
        out.append(f"| {p} | " + " | ".join(cells) + " |")
    return out + [""]


def _queued_table(rows):
    out = ["Finished jobs: first wait vs total time queued over all attempts (a preempted job queues again):", "",
           "| policy | first wait avg | first wait p95 | queued avg | queued p95 | requeued jobs |",
           "|---|---|---|---|---|---|"]
    for p, a in rows:
        out.append(f"| {p} | {_h(a['first_wait_finished_avg'])} | {_h(a['first_wait_finished_p95'])} | "
                   f"{_h(a['queued_avg'])} | {_h(a['queued_p95'])} | {_f(a['requeued_jobs'], 0)} |")
    return out + [""]


def _sharing_table(rows):
    if not any(not math.isnan(a["safe"]) for _, a in rows):
        return []
    big = any(a["over_quota"] for _, a in rows)
    out = ["Sharing safety: departments doing at least as well as alone on their nominal quota (average wait, and "
           "worst wait, within 60 s), the longest wait of any department shared vs alone"
           + ("; jobs larger than their department's quota can never start alone, so they are compared with "
              "their wait under FCFS on the shared cluster" if big else "") + ":", ""]
    head = "| policy | safe (avg) | safe (worst) | longest wait shared / alone |"
    if big:
        head += " over-quota jobs | their avg wait / FCFS | their max wait / FCFS |"
    out += [head, "|" + "---|" * (head.count("|") - 1)]
    for p, a in rows:
        line = (f"| {p} | {_f(a['safe'], 0, True)} | {_f(a['safe_worst'], 0, True)} | "
                f"{_h(a['sharing_shared_max'])} / {_h(a['sharing_alone_max'])} |")
        if big:
            o = a["over_quota"] or {}
            line += (f" {_f(o.get('jobs'), 0)} | {_h(o.get('shared_avg'))} / {_h(o.get('fcfs_avg'))} | "
                     f"{_h(o.get('shared_max'))} / {_h(o.get('fcfs_max'))} |")
        out.append(line)
    return out + [""]


def _spend_table(rows):
    depts = sorted({d for _, a in rows for d in a["spend"]})
    if not depts:
        return []
    budget = next((a["budget"] for _, a in rows if a["budget"]), {})
    out = ["Credits spent per department (milli-credits, net of refunds; budget per refill period in brackets; "
           "baselines ignore credits and pay base prices only):", "",
           "| policy | " + " | ".join(f"{d} ({_f(budget.get(d), 0)})" for d in depts) + " | jobs that waited for "
           "credits |", "|" + "---|" * (len(depts) + 2)]
    for p, a in rows:
        out.append(f"| {p} | " + " | ".join(_f(a["spend"].get(d), 0) for d in depts)
                   + f" | {_f(a['budget_blocked_jobs'], 0)} |")
    return out + [""]


def _portal_name(names) -> str | None:
    return next((n for n in names if policies.kind(n) == "portal"), None)


def _registry_order(name: str) -> tuple[int, str]:
    """Policies in the registry's order (baselines first, the portal last), unknown names after them."""
    order = list(policies.REGISTRY)
    return (order.index(name) if name in order else len(order), name)


def _nan(x) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _left(p: dict, field: str, sub: str | None = None) -> float:
    """How many jobs (per seed) a policy left without a figure in ``field`` (``unstarted_*``, ``unfinished``):
    a target line about those jobs is missed whatever the average of the others. 0 when none, or when the
    replays predate the count."""
    x = p.get(field)
    if sub is not None:
        x = (x or {}).get(sub)
    return 0.0 if _nan(x) else x


def _count(x: float) -> str:
    """A count of jobs averaged over seeds: whole when it is, else with one decimal."""
    return f"{x:,.0f}" if x == int(x) else f"{x:,.1f}"


class _Judge:
    """The target lines of one policy at one (scenario, load), against the baselines replayed in the run."""

    def __init__(self, refs: dict):
        self.refs = refs
        self.lines: list[tuple[str, str, str]] = []

    def add(self, label, ok, figures):
        self.lines.append(("n/a" if ok is None else ("met" if ok else "missed"), label, figures))

    def need(self, *names):
        miss = [n for n in names if n not in self.refs]
        return f"no {', '.join(miss)} replay in this run" if miss else None


def targets(agg, subject: str | None = None) -> dict[tuple[str, float], list[tuple[str, str, str]]]:
    """(scenario, load) -> [(status, target, figures)], status "met", "missed" or "n/a", for the portal's
    policy (whatever its name in this run), or for the policy named ``subject``, against the baselines
    replayed in the same run. A baseline judged against itself meets its own line (equal is enough)."""
    out = {}
    for scen, load in sorted({(k[0], k[1]) for k in agg}):
        a = {k[2]: v for k, v in agg.items() if k[0] == scen and k[1] == load}
        name = subject if subject is not None else _portal_name(sorted(a, key=_registry_order))
        if name is None or name not in a:
            continue
        p = a[name]
        j = _Judge({r: a[r] for r in ("fcfs", "slurm-easy", "tiresias", "volcano-drf", "srtf-oracle") if r in a})
        _utilisation_targets(j, p, load)
        _realtime_targets(j, p)
        _large_job_targets(j, p, a)
        _urgency_fairness_cost_targets(j, p)
        prefix = subject is None and name != "portal"
        out[(scen, load)] = [(st, f"`{name}`: {lbl}" if prefix else lbl, fig) for st, lbl, fig in j.lines]
    return out


def _utilisation_targets(j: _Judge, p: dict, load: float) -> None:
    """Utilisation against the best of FCFS and Slurm-EASY (also net of lost work), and against the load."""
    add, need, refs = j.add, j.need, j.refs
    why = need("fcfs", "slurm-easy")
    if why:
        add("utilisation >= max(FCFS, Slurm-EASY)", None, why)
    else:
        best = max(refs["fcfs"]["utilisation"], refs["slurm-easy"]["utilisation"])
        add("utilisation >= max(FCFS, Slurm-EASY)", p["utilisation"] >= best,
            f"{p['utilisation']:.3f} vs FCFS {refs['fcfs']['utilisation']:.3f}, "
            f"Slurm-EASY {refs['slurm-easy']['utilisation']:.3f}")
        # The same comparison net of the work preemption threw away: allocated GPU-time counts it, a lab
        # gets nothing from it. Baselines that never preempt lose nothing, so theirs is the same figure.
        useful = {n: r.get("useful_utilisation") for n, r in (("portal", p), *refs.items())}
        if any(_nan(useful[n]) for n in ("portal", "fcfs", "slurm-easy")):
            add("useful utilisation (net of work lost to preemption) >= max(FCFS, Slurm-EASY)", None,
                "no useful utilisation recorded for this run")
        else:
            best_useful = max(useful["fcfs"], useful["slurm-easy"])
            add("useful utilisation (net of work lost to preemption) >= max(FCFS, Slurm-EASY)",
                useful["portal"] >= best_useful,
                f"{useful['portal']:.3f} vs FCFS {useful['fcfs']:.3f}, Slurm-EASY {useful['slurm-easy']:.3f}")
    if any(abs(load - x) < 1e-9 for x in (0.9, 1.1)):
        goal = 0.95 * min(1.0, p["rho"])
        add("utilisation >= 0.95 x min(1, rho)", p["utilisation"] >= goal,
            f"{p['utilisation']:.3f} vs {goal:.3f} (rho {p['rho']:.2f})")


def _realtime_targets(j: _Judge, p: dict) -> None:
    """Realtime jobs start within 5 minutes, and their p95 wait."""
    add = j.add
    rt = p["realtime_within_5min"]
    add(">= 99% of realtime jobs started within 5 min", None if _nan(rt) else rt >= 0.99,
        "no realtime jobs" if _nan(rt) else _f(rt, 1, True))
    p95 = p["wait_realtime_p95"]
    left = _left(p, "unstarted_tier", "realtime")
    if left:
        add("realtime p95 wait < 60 s", False, f"{_count(left)} realtime job(s) never started (the started: {_h(p95)})")
    elif p["min_cycle_interval_s"] >= 60:
        add("realtime p95 wait < 60 s", None, f"{_h(p95)}; cycles here are at least "
            f"{p['min_cycle_interval_s']:.0f} s apart, so a realtime job can wait a whole interval before "
            "it is even considered")
    else:
        add("realtime p95 wait < 60 s", None if _nan(p95) else p95 < 60, _h(p95))


def _large_job_targets(j: _Judge, p: dict, a: dict) -> None:
    """The largest GPU-count class's wait, against Tiresias and FCFS."""
    add, need, refs = j.add, j.need, j.refs
    # (the largest class of the replay's jobs, started by any policy or not: a class the policy never started is
    # a miss, not skipped, and so is one of whose jobs it left some unstarted)
    classes = [c for c in GPU_CLASSES
               if any(c in v["wait_gpus"] or _left(v, "unstarted_gpus", c) for v in a.values())]
    why = need("tiresias", "fcfs")
    if not classes or why:
        add("largest GPU class's average wait <= 2x Tiresias's and <= FCFS's", None, why or "no jobs")
    elif classes[-1] not in p["wait_gpus"]:
        add(f"largest GPU class ({classes[-1]} GPU) average wait <= 2x Tiresias's and <= FCFS's", False,
            "the portal's policy started none of them")
    elif _left(p, "unstarted_gpus", classes[-1]):
        c = classes[-1]
        add(f"largest GPU class ({c} GPU) average wait <= 2x Tiresias's and <= FCFS's", False,
            f"{_count(_left(p, 'unstarted_gpus', c))} of them never started (the started: "
            f"{_h(p['wait_gpus'][c]['avg'])})")
    else:
        c = classes[-1]
        pw = p["wait_gpus"][c]["avg"]
        tw = refs["tiresias"]["wait_gpus"].get(c, {}).get("avg")
        fw = refs["fcfs"]["wait_gpus"].get(c, {}).get("avg")
        ok = None if _nan(pw) or _nan(tw) or _nan(fw) else (pw <= 2 * tw and pw <= fw)
        add(f"largest GPU class ({c} GPU) average wait <= 2x Tiresias's and <= FCFS's", ok,
            f"{_h(pw)} vs Tiresias {_h(tw)}, FCFS {_h(fw)}")


def _urgency_fairness_cost_targets(j: _Judge, p: dict) -> None:
    """Urgent work against FCFS, fairness against Volcano-DRF, work lost to preemption, JCT against SRTF."""
    add, need, refs = j.add, j.need, j.refs
    # urgent work
    why = need("fcfs")
    u, fu = p["wait_urgent_nonrt_avg"], refs.get("fcfs", {}).get("wait_urgent_nonrt_avg")
    left = _left(p, "unstarted_urgent_nonrt")
    if left and not why:
        add("average first wait of high + critical non-realtime jobs <= 0.5x FCFS's", False,
            f"{_count(left)} of them never started (the started: {_h(u)} vs FCFS {_h(fu)})")
    elif why or _nan(u) or _nan(fu) or not fu:
        add("average first wait of high + critical non-realtime jobs <= 0.5x FCFS's", None, why or "no such jobs")
    else:
        r = u / fu
        add("average first wait of high + critical non-realtime jobs <= 0.5x FCFS's", r <= 0.5,
            f"{_h(u)} vs FCFS {_h(fu)} = {r:.2f}x (goal 0.2x: {'met' if r <= 0.2 else 'missed'})")
    # fairness
    why = need("volcano-drf")
    if why:
        add("Jain index >= Volcano-DRF's", None, why)
    else:
        add("Jain index >= Volcano-DRF's", p["jain"] >= refs["volcano-drf"]["jain"] - 1e-12,
            f"{p['jain']:.3f} vs {refs['volcano-drf']['jain']:.3f}")
    add("GPU-hours lost to preemption <= 3%", p["lost_pct_of_busy"] <= 3.0, f"{p['lost_pct_of_busy']:.1f}%")
    why = need("srtf-oracle")
    left = _left(p, "unfinished")
    if why:
        add("average JCT <= 1.3x the SRTF oracle's", None, why)
    elif left:
        add("average JCT <= 1.3x the SRTF oracle's", False,
            f"{_count(left)} job(s) never finished (the finished: {_h(p['jct_avg'])} vs "
            f"{_h(refs['srtf-oracle']['jct_avg'])})")
    else:
        r = p["jct_avg"] / refs["srtf-oracle"]["jct_avg"]
        add("average JCT <= 1.3x the SRTF oracle's", r <= 1.3,
            f"{_h(p['jct_avg'])} vs {_h(refs['srtf-oracle']['jct_avg'])} = {r:.2f}x")


def targets_by_policy(agg) -> dict[tuple[str, float], dict[str, dict[str, str]]]:
    """(scenario, load) -> {policy: {target: status}}: every policy of the run judged by the same lines as the
    portal. It shows whether any policy meets every target at once, and which targets only a policy that fails
    others meets (each baseline is strong on the axis it was built for)."""
    out: dict[tuple[str, float], dict[str, dict[str, str]]] = defaultdict(dict)
    for name in sorted({k[2] for k in agg}, key=_registry_order):
        for key, lines in targets(agg, subject=name).items():
            out[key][name] = {_target_key(label): st for st, label, _ in lines}
    return dict(out)


_MARK = {"met": "met", "missed": "**missed**", "n/a": "n/a"}


def _matrix(by_policy: dict[str, dict[str, str]]) -> list[str]:
    """One scenario and load's targets (rows) by policy (columns), with a count of the targets met."""
    names = list(by_policy)
    labels: list[str] = []
    for row in by_policy.values():
        labels += [lbl for lbl in row if lbl not in labels]
    out = ["| target | " + " | ".join(f"`{n}`" for n in names) + " |", "|---" * (len(names) + 1) + "|"]
    for lbl in labels:
        out.append(f"| {lbl} | " + " | ".join(_MARK.get(by_policy[n].get(lbl, "n/a"), "n/a") for n in names) + " |")
    met = [sum(1 for st in by_policy[n].values() if st == "met") for n in names]
    judged = [sum(1 for st in by_policy[n].values() if st != "n/a") for n in names]
    out.append("| **met** | " + " | ".join(f"{m} of {j}" for m, j in zip(met, judged, strict=True)) + " |")
    return out


def _target_key(label: str) -> str:
    """A target's label without its figures in parentheses (the largest GPU class may differ by seed)."""
    return re.sub(r" \([^)]*\)", "", label)


def per_seed_targets(results) -> dict[tuple[str, float], dict[str, list[str]]]:
    """(scenario, load) -> {target: [status on each seed]}: every seed judged on its own replays, so that a
    target met on the seed average by less than the seeds differ shows as met on some seeds only."""
    seeds = sorted({m["seed"] for m in results if "error" not in m and m.get("seed") is not None})
    out: dict[tuple[str, float], dict[str, list[str]]] = defaultdict(lambda: defaultdict(list))
    for seed in seeds:
        for key, lines in targets(aggregate([m for m in results if m.get("seed") == seed])).items():
            for st, label, _ in lines:
                out[key][_target_key(label)].append(st)
    return out


def _targets_section(agg, results=()):
    t = targets(agg)
    if not t:
        return []
    by_seed = per_seed_targets(results)
    out = ["## Targets", "",
           "The portal's policy against the baselines of this run, per scenario and load (seed averages). "
           "\"n/a\": the reference replay is missing or the target cannot apply. With several seeds, each target "
           "is also judged on every seed's replays alone: \"met on 2 of 3 seeds\" means the seed average is "
           "within the seeds' spread of the line, so read it as a tie.", ""]
    for (scen, load), lines in t.items():
        met = sum(1 for st, _, _ in lines if st == "met")
        judged = sum(1 for st, _, _ in lines if st != "n/a")
        out += [f"### {scen} at load {load}: {met} of {judged} met", ""]
        for st, lbl, fig in lines:
            seeds = [x for x in by_seed.get((scen, load), {}).get(_target_key(lbl), []) if x != "n/a"]
            if st != "n/a" and len(seeds) > 1:
                fig += f"; met on {seeds.count('met')} of {len(seeds)} seeds"
            out.append(f"- {st}: {lbl}: {fig}")
        out.append("")
    matrix = targets_by_policy(agg)
    if matrix:
        out += ["### Every policy by the same targets", "",
                "The same lines applied to each policy of the run (seed averages). A baseline meets the line it is "
                "the reference of by definition; what matters is whether any policy meets all of them at once.", ""]
        for (scen, load), by_policy in sorted(matrix.items()):
            out += [f"#### {scen} at load {load}", ""] + _matrix(by_policy) + [""]
    return out


def _losses(rows):
    a = dict(rows)
    name = _portal_name(a)
    if name is None:
        return []
    p = a[name]
    losses = []
    for name2, b in a.items():
        if name2 == name:
            continue
        for f, lbl, better_low in (("utilisation", "utilisation", False),
                                   ("useful_utilisation", "useful utilisation", False),
                                   ("wait_avg", "average wait", True), ("jct_avg", "average JCT", True),
                                   ("jain", "Jain", False)):
            pv, bv = p.get(f), b.get(f)
            if any(_nan(x) for x in (pv, bv)):
                continue
            if (better_low and bv < pv * 0.95) or (not better_low and bv > pv * 1.02):
                losses.append(f"{lbl} vs `{name2}`")
    return [f"`{name}` loses on: " + ", ".join(losses), ""] if losses else []


def write_report(results, out: Path, *, meta=None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    agg = aggregate(results)
    plots(results, agg, out)
    md = markdown(results, agg, out=out, meta=meta)
    (out / "report.md").write_text(md)
    slim = [{k: v for k, v in m.items() if k not in ("samples", "_key")} for m in results]
    (out / "results.json").write_text(json.dumps(slim, indent=1, default=str))
    return out / "report.md"
