"""What a CPU pool gives the GPU jobs: ``python -m benchmarks.cpu_pools [--seeds 1 2 3] [--jobs 600] [--load 0.9]``.

A lab of 8 GPUs (two nodes of 4) and a CPU pool (two nodes of 32 cores, 128 GiB), four departments of equal
quotas, where a third of the jobs are CPU-only (preprocessing, evaluation: 1-2 pods of 4-8 cores, 16 GiB, 0.5-3 h)
and the rest GPU jobs (1, 1, 2, 4 or 8 GPUs, 0.5-4 h), arriving at random over a span that makes the GPU jobs'
offered load ``--load``. Each seed's trace is replayed twice under the portal's policy:

* ``pool``: the CPU-only jobs run on the CPU pool (``roles`` with 0 GPUs), as the portal runs them now;
* ``gpu-min``: the same jobs as the portal ran them before CPU pools, one GPU per pod forced on them.

It reports, per mode (seed averages): the GPU-hours the GPU jobs got inside the arrival window, the GPU jobs'
mean and 95th-percentile wait, the CPU jobs' mean wait, and the GPU-hours the CPU jobs took (gpu-min only).
Pure simulation: no database, no clock but the CPU's.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
from dataclasses import replace

from simulator import policies
from simulator.jobs import prepare
from simulator.metrics import percentile
from simulator.scenario import parse_scenario
from simulator.simulator import simulate
from simulator.trace import TraceRow, parse_roles, write_csv

DEPTS = ("vision", "nlp", "robotics", "speech")
GPUS = 8


def scenario():
    return parse_scenario({
        "name": "cpu-pools",
        "cluster": {"node_groups": [{"name": "gpu", "count": 2, "gpus_per_node": 4, "flavor": "a100"},
                                    {"name": "cpu", "count": 2, "cores": 32, "memory_gib": 128, "flavor": "cpu"}]},
        "departments": {d: {"quotas": {"a100": {"nominal": 2},
                                       "cpu": {"cores": {"nominal": 16}, "memory_gib": {"nominal": 64}}}}
                        for d in DEPTS},
        "assign": {"tier": {"elastic": 0.7, "backfill": 0.2, "realtime": 0.1}},
        "simulation": {"tick_s": 300},
    })


def trace(seed: int, jobs: int, load: float) -> tuple[list[TraceRow], set[str]]:
    """(rows, the CPU-only jobs' ids): a third CPU-only, arrivals spread so the GPU jobs offer ``load``."""
    rnd = random.Random(seed)
    shapes = []
    for i in range(jobs):
        if i % 3 == 2:
            pods = rnd.choice([1, 1, 2])
            shapes.append((f"c{i}", rnd.uniform(1800, 10800), 0, f"prep:{pods}:0:{rnd.choice([4, 8])}:16"))
        else:
            shapes.append((f"g{i}", rnd.uniform(1800, 14400), rnd.choice([1, 1, 2, 4, 8]), ""))
    work = sum(d * g for _, d, g, _ in shapes)
    span = work / (GPUS * load)
    submits = sorted(rnd.uniform(0, span) for _ in shapes)
    rows = [TraceRow(job_id=k, submit_time_s=round(t, 1), duration_s=round(d, 1), total_gpus=g,
                     department=DEPTS[rnd.randrange(len(DEPTS))], roles=_roles(r))
            for (k, d, g, r), t in zip(shapes, submits, strict=True)]
    return rows, {k for k, _, g, r in shapes if r}


def _roles(text: str):
    return parse_roles(text)


def forced_gpu(rows: list[TraceRow]) -> list[TraceRow]:
    """The rows as before CPU pools: a CPU-only job takes one GPU per pod."""
    return [replace(r, total_gpus=r.roles[0][1], pods=r.roles[0][1], roles=()) if r.roles else r for r in rows]


def measure(rows: list[TraceRow], cpu_jobs: set[str]) -> dict[str, float]:
    sc, jobs, _ = prepare(scenario(), rows=rows, seed=1)
    res = simulate(scenario=sc, jobs=jobs, policy=policies.make("portal"))
    lo, hi = res.window
    gpu_h = cpu_gpu_h = 0.0
    gpu_waits, cpu_waits = [], []
    for r in res.jobs:
        inside = sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in r.runs) * r.spec.total_gpus / 3600
        wait = (r.first_start if r.first_start is not None else res.end_time) - r.spec.submit
        if r.spec.key in cpu_jobs:
            cpu_gpu_h += inside
            cpu_waits.append(wait / 60)
        else:
            gpu_h += inside
            gpu_waits.append(wait / 60)
    return {"gpu_jobs_gpu_h": gpu_h, "gpu_wait_mean_min": statistics.fmean(gpu_waits),
            "gpu_wait_p95_min": percentile(gpu_waits, 95), "cpu_wait_mean_min": statistics.fmean(cpu_waits),
            "cpu_jobs_gpu_h": cpu_gpu_h, "window_h": (hi - lo) / 3600}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--jobs", type=int, default=600)
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--trace-out", help="write the first seed's trace (with roles) to this CSV")
    a = ap.parse_args(argv)
    out: dict[str, list[dict]] = {"pool": [], "gpu-min": []}
    for seed in a.seeds:
        rows, cpu_jobs = trace(seed, a.jobs, a.load)
        if a.trace_out and seed == a.seeds[0]:
            write_csv(rows, a.trace_out)
        out["pool"].append(measure(rows, cpu_jobs))
        out["gpu-min"].append(measure(forced_gpu(rows), cpu_jobs))
    print(f"{a.jobs} jobs (a third CPU-only), GPU jobs' offered load {a.load}, seeds {a.seeds}")
    keys = list(out["pool"][0])
    print("mode     " + " ".join(f"{k:>18}" for k in keys))
    for mode, runs in out.items():
        print(f"{mode:8} " + " ".join(f"{statistics.fmean(r[k] for r in runs):18.1f}" for k in keys))
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["forced_gpu", "main", "measure", "scenario", "trace"]
