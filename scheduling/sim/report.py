"""The policy comparison: run every (scenario, load, seed, policy), aggregate over seeds, write a markdown report
and PNG plots (utilisation vs load, wait CDFs per tier, per-department fairness)."""

from __future__ import annotations

import functools
import hashlib
import json
import math
import os
import time
from collections import defaultdict
from concurrent.futures import ProcessPoolExecutor, as_completed
from pathlib import Path

from . import policies
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
    slow_first = {"portal": 0, "tiresias": 1}  # start the long replays first so the pool finishes together
    todo.sort(key=lambda t: slow_first.get(t[1], 2))
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
        for f in ("utilisation", "util_over_min_rho", "realtime_within_5min", "deadline_attainment", "jct_avg",
                  "jct_p95", "jct_over_lb", "jain", "preemptions_per_job", "gpu_hours_lost", "lost_pct_of_busy",
                  "cycle_ms_avg", "cycle_ms_p95", "wall_s", "never_started", "realtime_preempted"):
            a[f] = _avg(m[f] for m in ms)
        a["wait_avg"] = _avg(m["wait"]["avg"] for m in ms)
        for t in ("realtime", "elastic", "backfill"):
            for s in ("avg", "p50", "p95", "p99"):
                a[f"wait_{t}_{s}"] = _avg(m["wait_tier"].get(t, {}).get(s) for m in ms)
        a["wait_critical_avg"] = _avg(m["wait_urgency"].get("critical", {}).get("avg") for m in ms)
        a["safe"] = _avg(m["sharing"]["safe"] / max(m["sharing"]["of"], 1) for m in ms if "sharing" in m)
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
    lines += ["Policies:", ""] + [f"- `{p}`: {policies.DESCRIPTIONS[p]}" for p in policies.DEFAULT] + [""]
    scen_loads = sorted({(k[0], k[1]) for k in agg})
    for scen, load in scen_loads:
        rows = [(k[2], v) for k, v in agg.items() if k[0] == scen and k[1] == load]
        order = {p: i for i, p in enumerate(policies.REGISTRY)}
        rows.sort(key=lambda r: order.get(r[0], 99))
        any_v = rows[0][1]
        lines += [f"## {scen} at target load {load} (offered rho = {any_v['rho']:.2f}, {any_v['seeds']} seed(s))", ""]
        lines += ["| policy | util | util/min(1,rho) | wait avg | realtime p95 | RT <5min | critical avg | "
                  "elastic avg | backfill avg | JCT avg | JCT/LB | deadlines | Jain | safe depts | preempt/job | "
                  "lost GPU-h (%) | never started | cycle ms avg/p95 |",
                  "|" + "---|" * 18]
        for p, a in rows:
            lines.append(
                f"| {p} | {_f(a['utilisation'], 3)} | {_f(a['util_over_min_rho'], 3)} | {_h(a['wait_avg'])} | "
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
        lines += _targets(rows)
    lines += ["## Plots", ""]
    for png in sorted(out.glob("*.png")):
        lines.append(f"![{png.stem}]({png.name})")
    lines.append("")
    return "\n".join(lines)


def _targets(rows):
    """Issue 6's targets for the portal, checked against this table."""
    a = dict(rows)
    p = a.get("portal")
    if p is None:
        return []
    out = ["Targets for the portal (goals, not tests):", ""]

    def chk(name, ok, val):
        out.append(f"- {'met' if ok else 'NOT met'}: {name} ({val})")

    chk("utilisation >= 0.95 x min(1, rho)", p["util_over_min_rho"] >= 0.95, _f(p["util_over_min_rho"], 3))
    chk("realtime p95 wait < 60 s", p["wait_realtime_p95"] < 60, _h(p["wait_realtime_p95"]))
    chk(">= 99% of realtime started within 5 min", p["realtime_within_5min"] >= 0.99,
        _f(p["realtime_within_5min"], 1, True))
    if "fcfs" in a and a["fcfs"]["wait_critical_avg"] > 0:
        red = 1 - p["wait_critical_avg"] / a["fcfs"]["wait_critical_avg"]
        chk("critical average wait >= 80% below FCFS", red >= 0.8, _f(red, 0, True) + " lower")
    if "tiresias" in a:
        r = p["jct_avg"] / a["tiresias"]["jct_avg"]
        chk("average JCT <= 1.1 x Tiresias", r <= 1.1, f"{r:.2f}x")
    chk("Jain's index >= 0.95", p["jain"] >= 0.95, _f(p["jain"], 3))
    chk("GPU-hours lost to preemption < 5%", p["lost_pct_of_busy"] < 5, _f(p["lost_pct_of_busy"], 1) + "%")
    losses = []
    for name, b in a.items():
        if name == "portal":
            continue
        for f, lbl, better_low in (("utilisation", "utilisation", False), ("wait_avg", "average wait", True),
                                   ("jct_avg", "average JCT", True), ("jain", "Jain", False)):
            pv, bv = p[f], b[f]
            if any(isinstance(x, float) and math.isnan(x) for x in (pv, bv)):
                continue
            if (better_low and bv < pv * 0.95) or (not better_low and bv > pv * 1.02):
                losses.append(f"{lbl} vs `{name}`")
    if losses:
        out.append("- the portal loses on: " + ", ".join(losses))
    out.append("")
    return out


def plots(results, agg, out: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    scens = sorted({k[0] for k in agg})
    pols = [p for p in policies.REGISTRY if any(k[2] == p for k in agg)]
    for scen in scens:
        loads = sorted({k[1] for k in agg if k[0] == scen})
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for p in pols:
            xs = [agg[(scen, ld, p)]["rho"] for ld in loads if (scen, ld, p) in agg]
            ys = [agg[(scen, ld, p)]["utilisation"] for ld in loads if (scen, ld, p) in agg]
            ax.plot(xs, ys, marker="o", label=p, lw=2.5 if p == "portal" else 1.2)
        if loads:
            rhos = [agg[(scen, ld, pols[0])]["rho"] for ld in loads if (scen, ld, pols[0]) in agg]
            ax.plot(rhos, [min(1, r) for r in rhos], "k--", lw=1, label="min(1, rho)")
        ax.set_xlabel("offered load rho")
        ax.set_ylabel("GPU utilisation")
        ax.set_title(f"{scen}: utilisation vs offered load")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=7)
        f = out / f"{scen}_utilisation.png"
        fig.tight_layout()
        fig.savefig(f, dpi=110)
        plt.close(fig)
        made.append(f)
        # wait CDFs per tier at the load closest to 0.9
        ld = min(loads, key=lambda x: abs(x - 0.9))
        samples = defaultdict(lambda: defaultdict(list))
        for m in results:
            if m.get("scenario") == scen and m.get("load") == ld and "samples" in m:
                for t, xs in m["samples"].items():
                    samples[t][m["policy"]].extend(xs)
        tiers = [t for t in ("realtime", "elastic", "backfill") if t in samples]
        if tiers:
            fig, axes = plt.subplots(1, len(tiers), figsize=(5 * len(tiers), 4.2), squeeze=False)
            for ax, t in zip(axes[0], tiers, strict=True):
                for p in pols:
                    xs = sorted(samples[t].get(p, []))
                    if not xs:
                        continue
                    ys = [(i + 1) / len(xs) for i in range(len(xs))]
                    ax.plot([max(x, 1.0) for x in xs], ys, label=p, lw=2.5 if p == "portal" else 1.2)
                ax.set_xscale("log")
                ax.axvline(300, color="k", ls=":", lw=1)
                ax.set_xlabel("wait (s, log; dotted = 5 min)")
                ax.set_ylabel("fraction of jobs")
                ax.set_title(f"{scen} load {ld}: {t}")
                ax.grid(alpha=0.3)
            axes[0][0].legend(fontsize=7)
            f = out / f"{scen}_wait_cdf.png"
            fig.tight_layout()
            fig.savefig(f, dpi=110)
            plt.close(fig)
            made.append(f)
        # per-department fairness: received / min(demand, quota) while backlogged
        depts = sorted({d for (s, lv, p), a in agg.items() if s == scen and lv == ld for d in a["dept_share_ratio"]})
        if depts:
            fig, ax = plt.subplots(figsize=(max(7, 0.6 * len(depts) * len(pols) / 3), 4.5))
            width = 0.8 / max(len(pols), 1)
            for i, p in enumerate(pols):
                a = agg.get((scen, ld, p))
                if not a:
                    continue
                ys = [a["dept_share_ratio"].get(d, float("nan")) for d in depts]
                ax.bar([k + i * width for k in range(len(depts))], ys, width, label=p)
            ax.axhline(1.0, color="k", ls="--", lw=1)
            ax.set_xticks([k + 0.4 - width / 2 for k in range(len(depts))])
            ax.set_xticklabels(depts, rotation=45, ha="right", fontsize=8)
            ax.set_ylabel("received / min(demand, quota) share\n(time-average while backlogged)")
            ax.set_title(f"{scen} load {ld}: per-department fairness (1 = fair share)")
            ax.legend(fontsize=7, ncol=2)
            ax.grid(alpha=0.3, axis="y")
            f = out / f"{scen}_fairness.png"
            fig.tight_layout()
            fig.savefig(f, dpi=110)
            plt.close(fig)
            made.append(f)
    return made


def write_report(results, out: Path, *, meta=None) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    agg = aggregate(results)
    plots(results, agg, out)
    md = markdown(results, agg, out=out, meta=meta)
    (out / "report.md").write_text(md)
    slim = [{k: v for k, v in m.items() if k not in ("samples", "_key")} for m in results]
    (out / "results.json").write_text(json.dumps(slim, indent=1, default=str))
    return out / "report.md"
