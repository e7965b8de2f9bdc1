"""Notebooks beside training, on whole GPUs or on fractions: ``python -m benchmarks.notebooks [--seeds 1 2 3]
[--load 0.6] [--per-day 1.0] [--scenario scenarios/lab1node.yaml]``.

The practice's lab (``scenarios/lab1node.yaml``: one 8-GPU A100 server, three departments of nominal quotas
4/3/1, 14 researchers), its seeded training trace compressed to ``--load`` (offered GPU-hours / capacity), and
researchers who open notebooks in working hours: on each weekday each researcher opens ``--per-day`` notebooks
on average (a Poisson count), at a time drawn between 09:00 and 17:00, kept open 1-5 hours, realtime (a
session: started within minutes, never preempted), using 5, 10, 15 or 20 GB of an 80 GB A100. Each seed is
replayed three times under the portal's policy:

* ``none``: the training trace alone (the lab without notebooks);
* ``whole``: with the notebooks, each holding one whole GPU (how the portal ran them before fractions);
* ``fraction``: the same notebooks, each asking for its memory as a fraction of one GPU (5/80 ... 20/80).

Reported per mode (means over the seeds): the offered load (training and notebooks, the notebooks counted as
what they hold), utilisation (GPU-worth allocated / capacity, inside the arrival window), the training jobs'
mean and 95th-percentile wait in hours and the mean wait of those that take the whole node, the notebooks' mean wait in minutes and the share of them started
within 5 minutes, the GPUs-worth the notebooks held on average (a fraction counts its share), and the engine's
decisions the simulator refused (0 unless the two disagree). Pure simulation: no database, no clock but the
CPU's.
"""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
from dataclasses import replace
from pathlib import Path

from benchmarks.engine import load_average
from simulator import policies
from simulator.jobs import build_jobs, prepare
from simulator.metrics import percentile
from simulator.scenario import JobSpec, Scenario, load_scenario
from simulator.simulator import simulate
from simulator.trace import TraceRow

SCENARIO = Path(__file__).resolve().parent.parent / "scenarios" / "lab1node.yaml"
DAY = 86400.0
GPU_GB = 80
NOTEBOOK_GB = (5, 10, 15, 20)
MODES = ("none", "whole", "fraction")
STARTED_WITHIN_S = 300.0  # a session that waits longer than this has kept its owner waiting


def training(seed: int, load: float, scenario: str | Path = SCENARIO) -> tuple[Scenario, list[JobSpec]]:
    """The lab and its training trace at ``load`` (the scenario's own mix, compressed as ``make bench`` does)."""
    sc, jobs, _ = prepare(load_scenario(str(scenario)), seed=seed, load=load)
    return sc, jobs


