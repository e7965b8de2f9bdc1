"""What fractions of a GPU cost the engine and what their placement keeps whole:
``python -m benchmarks.fractions [--cells 2000x200] [--runs 5] [--seeds 5]``.

1. **Engine CPU**: for each cell (pending x 8-GPU nodes) the engine benchmark's snapshot (``benchmarks.engine``)
   against the same with 30% of its pending jobs made fractional (one pod asking for 5, 10, 20 or 40 GiB of an
   80 GiB A100, a third of them with a compute share). The cycle's CPU time (``time.process_time``, median of the
   runs, the two mixes alternately so that a neighbour's load falls on both alike), the ratio and the load
   average. The bound: within 1.2x.
2. **Whole GPUs kept free** on a fragmented cluster: 16 nodes of 8 GPUs, whole-GPU jobs holding a random part of
   each node, then a stream of fractions (quarter, eighth and half GPUs) placed by the engine, against a policy
   that puts each fraction on the emptiest GPU (the most left, a free GPU counting as empty). Reported: whole GPUs
   and whole nodes left free for whole-GPU work, per seed and in all.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import replace

from benchmarks.engine import FLAVOR, NOW, load_average, make_snapshot, parse_cells
from benchmarks.harness import alternately, cell_options
from engine import schedule
from engine.fractions import HAMI, Share
from engine.types import Node, PendingJob, Quota, RunningJob, Snapshot

GPU_MIB = 80 * 1024


def fractional(snap: Snapshot, share: float = 0.3, seed: int = 13) -> Snapshot:
    """``snap`` with ``share`` of its pending jobs asking for a fraction of one GPU."""
    rnd = random.Random(seed)
    pending = []
    for job in snap.pending:
        if rnd.random() < share:
            cores = rnd.choice([0, 0, 20, 50])
            job = replace(job, pods=1, gpus_per_pod=1,
                          share=Share(HAMI, GPU_MIB, memory_mib=rnd.choice([5, 10, 20, 40]) * 1024, cores=cores))
        pending.append(job)
    return replace(snap, pending=tuple(pending))


def engine_cost(pending: int, nodes: int, runs: int) -> dict[str, float]:
    whole = make_snapshot(pending, nodes)
    mixed = fractional(whole)
    cost = alternately(whole, mixed, runs)
    return {"pending": pending, "nodes": nodes, "fractional": sum(1 for j in mixed.pending if j.share),
            "whole_s": cost.first_s, "fractions_s": cost.second_s, "ratio": cost.ratio,
            "admitted_whole": len(schedule(whole).admissions), "admitted_fractions": len(schedule(mixed).admissions)}


def fragmented(seed: int, nodes: int = 16, fractions: int = 48) -> tuple[Snapshot, list[int]]:
    """A cluster whose nodes whole-GPU jobs hold in part, and ``fractions`` fractional jobs to place."""
    rnd = random.Random(seed)
    node_list = tuple(Node(f"n{i:02d}", FLAVOR, 8) for i in range(nodes))
    running, busy = [], []
    for i, node in enumerate(node_list):
        used = rnd.choice([0, 2, 3, 5, 6, 7])
        busy.append(used)
        if used:
            running.append(RunningJob(i + 1, "a", FLAVOR, "elastic", (node.name,), used, NOW - 600,
                                      max_runtime_s=86_400.0))
    pending = [PendingJob(1000 + k, "b", FLAVOR, tier="realtime", pods=1, gpus_per_pod=1, submitted_at=NOW,
                          share=Share(HAMI, GPU_MIB, memory_mib=int(GPU_MIB * rnd.choice([0.125, 0.25, 0.25, 0.5]))))
               for k in range(fractions)]
    quotas = (Quota("a", FLAVOR, nodes * 8), Quota("b", FLAVOR, nodes * 8))
    snap = Snapshot(now=NOW, nodes=node_list, running=tuple(running), pending=tuple(pending), quotas=quotas,
                    estimates=False)
    return snap, busy


def kept_whole(snap: Snapshot, busy: list[int]) -> dict[str, int]:
    """Whole GPUs and nodes left free after the engine placed the fractions."""
    result = schedule(snap)
    opened = {(a.placement[0], a.devices[0]) for a in result.admissions}
    free = [8 - b for b in busy]
    for name, _ in opened:
        free[int(name[1:])] -= 1
    return {"placed": len(result.admissions), "free_gpus": sum(free), "free_nodes": sum(1 for f in free if f == 8)}


def emptiest(snap: Snapshot, busy: list[int]) -> dict[str, int]:
    """The same fractions, each on the GPU with the most left (a free GPU first): how many stay whole."""
    gpus: list[list[float]] = [[1.0] * (8 - b) for b in busy]  # per node, what is left of each GPU not held whole
    placed = 0
    for job in snap.pending:
        need = job.share.memory_mib / GPU_MIB
        best = max(((left, i, k) for i, node in enumerate(gpus) for k, left in enumerate(node) if left >= need),
                   default=None)
        if best is None:
            continue
        _, i, k = best
        gpus[i][k] -= need
        placed += 1
    free = [sum(1 for left in node if left == 1.0) for node in gpus]
    return {"placed": placed, "free_gpus": sum(free), "free_nodes": sum(1 for f in free if f == 8)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    cell_options(parser, cells="2000x200,10000x1000")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args(argv)
    print(f"load average at start: {load_average()}")
    print("engine CPU time, 30% fractional jobs against today's mix (median of runs, process time):")
    for pending, nodes in parse_cells(args.cells):
        r = engine_cost(pending, nodes, args.runs)
        print(f"  {pending} pending x {nodes} nodes ({r['fractional']} fractional): whole {r['whole_s'] * 1000:.0f} ms, "
              f"fractions {r['fractions_s'] * 1000:.0f} ms, ratio {r['ratio']:.2f} (bound 1.2); admitted "
              f"{r['admitted_whole']} / {r['admitted_fractions']}")
    print("whole GPUs (whole nodes) kept free on a fragmented cluster of 16 x 8 GPUs, 48 fractions:")
    totals = {"engine": [0, 0, 0], "emptiest": [0, 0, 0]}
    for seed in range(1, args.seeds + 1):
        snap, busy = fragmented(seed)
        ours, spread = kept_whole(snap, busy), emptiest(snap, busy)
        for name, r in (("engine", ours), ("emptiest", spread)):
            totals[name] = [t + r[k] for t, k in zip(totals[name], ("placed", "free_gpus", "free_nodes"), strict=True)]
        print(f"  seed {seed}: {sum(8 - b for b in busy)} GPUs free before; engine {ours['free_gpus']} GPUs "
              f"({ours['free_nodes']} nodes), emptiest GPU {spread['free_gpus']} GPUs ({spread['free_nodes']} nodes); "
              f"placed {ours['placed']} / {spread['placed']}")
    e, s = totals["engine"], totals["emptiest"]
    print(f"  in all: engine {e[1]} GPUs ({e[2]} nodes) free, emptiest GPU {s[1]} GPUs ({s[2]} nodes); "
          f"placed {e[0]} / {s[0]}")
    print(f"load average at end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
