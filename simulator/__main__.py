"""Command line: ``python -m simulator {run,report,convert,whatif} ...`` (no Django needed)."""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import yaml

from . import policies
from .jobs import prepare
from .report import LOADS, SCENARIO_DIR, run_grid, write_report
from .runner import run_one
from .scenario import load_scenario
from .trace import TraceRow, read_csv, write_csv
from .whatif import compare, format_diff

TIMINGS = ("wall_s", "cycle_ms_avg", "cycle_ms_p95", "cycle_ms_max", "task_s")


def _floats(s):
    return tuple(float(x) for x in s.split(",") if x)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m simulator", description=__doc__)
    sub = ap.add_subparsers(dest="cmd", required=True)

    r = sub.add_parser("run", help="replay one scenario under one or more policies and print the figures")
    r.add_argument("scenario")
    r.add_argument("--policy", default="fcfs,portal", help="comma-separated, or 'all'")
    r.add_argument("--load", type=float, default=None, help="target offered load (default: the scenario's)")
    r.add_argument("--seed", type=int, default=None)
    r.add_argument("--limit", type=int, default=None, help="only the first N jobs of the trace")
    r.add_argument("--trace-dir", default=None)
    r.add_argument("--json", action="store_true", help="one JSON object per policy (every metric)")
    r.add_argument("--no-timings", action="store_true",
                   help="leave out wall-clock figures (replay and cycle times), so the same replay prints "
                        "byte-identical output")

    rp = sub.add_parser("report", help="the full policy comparison: markdown + PNG plots")
    rp.add_argument("--out", default="reports/sim")
    rp.add_argument("--quick", action="store_true", help="smoke run: lab + a 1,500-job Philly slice, load 0.9")
    rp.add_argument("--scenarios", default=None, help="comma-separated scenario files (default lab8, philly)")
    rp.add_argument("--loads", type=_floats, default=None)
    rp.add_argument("--seeds", type=int, default=None, help="number of seeds (1..N)")
    rp.add_argument("--fresh", action="store_true",
                    help="ignore replays already recorded in OUT/replays.jsonl (by default an interrupted report "
                         "continues where it stopped)")
    rp.add_argument("--policies", default=None)
    rp.add_argument("--limit", type=int, default=None)
    rp.add_argument("--workers", type=int, default=None)
    rp.add_argument("--trace-dir", default=None)

    c = sub.add_parser("convert", help="write a public trace (or a scenario's trace) in the trace CSV format")
    c.add_argument("scenario", help="scenario file whose trace/assign sections to use")
    c.add_argument("--out", required=True)
    c.add_argument("--seed", type=int, default=None)
    c.add_argument("--load", type=float, default=None)
    c.add_argument("--trace-dir", default=None)

    w = sub.add_parser("whatif", help="replay a trace CSV under the scenario's policy and a proposed one")
    w.add_argument("trace")
    w.add_argument("--scenario", required=True, help="cluster + quotas (+ current policy) to replay on")
    w.add_argument("--proposed", required=True, help="YAML file of policy overrides for the proposed run")

    a = ap.parse_args(argv)
    if a.cmd == "run":
        return _run(a)
    if a.cmd == "report":
        return _report(a)
    if a.cmd == "convert":
        return _convert(a)
    return _whatif(a)


def _run(a) -> int:
    names = list(policies.DEFAULT) if a.policy == "all" else a.policy.split(",")
    for p in names:
        m = run_one(a.scenario, p, load=a.load, seed=a.seed, trace_dir=a.trace_dir, limit=a.limit,
                    keep_samples=False)
        if a.no_timings:
            m = {k: v for k, v in m.items() if k not in TIMINGS}
        if a.json:
            print(json.dumps(m, default=str))
            continue
        wt = {t: round(v["avg"]) for t, v in m["wait_tier"].items()}
        timing = "" if a.no_timings else f" cycle_ms={m['cycle_ms_avg']:.2f} wall={m['wall_s']:.1f}s"
        print(f"{p:20s} rho={m['rho']:.2f} util={m['utilisation']:.3f} wait_avg={m['wait']['avg']:.0f}s "
              f"tiers={wt} rt<5min={m['realtime_within_5min']:.3f} jct={m['jct_avg']:.0f}s jain={m['jain']:.3f} "
              f"preempt={m['preemptions']} lost={m['lost_pct_of_busy']:.1f}% cycles={m['cycles']}{timing} "
              f"invalid={m['invalid']}")
    return 0


