"""What jobs of any shape cost the engine: ``python -m benchmarks.shapes [--cells 10000x1000] [--runs 5]``.

For each cell (pending x GPU nodes) it builds the engine benchmark's all-GPU snapshot (``benchmarks.engine``) and
the same snapshot with 20% of its pending jobs made CPU-only (1-4 pods of 1-8 cores on a CPU pool) and 10% made
of two roles (their GPU gang plus 4 CPU data workers), beside a CPU pool of one 64-core, 256 GiB node per five
GPU nodes, a third of it busy, with quotas in cores per department. It reports the cycle's CPU time
(``time.process_time``, median of the runs, the two mixes measured alternately so that a neighbour's load falls
on both alike), the ratio, and the load average. The issue's bound: the shapes mix within 1.2x of the all-GPU mix.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import replace

from benchmarks.engine import DEPTS, NOW, load_average, make_snapshot, parse_cells
from benchmarks.harness import alternately, cell_options, verdict
from engine import schedule
from engine.shapes import resource_key
from engine.types import Node, PendingJob, Quota, Role, RunningJob, Snapshot

CPU_POOL = "cpu"
GiB = 1024


def shaped(snap: Snapshot, seed: int = 11) -> Snapshot:
    """``snap`` with 20% of its pending jobs CPU-only and 10% of two roles, and a CPU pool with its quotas."""
    rnd = random.Random(seed)
    gpu_nodes = sum(1 for n in snap.nodes)
    cpu_nodes = tuple(Node(f"cpu-{i:05d}", CPU_POOL, 0, kind="cpu", cpu_m=64_000, memory_mib=256 * GiB)
                      for i in range(max(1, gpu_nodes // 5)))
    running = list(snap.running)
    jid = 20_000_000
    for node in cpu_nodes:  # a third busy
        running.append(RunningJob(id=jid, department=rnd.choice(DEPTS), flavor=CPU_POOL, tier="elastic", placement=(),
                                  gpus_per_pod=0, started_at=NOW - rnd.uniform(0, 3600), max_runtime_s=4 * 3600.0,
                                  preemptible=False, cpu_pods=((CPU_POOL, node.name, 21_000, 64 * GiB),)))
        jid += 1
    cores = len(cpu_nodes) * 64_000
    quotas = snap.quotas + tuple(Quota(d, resource_key(CPU_POOL, "cpu"), cores // len(DEPTS), None, None)
                                 for d in DEPTS)
    pending: list[PendingJob] = []
    for job in snap.pending:
        draw = rnd.random()
        if draw < 0.2:
            role = Role("main", rnd.choice([1, 1, 2, 4]), 0, rnd.choice([1000, 2000, 4000, 8000]),
                        rnd.choice([4, 8, 16, 32]) * GiB, CPU_POOL)
            job = replace(job, flavor=CPU_POOL, pods=0, gpus_per_pod=0, roles=(role,))
        elif draw < 0.3:
            job = replace(job, roles=(Role("trainer", job.pods, job.gpus_per_pod, 8000, 64 * GiB, job.flavor),
                                      Role("data", 4, 0, 4000, 16 * GiB, CPU_POOL)))
        pending.append(job)
    return replace(snap, nodes=snap.nodes + cpu_nodes, running=tuple(running), pending=tuple(pending), quotas=quotas)


def measure(pending: int, nodes: int, runs: int) -> dict[str, float]:
    gpu = make_snapshot(pending, nodes)
    mixed = shaped(gpu)
    cpu_only = sum(1 for j in mixed.pending if j.roles and j.pods == 0)
    two_roles = sum(1 for j in mixed.pending if len(j.roles) > 1)
    admitted = {"gpu": len(schedule(gpu).admissions), "shapes": len(schedule(mixed).admissions)}
    cost = alternately(gpu, mixed, runs)
    return {"pending": pending, "nodes": nodes, "cpu_only": cpu_only, "two_roles": two_roles, "gpu_s": cost.first_s,
            "shapes_s": cost.second_s, "ratio": cost.ratio, "admitted_gpu": admitted["gpu"],
            "admitted_shapes": admitted["shapes"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cell_options(parser)
    args = parser.parse_args(argv)
    print("| pending x GPU nodes | CPU-only | two roles | all-GPU CPU s | shapes CPU s | ratio | admitted "
          "(all-GPU / shapes) | load average |")
    print("|---|---|---|---|---|---|---|---|")
    worst = 0.0
    for pending, nodes in parse_cells(args.cells):
        row = measure(pending, nodes, args.runs)
        worst = max(worst, row["ratio"])
        print(f"| {pending} x {nodes} | {row['cpu_only']} | {row['two_roles']} | {row['gpu_s']:.3f} | "
              f"{row['shapes_s']:.3f} | {row['ratio']:.2f}x | {row['admitted_gpu']} / {row['admitted_shapes']} | "
              f"{load_average()} |", flush=True)
    return verdict(worst)


if __name__ == "__main__":
    sys.exit(main())
