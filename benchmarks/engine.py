"""Benchmark of the scheduling engine: ``python -m benchmarks.engine [--quick]``.

Generates snapshots of pending x nodes in {1k, 10k, 50k} x {100, 1,000, 5,000} (8 GPUs per node, half busy,
10 departments in one cohort, elastic/backfill/realtime mix with gangs) and reports the cycle time as CPU
(``time.process_time``, median of a few runs: what the engine costs, which the neighbours of a shared machine
change little) and as wall time (``time.perf_counter``, median of the same runs), the machine's load average
(``/proc/loadavg``) when the row was measured, and the cycle's peak Python memory (``tracemalloc``, measured in
a separate run because tracing slows the cycle down), as a markdown table, plus the growth from 1k to 50k
pending. ``--cells 10000x1000,50000x5000`` measures only those cells.

``--steady`` measures the steady state instead: cycle 1 on the cell's snapshot, then the next snapshot as the
portal would read it ten seconds later (``next_snapshot``: cycle 1's admissions running, its victims leaving,
a few dozen jobs ended and as many submitted), and cycle 2 on it, the CPU of each (cycle 2's a median).
"""

from __future__ import annotations

import argparse
import dataclasses
import gc
import random
import resource
import statistics
import sys
import time
import tracemalloc

from engine import schedule
from engine.policy import DEFAULT_POLICY
from engine.types import (
    TIERS,
    URGENCIES,
    USER_TIERS,
    CycleResult,
    Node,
    PendingJob,
    Quota,
    RunningJob,
    Snapshot,
)

NOW = 1_000_000.0
DEPTS = tuple(f"dept{i}" for i in range(10))
FLAVOR = "a100-80gb"


