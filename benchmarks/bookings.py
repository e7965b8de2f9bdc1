"""What the calendar costs the engine: ``python -m benchmarks.bookings [--cells 10000x1000] [--runs 5]``.

For each cell (pending x GPU nodes) it builds the engine benchmark's snapshot (``benchmarks.engine``) and the same
snapshot with a handful of calendar entries: two bookings ahead (in 2 h and in 10 h, for a department), one under
way for a department and one for three users, each of 2% of the GPUs (at least 8: a course's or a deadline's
share of a lab's cluster), a maintenance window ahead on two nodes and one under way on one. It reports the cycle's CPU time (``time.process_time``, median of the
runs, the two snapshots measured alternately so that a neighbour's load falls on both alike), the ratio, what
was admitted and the load average. The issue's bound: with bookings within 1.2x of without.
"""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace

from benchmarks.engine import DEPTS, FLAVOR, NOW, load_average, make_snapshot, parse_cells
from benchmarks.harness import alternately, cell_options, verdict
from engine import schedule
from engine.types import DEFAULT_CLUSTER, Booking, MaintenanceWindow, Snapshot

HOUR = 3600.0


def booked(snap: Snapshot) -> Snapshot:
    """``snap`` with four bookings and two maintenance windows."""
    gpus = max(8, sum(n.gpus for n in snap.nodes) // 50)
    names = [n.name for n in snap.nodes]
    bookings = (
        Booking(1, DEFAULT_CLUSTER, FLAVOR, gpus, NOW + 2 * HOUR, NOW + 5 * HOUR, "course", departments=(DEPTS[0],)),
        Booking(2, DEFAULT_CLUSTER, FLAVOR, gpus, NOW + 10 * HOUR, NOW + 72 * HOUR, "deadline", departments=(DEPTS[1],)),
        Booking(3, DEFAULT_CLUSTER, FLAVOR, gpus, NOW - HOUR, NOW + 2 * HOUR, "workshop", departments=(DEPTS[2],)),
        Booking(4, DEFAULT_CLUSTER, FLAVOR, gpus, NOW - HOUR, NOW + 3 * HOUR, "demo", users=("u1", "u2", "u3")),
    )
    maintenance = (
        MaintenanceWindow(1, DEFAULT_CLUSTER, NOW + 6 * HOUR, NOW + 8 * HOUR, tuple(names[-2:]), reason="firmware"),
        MaintenanceWindow(2, DEFAULT_CLUSTER, NOW - HOUR, NOW + HOUR, tuple(names[-3:-2]), reason="repair"),
    )
    return replace(snap, bookings=bookings, maintenance=maintenance)


def measure(pending: int, nodes: int, runs: int) -> dict[str, float]:
    plain = make_snapshot(pending, nodes)
    cal = booked(plain)
    first, second = schedule(plain), schedule(cal)
    codes = sum(1 for r in second.pending if r.code in ("booked", "maintenance"))
    cost = alternately(plain, cal, runs)
    return {"plain_s": cost.first_s, "booked_s": cost.second_s, "ratio": cost.ratio,
            "admitted_plain": len(first.admissions), "admitted_booked": len(second.admissions), "calendar_waits": codes}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cell_options(parser)
    args = parser.parse_args(argv)
    print("| pending x GPU nodes | without CPU s | with bookings CPU s | ratio | admitted (without / with) | "
          "waiting for the calendar | load average |")
    print("|---|---|---|---|---|---|---|")
    worst = 0.0
    for pending, nodes in parse_cells(args.cells):
        row = measure(pending, nodes, args.runs)
        worst = max(worst, row["ratio"])
        print(f"| {pending} x {nodes} | {row['plain_s']:.3f} | {row['booked_s']:.3f} | {row['ratio']:.2f}x | "
              f"{row['admitted_plain']} / {row['admitted_booked']} | {row['calendar_waits']} | {load_average()} |",
              flush=True)
    return verdict(worst)


if __name__ == "__main__":
    sys.exit(main())
