"""Topology-aware placement, measured: ``python -m benchmarks.topology [--seeds 1,2,3] [--cells 10000x1000]``.

Two parts (``--part sim``, ``--part engine``, both by default):

* **sim**: ``scenarios/topology.yaml`` (6 racks of 4 nodes x 8 GPUs in 2 blocks, gangs of 8-32 GPUs beside small
  work; a gang spread over racks runs 1.3x as long, over blocks 1.6x) replayed with the portal's engine, once
  with the levels given to it and once with placement that ignores them (``simulation.topology_placement:
  ignore``), per seed: the share of gangs placed compactly, their completion times (average, median, p95), every
  job's average completion time and the utilisation (busy GPU-time, which spread gangs inflate).
* **engine**: the engine benchmark's snapshot (``benchmarks.engine``) against the same snapshot with its nodes in
  racks of 4 and blocks of 32 and the cluster declaring block, rack and host levels: the cycle's CPU time
  (``time.process_time``, median of the runs, the two measured alternately), the ratio and the load average.
  The issue's bound: within 1.2x.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace

from benchmarks.engine import load_average, make_snapshot, parse_cells
from benchmarks.harness import alternately, cell_options, verdict
from engine import schedule
from engine.types import DEFAULT_CLUSTER, ClusterInfo, Snapshot

SCENARIO = "scenarios/topology.yaml"
BLOCK, RACK, HOST = "topology.kubernetes.io/block", "topology.kubernetes.io/rack", "kubernetes.io/hostname"


def racked(snap: Snapshot, rack: int = 4, block: int = 32) -> Snapshot:
    """``snap`` with its nodes (in name order) in racks of ``rack`` and blocks of ``block`` and the levels."""
    nodes = []
    for i, node in enumerate(sorted(snap.nodes, key=lambda n: n.name)):
        labels = dict(node.labels) | {BLOCK: f"b{i // block}", RACK: f"r{i // rack}", HOST: node.name}
        nodes.append(replace(node, labels=tuple(sorted(labels.items()))))
    clusters = (ClusterInfo(DEFAULT_CLUSTER, topology_levels=(BLOCK, RACK, HOST)),)
    return replace(snap, nodes=tuple(nodes), clusters=clusters)


def engine_row(pending: int, nodes: int, runs: int) -> dict:
    flat = make_snapshot(pending, nodes)
    levels = racked(flat)
    admitted = (len(schedule(flat).admissions), len(schedule(levels).admissions))
    cost = alternately(flat, levels, runs)
    return {"pending": pending, "nodes": nodes, "flat_s": cost.first_s, "levels_s": cost.second_s,
            "ratio": cost.ratio, "admitted": admitted}


def sim_rows(seeds: list[int]) -> list[dict]:
    from simulator import metrics, policies
    from simulator.runner import prepared_scenario
    from simulator.simulator import simulate

    rows = []
    for seed in seeds:
        sc, jobs, info = prepared_scenario(SCENARIO, seed, None, None, None)
        for mode in ("aware", "ignore"):
            start = time.process_time()
            run = replace(sc, options=replace(sc.options, topology_placement=mode))
            res = simulate(scenario=run, jobs=jobs, policy=policies.make("portal"), name="portal")
            m = metrics.compute(res, rho=info["rho"], keep_samples=False)
            rows.append({"seed": seed, "mode": mode, "cpu_s": time.process_time() - start, **m})
    return rows


def _h(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--part", choices=("sim", "engine", "both"), default="both")
    parser.add_argument("--seeds", default="1,2,3")
    cell_options(parser)
    args = parser.parse_args(argv)
    ok = True
    if args.part in ("sim", "both"):
        print(f"## {SCENARIO}: placement that knows the racks against placement that ignores them\n")
        print("| seed | placement | gangs | placed compactly | gang JCT avg | gang JCT p50 | gang JCT p95 | "
              "every job's JCT avg | utilisation | replay CPU s |")
        print("|---|---|---|---|---|---|---|---|---|---|")
        rows = sim_rows([int(s) for s in args.seeds.split(",")])
        for r in rows:
            print(f"| {r['seed']} | {r['mode']} | {r['gangs']} | {r['gangs_compact_share']:.0%} | "
                  f"{_h(r['gang_jct_avg'])} | {_h(r['gang_jct_p50'])} | {_h(r['gang_jct_p95'])} | "
                  f"{_h(r['jct_avg'])} | {r['utilisation']:.1%} | {r['cpu_s']:.1f} |", flush=True)
        for mode in ("aware", "ignore"):
            mine = [r for r in rows if r["mode"] == mode]
            print(f"| mean | {mode} | | {statistics.mean(r['gangs_compact_share'] for r in mine):.0%} | "
                  f"{_h(statistics.mean(r['gang_jct_avg'] for r in mine))} | | | "
                  f"{_h(statistics.mean(r['jct_avg'] for r in mine))} | "
                  f"{statistics.mean(r['utilisation'] for r in mine):.1%} | |")
        print()
    if args.part in ("engine", "both"):
        print("## Engine cycle with topology levels (racks of 4, blocks of 32) against without\n")
        print("| pending x GPU nodes | without levels CPU s | with levels CPU s | ratio | admitted (without / with) "
              "| load average |")
        print("|---|---|---|---|---|---|")
        worst = 0.0
        for pending, nodes in parse_cells(args.cells):
            row = engine_row(pending, nodes, args.runs)
            worst = max(worst, row["ratio"])
            print(f"| {pending} x {nodes} | {row['flat_s']:.3f} | {row['levels_s']:.3f} | {row['ratio']:.2f}x | "
                  f"{row['admitted'][0]} / {row['admitted'][1]} | {load_average()} |", flush=True)
        ok = verdict(worst) == 0
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