def make_snapshot(pending: int, nodes: int, seed: int = 7) -> Snapshot:
    rnd = random.Random(seed)
    node_list = tuple(Node(f"node-{i:05d}", FLAVOR, 8) for i in range(nodes))
    running = []
    jid = 10_000_000
    for node in node_list:
        left = 4  # half busy
        while left:
            g = rnd.choice([g for g in (1, 2, 4) if g <= left])
            left -= g
            tier = rnd.choice(TIERS)
            running.append(
                RunningJob(
                    id=jid,
                    department=rnd.choice(DEPTS),
                    flavor=FLAVOR,
                    tier=tier,
                    placement=(node.name,),
                    gpus_per_pod=g,
                    started_at=NOW - rnd.uniform(0, 6 * 3600),
                    max_runtime_s=rnd.choice([3600.0, 4 * 3600.0, 12 * 3600.0]),
                    borrowed=rnd.random() < 0.2,
                    preemptible=tier != "realtime",
                )
            )
            jid += 1
    capacity = nodes * 8
    quotas = tuple(Quota(d, FLAVOR, capacity // len(DEPTS), None, None) for d in DEPTS)
    jobs = []
    for i in range(pending):
        pods, g = rnd.choice([(1, 1), (1, 1), (1, 2), (1, 4), (1, 8), (2, 8), (4, 8), (2, 4)])
        tier = rnd.choices(TIERS, weights=[1, 6, 3])[0]
        jobs.append(
            PendingJob(
                id=i + 1,
                department=rnd.choice(DEPTS),
                flavor=FLAVOR,
                tier=tier,
                pods=pods,
                gpus_per_pod=g,
                urgency=rnd.choice(URGENCIES),
                user_tier=rnd.choice(USER_TIERS),
                submitted_at=NOW - rnd.uniform(0, 86400),
                deadline=NOW + rnd.uniform(0, 86400) if rnd.random() < 0.2 else None,
                max_runtime_s=rnd.choice([600.0, 3600.0, 4 * 3600.0, 24 * 3600.0]),
                bid=rnd.randrange(0, 1000),
                hold=rnd.randrange(0, 5000),
            )
        )
    return Snapshot(
        now=NOW,
        nodes=node_list,
        running=tuple(running),
        pending=tuple(jobs),
        quotas=quotas,
        policy=DEFAULT_POLICY,
        credits={d: 10**9 for d in DEPTS},
        usage={d: rnd.uniform(0, 1e7) for d in DEPTS},
    )


def next_snapshot(snap: Snapshot, result: CycleResult, *, seed: int = 1, ends: int = 30, submissions: int = 30,
                  after_s: float = 10.0) -> Snapshot:
    """The snapshot of the cycle after ``result``, ``after_s`` seconds on, as the adapter would build it: each
    admitted job running on its nodes since the last cycle, each victim still running while it leaves (no longer
    preemptible, evicting for its preemptor, counted in the window's preemptions), ``ends`` running jobs ended
    and ``submissions`` new jobs, each a copy of a waiting one submitted now."""
    rnd = random.Random(seed)
    waiting = {job.id: job for job in snap.pending}
    leaving = {v: p.preemptor_id for p in result.preemptions for v in p.victim_ids}
    running = [dataclasses.replace(r, evicting_for=leaving[r.id], preemptible=False) if r.id in leaving else r
               for r in snap.running]
    for adm in result.admissions:
        job = waiting.pop(adm.job_id)
        running.append(RunningJob(
            id=job.id, department=job.department, flavor=job.flavor, tier=job.tier, placement=adm.placement,
            gpus_per_pod=job.gpus_per_pod, started_at=snap.now, max_runtime_s=job.max_runtime_s,
            borrowed=adm.borrowed, urgency=job.urgency, user_tier=job.user_tier, submitted_at=job.submitted_at,
            bid=job.bid, cluster=adm.cluster, preemptible=job.tier != "realtime",
        ))
    ended = set(rnd.sample(sorted(r.id for r in running if r.id not in leaving), min(ends, len(running))))
    now = snap.now + after_s
    pending = list(waiting.values())
    first = max((job.id for job in snap.pending), default=0) + 1
    if pending:
        pending += [dataclasses.replace(rnd.choice(pending), id=first + k, submitted_at=now) for k in range(submissions)]
    return dataclasses.replace(
        snap, now=now, running=tuple(sorted((r for r in running if r.id not in ended), key=lambda r: r.id)),
        pending=tuple(pending), recent_preemptions=snap.recent_preemptions + len(leaving),
    )


def measure_steady(pending: int, nodes: int, runs: int) -> dict[str, float]:
    """Cycle 1 on the cell's snapshot (once), then cycle 2 on the next one (``next_snapshot``), ``runs`` times."""
    first = make_snapshot(pending, nodes)
    gc.collect()
    start = time.process_time()
    result = schedule(first)
    cold_cpu = time.process_time() - start
    second = next_snapshot(first, result)
    cpu, results = [], []
    for _ in range(runs):
        gc.collect()
        start = time.process_time()
        results.append(schedule(second))
        cpu.append(time.process_time() - start)
    assert all(r == results[0] for r in results), "the same snapshot gave different decisions"
    return {
        "first_cpu_ms": cold_cpu * 1000,
        "cpu_ms": statistics.median(cpu) * 1000,
        "load": load_average(),
        "pending": len(second.pending),
        "running": len(second.running),
        "admitted": len(results[0].admissions),
        "preemptions": len(results[0].preemptions),
    }


def measure(pending: int, nodes: int, runs: int) -> dict[str, float]:
    snap = make_snapshot(pending, nodes)
    times, cpu = [], []
    result = None
    for _ in range(runs):
        gc.collect()
        start, start_cpu = time.perf_counter(), time.process_time()
        result = schedule(snap)
        cpu.append(time.process_time() - start_cpu)
        times.append(time.perf_counter() - start)
    gc.collect()
    tracemalloc.start()
    schedule(snap)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    return {
        "ms": statistics.median(times) * 1000,
        "cpu_ms": statistics.median(cpu) * 1000,
        "load": load_average(),
        "peak_mb": peak / 2**20,
        "admitted": len(result.admissions),
        "preemptions": len(result.preemptions),
    }


def load_average() -> str:
    """The 1-minute load average of the machine (``/proc/loadavg``), or "?" where there is none."""
    try:
        with open("/proc/loadavg") as f:
            return f.read().split()[0]
    except OSError:
        return "?"


def parse_cells(text: str) -> list[tuple[int, int]]:
    """``"10000x1000,50000x5000"`` -> [(10000, 1000), (50000, 5000)]."""
    cells = []
    for part in text.split(","):
        pending, _, nodes = part.strip().lower().partition("x")
        cells.append((int(pending), int(nodes)))
    return cells


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="one run each, skip 50k x 5000")
    parser.add_argument("--runs", type=int, help="cycles per cell (default 3, 1 with --quick)")
    parser.add_argument("--cells", type=parse_cells, help="only these PENDINGxNODES cells, comma-separated")
    parser.add_argument("--steady", action="store_true", help="cycle 2 after cycle 1's decisions and a small delta")
    args = parser.parse_args(argv)
    runs = args.runs or (1 if args.quick else 3)
    pendings = (1_000, 10_000, 50_000)
    node_counts = (100, 1_000, 5_000)
    cells = args.cells or [(p, n) for p in pendings for n in node_counts if not (args.quick and (p, n) == (50_000, 5_000))]
    rows = {}
    if args.steady:
        print("| pending | nodes | cycle 1 CPU ms | cycle 2 CPU ms (median) | load (1 min) | cycle 2 pending | cycle 2 running "
              "| cycle 2 admitted | cycle 2 preemptions |")
        print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
        for p, n in cells:
            r = measure_steady(p, n, runs)
            print(f"| {p:,} | {n:,} | {r['first_cpu_ms']:.0f} | {r['cpu_ms']:.0f} | {r['load']} | {r['pending']:,} "
                  f"| {r['running']:,} | {r['admitted']} | {r['preemptions']} |")
            sys.stdout.flush()
        return 0
    print(
        "| pending | nodes | cycle CPU ms (median) | cycle wall ms (median) | load (1 min) "
        "| cycle peak MB (tracemalloc) | admitted | preemptions |"
    )
    print("|---:|---:|---:|---:|---:|---:|---:|---:|")
    for p, n in cells:
        r = measure(p, n, runs)
        rows[(p, n)] = r
        print(
            f"| {p:,} | {n:,} | {r['cpu_ms']:.0f} | {r['ms']:.0f} | {r['load']} | {r['peak_mb']:.1f} "
            f"| {r['admitted']} | {r['preemptions']} |"
        )
        sys.stdout.flush()
    print()
    for n in node_counts:
        if (1_000, n) in rows and (50_000, n) in rows:
            t = rows[(50_000, n)]["cpu_ms"] / rows[(1_000, n)]["cpu_ms"]
            m = rows[(50_000, n)]["peak_mb"] / max(rows[(1_000, n)]["peak_mb"], 1e-9)
            print(f"- {n:,} nodes: 1k -> 50k pending (x50): CPU time x{t:.1f}, peak memory x{m:.1f}")
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"- process max RSS (snapshots + cycles): {rss:.0f} MB")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
