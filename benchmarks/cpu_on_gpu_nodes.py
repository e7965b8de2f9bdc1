"""What CPU work on GPU nodes costs the engine: ``python -m benchmarks.cpu_on_gpu_nodes [--cells 10000x1000]
[--runs 5]``.

For each cell (pending x GPU nodes) it takes the shapes benchmark's snapshot (``benchmarks.shapes``: 20% CPU-only
jobs, 10% of two roles, a CPU pool of one 64-core node per five GPU nodes) and the same snapshot with every GPU
node lending its spare CPU to the pool as the portal's snapshot does (a CPU node ``<name>+cpu`` per GPU node:
64 cores and 512 GiB less 4 cores and 32 GiB per GPU), so the pool has six times the nodes. It reports the
cycle's CPU time (median of the runs, measured alternately), the ratio, how many jobs each admits, and the load.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from benchmarks.engine import load_average, make_snapshot, parse_cells
from benchmarks.harness import alternately, cell_options
from benchmarks.shapes import CPU_POOL, GiB, shaped
from engine import schedule
from engine.types import Node, Snapshot

CORES_M, MEMORY_MIB, RESERVE_M, RESERVE_MIB = 64_000, 512 * GiB, 4000, 32 * GiB


def lent(snap: Snapshot) -> Snapshot:
    """``snap`` with each GPU node's spare (beyond the reserve of all its GPUs) offered to the CPU pool."""
    twins = tuple(Node(f"{n.name}+cpu", CPU_POOL, 0, cluster=n.cluster, kind="cpu",
                       cpu_m=CORES_M - n.gpus * RESERVE_M, memory_mib=MEMORY_MIB - n.gpus * RESERVE_MIB)
                  for n in snap.nodes if n.kind != "cpu")
    return replace(snap, nodes=snap.nodes + twins)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cell_options(parser)
    args = parser.parse_args(argv)
    print("| pending x GPU nodes | shapes CPU s | lending CPU s | ratio | admitted (shapes / lending) | load average |")
    print("|---|---|---|---|---|---|")
    for pending, nodes in parse_cells(args.cells):
        base = shaped(make_snapshot(pending, nodes))
        more = lent(base)
        cost = alternately(base, more, args.runs)
        print(f"| {pending} x {nodes} | {cost.first_s:.3f} | {cost.second_s:.3f} | {cost.ratio:.2f}x | "
              f"{len(schedule(base).admissions)} / {len(schedule(more).admissions)} | {load_average()} |", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
