"""Replay speed of the trace simulator: the full Philly trace (15,264 jobs) on 256 GPUs at load 0.9.

    python benchmarks/sim_replay.py [--policy portal,fcfs] [--load 0.9] [--limit N]

Prints jobs, cycles, wall time, jobs/s and the engine's share of the wall time per policy.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from simulator import policies  # noqa: E402
from simulator.jobs import prepare  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402
from simulator.simulator import simulate  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "philly.yaml"))
    ap.add_argument("--policy", default="portal,fcfs")
    ap.add_argument("--load", type=float, default=0.9)
    ap.add_argument("--limit", type=int, default=None)
    a = ap.parse_args()
    sc = load_scenario(a.scenario)
    if a.limit:
        from dataclasses import replace

        sc = replace(sc, trace=dict(sc.trace, limit=a.limit))
    t0 = time.perf_counter()
    sc, jobs, info = prepare(sc, load=a.load)
    print(f"prepared {len(jobs)} jobs on {sc.capacity()} GPUs (rho={info['rho']:.2f}) in "
          f"{time.perf_counter() - t0:.1f}s")
    for name in a.policy.split(","):
        res = simulate(scenario=sc, jobs=jobs, policy=policies.make(name), name=name)
        engine = sum(res.cycle_times)
        print(f"{name:20s} jobs={len(jobs)} cycles={res.cycles} wall={res.wall_s:.1f}s "
              f"jobs/s={len(jobs) / res.wall_s:.0f} engine={engine:.1f}s ({100 * engine / res.wall_s:.0f}%) "
              f"cycle_ms_avg={1000 * engine / max(res.cycles, 1):.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
