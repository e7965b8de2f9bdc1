"""Resizable jobs: the portal against Slurm-EASY and FCFS on the labs, without and with 30% resizable training jobs.

    python -m benchmarks.resizable [--scenarios lab1node,lab8] [--loads 0.9,1.1] [--seeds 1,2,3,4] [--workers 2]

Each seeded trace is replayed as it is ("before": every job has a fixed size) and with ``trace.resizable``
("after": the scenario's ``-resizable`` twin, 30% of the training jobs resizable), each by the portal, Slurm-EASY
and FCFS (the baselines run every job at its maximum size). Per scenario, load and variant: utilisation and
useful utilisation (the portal's, EASY's), the 8-GPU jobs' mean wait (the portal's over EASY's), realtime starts
within 5 minutes, the high and critical wait over FCFS's, and the GPU-hours lost (% of busy). The CPU time of the
replays and the load average are printed, as the figures depend on both."""

from __future__ import annotations

import argparse
import time

from benchmarks.harness import ROOT, mean, replay_all
from simulator import metrics, policies
from simulator.jobs import prepare
from simulator.scenario import load_scenario
from simulator.simulator import simulate

POLICIES = ("portal", "slurm-easy", "fcfs")
VARIANTS = ("before", "after")


def _one(task):
    name, load, seed, variant, policy = task
    path = ROOT / "scenarios" / (f"{name}-resizable.yaml" if variant == "after" else f"{name}.yaml")
    c0 = time.process_time()
    sc, jobs, info = prepare(load_scenario(path), seed=seed, load=load)
    res = simulate(scenario=sc, jobs=jobs, policy=policies.make(policy), name=policy)
    m = metrics.compute(res, rho=info["rho"], keep_samples=False)
    return (name, load, variant, policy), {
        "util": m["utilisation"], "useful": m["useful_utilisation"],
        "w8": m["wait_gpus"].get("8", {}).get("avg"), "rt": m["realtime_within_5min"],
        "urgent": m["wait_urgent_nonrt"]["avg"], "lost": m["lost_pct_of_busy"],
        "grows": sum(r.grows for r in res.jobs), "shrinks": sum(r.shrinks for r in res.jobs),
        "cpu_s": time.process_time() - c0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="lab1node,lab8")
    ap.add_argument("--loads", default="0.9,1.1")
    ap.add_argument("--seeds", default="1,2,3,4")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    tasks = [(sc, float(load), int(seed), variant, policy) for sc in a.scenarios.split(",")
             for load in a.loads.split(",") for seed in a.seeds.split(",") for variant in VARIANTS
             for policy in POLICIES]
    tasks.sort(key=lambda t: t[4] != "portal")  # the long replays first
    run = replay_all(_one, tasks, a.workers)
    agg = run.by_key()

    def avg(key, field):
        return mean(agg[key], field)

    seeds = len(a.seeds.split(","))
    print(f"portal vs Slurm-EASY and FCFS; before: fixed sizes, after: 30% of training jobs resizable; "
          f"mean of {seeds} seed(s)\n")
    print("| scenario | load | jobs | utilisation (portal / EASY) | useful (portal / EASY) | 8-GPU wait / EASY's "
          "| realtime <= 5 min | high+critical wait / FCFS's | lost GPU-h % of busy | resizes (grow / shrink) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for sc, load in sorted({k[:2] for k in agg}):
        for variant in VARIANTS:
            p, e, f = ((sc, load, variant, pol) for pol in POLICIES)
            w8 = avg(p, "w8") / avg(e, "w8") if avg(e, "w8") else float("nan")
            urg = avg(p, "urgent") / avg(f, "urgent") if avg(f, "urgent") else float("nan")
            print(f"| {sc} | {load} | {variant} | {avg(p, 'util'):.3f} / {avg(e, 'util'):.3f} | "
                  f"{avg(p, 'useful'):.3f} / {avg(e, 'useful'):.3f} | {w8:.2f}x ({avg(p, 'w8') / 3600:.1f} h / "
                  f"{avg(e, 'w8') / 3600:.1f} h) | {avg(p, 'rt'):.1%} | {urg:.2f}x | {avg(p, 'lost'):.2f}% | "
                  f"{avg(p, 'grows'):.0f} / {avg(p, 'shrinks'):.0f} |")
    print("\n" + run.summary(sum(o["cpu_s"] for _, o in run.rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