def notebook_rows(sc: Scenario, *, seed: int, start: float, end: float, per_day: float) -> list[TraceRow]:
    """The notebooks researchers open on the weekdays between ``start`` and ``end`` (trace seconds, day 0 a
    Monday as in the synthetic trace), each on a whole GPU in the row and its memory in ``gpu_gb``."""
    rnd = random.Random(f"{seed}:notebooks")
    people = [(d, u) for d in sorted(sc.departments) for u in sorted(sc.departments[d].members)]
    rows = []
    for day in range(int(start // DAY), int(math.ceil(end / DAY))):
        if day % 7 >= 5:
            continue
        for dept, user in people:
            for _ in range(_poisson(rnd, per_day)):
                t = day * DAY + rnd.uniform(9, 17) * 3600
                if not start <= t <= end:
                    continue
                rows.append(TraceRow(job_id=f"nb-{len(rows):05d}", submit_time_s=round(t, 1),
                                     duration_s=round(rnd.uniform(1, 5) * 3600, 1), total_gpus=1, department=dept,
                                     user=user, tier="realtime", urgency="normal",
                                     gpu_fraction=rnd.choice(NOTEBOOK_GB) / GPU_GB))
    return sorted(rows, key=lambda r: (r.submit_time_s, r.job_id))


def _poisson(rnd: random.Random, mean: float) -> int:
    """Knuth's draw: how many notebooks one researcher opens on one day."""
    limit, k, p = math.exp(-mean), 0, rnd.random()
    while p > limit:
        k += 1
        p *= rnd.random()
    return k


def with_notebooks(sc: Scenario, train: list[JobSpec], rows: list[TraceRow], *, fractional: bool,
                   seed: int) -> list[JobSpec]:
    """The training jobs and the notebooks after them (ids continue), on fractions or on whole GPUs."""
    if not fractional:
        rows = [replace(r, gpu_fraction=None) for r in rows]
    notebooks = build_jobs(sc, rows, seed=seed)
    base = max((j.id for j in train), default=0)
    return train + [replace(j, id=base + j.id) for j in notebooks]


def measure(sc: Scenario, jobs: list[JobSpec]) -> dict[str, float]:
    res = simulate(scenario=sc, jobs=jobs, policy=policies.make("portal"))
    lo, hi = res.window
    span = hi - lo
    held = offered = 0.0
    train_waits, nb_waits, node_waits = [], [], []
    node = max(n.gpus for n in sc.nodes())
    for r in res.jobs:
        gpus = float(r.spec.total_gpus)
        inside = sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in r.runs) * gpus
        if r.state == "running" and r.start is not None:
            inside += max(0.0, hi - max(r.start, lo)) * gpus
        wait = (r.first_start if r.first_start is not None else res.end_time) - r.spec.submit
        offered += r.spec.duration_s * gpus
        if r.spec.key.startswith("nb-"):
            held += inside
            nb_waits.append(wait)
        else:
            train_waits.append(wait)
            if gpus == node:
                node_waits.append(wait)
    busy = sum(float(r.spec.total_gpus) * sum(max(0.0, min(b, hi) - max(a, lo)) for a, b in r.runs)
               for r in res.jobs)
    first = min(j.submit for j in jobs)
    last = max(j.submit for j in jobs)
    return {
        "offered_load": offered / (res.capacity * max(last - first, 1.0)),
        "utilisation": busy / (res.capacity * span) if span else 0.0,
        "train_wait_mean_h": statistics.fmean(train_waits) / 3600,
        "train_wait_p95_h": percentile(train_waits, 95) / 3600,
        # a shared GPU is not free to whole-GPU work: the jobs that take the whole node wait for its last fraction
        "node_jobs_wait_h": statistics.fmean(node_waits) / 3600 if node_waits else float("nan"),
        "nb_wait_mean_min": statistics.fmean(nb_waits) / 60 if nb_waits else float("nan"),
        "nb_within_5min": (sum(w <= STARTED_WITHIN_S for w in nb_waits) / len(nb_waits)) if nb_waits else float("nan"),
        "nb_gpus_held": held / span if span else 0.0,
        "notebooks": float(len(nb_waits)),
        "refused": float(sum(res.invalid.values())),  # decisions the simulator could not carry out: 0 expected
    }


def run_seed(seed: int, load: float, per_day: float, scenario: str | Path = SCENARIO) -> dict[str, dict[str, float]]:
    sc, train = training(seed, load, scenario)
    start, end = min(j.submit for j in train), max(j.submit for j in train)
    rows = notebook_rows(sc, seed=seed, start=start, end=end, per_day=per_day)
    return {
        "none": measure(sc, train),
        "whole": measure(sc, with_notebooks(sc, train, rows, fractional=False, seed=seed)),
        "fraction": measure(sc, with_notebooks(sc, train, rows, fractional=True, seed=seed)),
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2, 3])
    ap.add_argument("--load", type=float, default=0.6, help="the training trace's offered load")
    ap.add_argument("--per-day", type=float, default=1.0, help="notebooks per researcher per weekday")
    ap.add_argument("--scenario", default=str(SCENARIO), help="the lab (its nodes, departments, members, trace)")
    a = ap.parse_args(argv)
    print(f"load average at start: {load_average()}")
    out: dict[str, list[dict]] = {m: [] for m in MODES}
    for seed in a.seeds:
        for mode, figures in run_seed(seed, a.load, a.per_day, a.scenario).items():
            out[mode].append(figures)
    print(f"{Path(a.scenario).stem}, training at load {a.load}, {a.per_day} notebook(s) per researcher per weekday, "
          f"seeds {a.seeds} (means over the seeds)")
    keys = list(out["none"][0])
    print("mode     " + " ".join(f"{k:>17}" for k in keys))
    for mode in MODES:
        print(f"{mode:8} " + " ".join(f"{statistics.fmean(r[k] for r in out[mode]):17.2f}" for k in keys))
    print(f"load average at end: {load_average()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = ["main", "measure", "notebook_rows", "run_seed", "training", "with_notebooks"]