def _report(a) -> int:
    if a.scenarios:
        scen = [Path(s) for s in a.scenarios.split(",")]
    else:
        scen = [SCENARIO_DIR / "lab8.yaml", SCENARIO_DIR / "philly.yaml"]
    loads = a.loads or ((0.9,) if a.quick else LOADS)
    seeds = tuple(range(1, (a.seeds or (1 if a.quick else 2)) + 1))
    pols = tuple(a.policies.split(",")) if a.policies else policies.DEFAULT
    limit = a.limit or (1500 if a.quick else None)
    t0 = time.perf_counter()
    print(f"simulating {len(scen)} scenario(s) x {len(loads)} load(s) x {len(seeds)} seed(s) x {len(pols)} "
          f"policies{f' (first {limit} jobs)' if limit else ''}", flush=True)
    results = run_grid(scen, policies_=pols, loads=loads, seeds=seeds, trace_dir=a.trace_dir, limit=limit,
                       workers=a.workers, log=lambda s: print(s, flush=True),
                       checkpoint=None if a.fresh else Path(a.out) / "replays.jsonl")
    meta = {
        "engine": policies.REGISTRY["portal"].engine_name(),
        "scenarios": ", ".join(s.name for s in scen),
        "loads": ", ".join(map(str, loads)),
        "seeds": ", ".join(map(str, seeds)),
        "job limit": limit or "none",
        "wall time": f"{time.perf_counter() - t0:.0f} s",
    }
    path = write_report(results, Path(a.out), meta=meta)
    print(f"wrote {path}")
    return 0


def _convert(a) -> int:
    sc = load_scenario(a.scenario)
    sc, jobs, info = prepare(sc, seed=a.seed, load=a.load, trace_dir=a.trace_dir)
    rows = [
        TraceRow(j.key, j.submit, j.duration_s, j.total_gpus, j.department, j.user, j.tier, j.urgency, j.flavor, j.deadline,
                 j.bid, j.max_runtime_s, j.pods, j.checkpoint_interval_s)
        for j in jobs
    ]
    write_csv(rows, a.out)
    print(f"wrote {len(rows)} rows to {a.out} (rho={info['rho']:.3f})", file=sys.stderr)
    return 0


def _whatif(a) -> int:
    sc = load_scenario(a.scenario)
    with open(a.proposed) as fh:
        proposed = yaml.safe_load(fh) or {}
    quotas = {
        d: {fl: {"nominal": q.nominal, "borrowing_limit": q.borrowing_limit, "lending_limit": q.lending_limit}
            for fl, q in dep.quotas.items()}
        | {f"{fl}@{c}": {"nominal": q.nominal, "borrowing_limit": q.borrowing_limit, "lending_limit": q.lending_limit}
           for (c, fl), q in dep.cluster_quotas.items()}
        for d, dep in sc.departments.items()
    }  # fmt: skip
    groups = [{"name": g.name, "count": g.count, "gpus_per_node": g.gpus_per_node, "flavor": g.flavor,
               "cluster": g.cluster} for g in sc.node_groups]  # fmt: skip
    placement = {k: sc.assign[k] for k in ("cluster_selector", "cluster_preference") if k in sc.assign}
    res = compare(read_csv(a.trace), node_groups=groups, quotas=quotas, current_policy=sc.policy_overrides,
                  proposed_policy=proposed, options=sc.options,
                  members={d: dep.members for d, dep in sc.departments.items()},
                  clusters=sc.clusters, placement=placement)
    print(format_diff(res))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
