"""What the benchmarks of this folder share: the engine's CPU time of two snapshots measured alternately (the
cost benchmarks: bookings, shapes, teams, fractions, topology), and seeded replays run in a pool of processes
with the wall time, the CPU time and the load average around them (the policy benchmarks: notice, resizable,
realtime_cost, tuner). Each benchmark keeps what it measures and how it prints it; only the measuring is here,
so that every figure of one kind is taken the same way."""

from __future__ import annotations

import argparse
import gc
import math
import multiprocessing
import os
import statistics
import time
from collections import defaultdict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

from engine import schedule
from engine.types import Snapshot

ROOT = Path(__file__).resolve().parents[1]

# The cost benchmarks' bound: a feature's snapshot within this factor of the same snapshot without it.
BOUND = 1.2


# --------------------------------------------------------------- the engine's CPU time, two snapshots alike


def cell_options(parser: argparse.ArgumentParser, cells: str = "1000x100,10000x1000") -> None:
    """``--cells`` (pending x nodes, comma-separated) and ``--runs`` (cycles measured per snapshot)."""
    parser.add_argument("--cells", default=cells, help="pending x nodes, comma-separated")
    parser.add_argument("--runs", type=int, default=5)


def cpu_seconds(snap: Snapshot) -> float:
    """The CPU time (``time.process_time``) of one cycle over ``snap``: what the engine costs, which a
    neighbour's load on a shared machine changes little (wall time it would change a lot)."""
    gc.collect()
    start = time.process_time()
    schedule(snap)
    return time.process_time() - start


@dataclass(frozen=True)
class Pair:
    first_s: float  # median CPU seconds of a cycle over the first snapshot
    second_s: float  # the same over the second
    ratio: float  # second over first


def alternately(first: Snapshot, second: Snapshot, runs: int) -> Pair:
    """The median CPU time of each snapshot's cycle over ``runs`` runs, the two measured in turn so that a
    neighbour's burst falls on both alike."""
    a, b = [], []
    for _ in range(runs):
        a.append(cpu_seconds(first))
        b.append(cpu_seconds(second))
    fa, fb = statistics.median(a), statistics.median(b)
    return Pair(fa, fb, fb / fa if fa else math.nan)


def verdict(worst: float, bound: float = BOUND) -> int:
    """Print the worst ratio against the bound; the exit status (0 within it, 1 over)."""
    print(f"\nworst ratio {worst:.2f}x (bound {bound:g}x): {'within' if worst <= bound else 'OVER'}")
    return 0 if worst <= bound else 1


# --------------------------------------------------------------- seeded replays in a pool of processes


def scenario_paths(text: str) -> list[str]:
    """``"scenarios/lab8.yaml,/abs/x.yaml"`` -> the paths, relative ones from the repository's root."""
    return [p if Path(p).is_absolute() else str(ROOT / p) for p in text.split(",")]


@dataclass
class Replays:
    rows: list  # what the replay function returned, one per task, in the tasks' order
    workers: int
    wall_s: float
    load_start: float  # the 1-minute load average before the first replay
    load_end: float  # and after the last

    def by_key(self) -> dict[tuple, list[dict]]:
        """Rows of ``(key, figures)``, grouped by key (the seeds of one scenario, load and variant)."""
        groups: dict[tuple, list[dict]] = defaultdict(list)
        for key, out in self.rows:
            groups[key].append(out)
        return groups

    def summary(self, cpu_s: float) -> str:
        """One line of the CPU and wall time and the load, as the figures depend on both."""
        return (f"{len(self.rows)} replays: {cpu_s:.0f} s CPU, {self.wall_s:.0f} s wall on {self.workers} "
                f"worker(s); load average {self.load_start:.1f} at the start, {self.load_end:.1f} at the end "
                f"({os.cpu_count()} CPUs)")


def replay_all(fn: Callable, tasks: Iterable, workers: int) -> Replays:
    """``fn`` over ``tasks`` in ``workers`` processes (one task at a time each, as replays differ in length)."""
    tasks = list(tasks)
    w0, load0 = time.perf_counter(), os.getloadavg()[0]
    with multiprocessing.Pool(workers) as pool:
        rows = pool.map(fn, tasks, chunksize=1)
    return Replays(rows, workers, time.perf_counter() - w0, load0, os.getloadavg()[0])


def mean(outs: list[dict], field: str) -> float:
    """The mean of ``field`` over the seeds' figures, those without it (None) left out; NaN if none has it."""
    vals = [o[field] for o in outs if o[field] is not None]
    return sum(vals) / len(vals) if vals else math.nan
