"""What the realtime start guarantee costs in utilisation, and which late realtime starts no policy could avoid.

    python -m benchmarks.realtime_cost [--scenarios scenarios/lab1node.yaml,scenarios/lab8.yaml]
                                       [--loads 0.9,1.1] [--seeds 1,2,3] [--workers 2]

Two measurements on the same seeded traces:

1. **Utilisation with and without a realtime tier.** Every scenario is replayed twice per policy (the portal,
   Slurm-EASY, FCFS): as written, and with each realtime job relabelled elastic (same arrival, size and run
   time). The difference between the portal's two utilisations is what starting realtime work within minutes
   costs it; the baselines do not honour the guarantee (they start realtime work when its turn comes), so
   they barely move.
2. **Late realtime starts that the cooldown forces.** For each realtime job of the portal's replay that did
   not start within the target, whether it arrived while every GPU of its flavor was held by jobs that had
   started less than ``min_runtime_s - target`` before (so none could be preempted in time, by any policy that
   honours the cooldown): typically a job taking a whole one-node pool moments before.
"""

from __future__ import annotations

import argparse
from collections import defaultdict
from dataclasses import replace
from pathlib import Path

from benchmarks.harness import mean, replay_all, scenario_paths
from simulator import metrics, policies
from simulator.jobs import prepare
from simulator.scenario import load_scenario
from simulator.simulator import simulate

POLICIES = ("portal", "slurm-easy", "fcfs")


def _forced_late(res, scenario, target_s: float, min_runtime_s: float) -> tuple[int, int]:
    """(late realtime jobs, of which forced by the cooldown) in one replay."""
    capacity: dict[str, int] = defaultdict(int)
    for node in scenario.nodes():
        capacity[node.flavor] += node.gpus
    intervals: dict[str, list[tuple[float, float, int]]] = defaultdict(list)  # flavor -> (start, end, gpus)
    for r in res.jobs:
        for start, end in r.runs:
            intervals[r.spec.flavor].append((start, end, r.spec.total_gpus))
    late = forced = 0
    for r in res.jobs:
        if r.spec.tier != "realtime":
            continue
        t = r.spec.submit
        if r.first_start is not None and r.first_start - t <= target_s:
            continue
        late += 1
        # GPUs held at arrival, and how many of them by jobs still inside their cooldown at the target
        held = fresh = 0
        for start, end, gpus in intervals[r.spec.flavor]:
            if start <= t < end:
                held += gpus
                if start + min_runtime_s > t + target_s:
                    fresh += gpus
        free = capacity[r.spec.flavor] - held
        if free < r.spec.total_gpus and free + (held - fresh) < r.spec.total_gpus:
            forced += 1
    return late, forced


def _one(task):
    path, load, seed, policy, realtime = task
    sc, jobs, info = prepare(load_scenario(path), seed=seed, load=load)
    if not realtime:
        jobs = [replace(j, tier="elastic") if j.tier == "realtime" else j for j in jobs]
    res = simulate(scenario=sc, jobs=jobs, policy=policies.make(policy), name=policy)
    m = metrics.compute(res, rho=info["rho"], keep_samples=False)
    out = {"util": m["utilisation"], "rt": m["realtime_within_5min"]}
    if policy == "portal" and realtime:
        pol = sc.policy()
        out["late"], out["forced"] = _forced_late(res, sc, metrics.REALTIME_TARGET_S, pol.min_runtime_s)
    return (Path(path).stem, load, policy, realtime), out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="scenarios/lab1node.yaml,scenarios/lab8.yaml")
    ap.add_argument("--loads", default="0.9,1.1")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    tasks = [
        (p, float(load), int(seed), pol, realtime)
        for p in scenario_paths(a.scenarios)
        for load in a.loads.split(",")
        for seed in a.seeds.split(",")
        for pol in POLICIES
        for realtime in (True, False)
    ]
    agg = replay_all(_one, tasks, a.workers).by_key()

    def avg(key, field):
        return mean(agg[key], field)

    print("| scenario | load | policy | util | util, realtime relabelled elastic | difference |")
    print("|---|---|---|---|---|---|")
    for sc, load, pol in sorted({k[:3] for k in agg}, key=lambda k: (k[0], k[1], POLICIES.index(k[2]))):
        u, v = avg((sc, load, pol, True), "util"), avg((sc, load, pol, False), "util")
        print(f"| {sc} | {load} | {pol} | {u:.3f} | {v:.3f} | {v - u:+.3f} |")
    print()
    print("| scenario | load | realtime within 5 min | late | of which the cooldown forced |")
    print("|---|---|---|---|---|")
    for sc, load in sorted({k[:2] for k in agg}):
        outs = agg[(sc, load, "portal", True)]
        late, forced = sum(o["late"] for o in outs), sum(o["forced"] for o in outs)
        print(f"| {sc} | {load} | {avg((sc, load, 'portal', True), 'rt'):.1%} | {late} | {forced} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
