"""Where the portal's idle GPU-time goes: each idle GPU-second of a replay, classified by what the cycle before
it left pending.

    python -m benchmarks.idle [--scenarios scenarios/lab1node.yaml,scenarios/lab8.yaml] [--loads 0.9,1.1]
                              [--seeds 1,2,3] [--workers 2]

After every cycle of the portal's replay the GPUs that stay free until the next cycle are put in the first
class that applies, for their flavor:

- ``nothing pending``: no job of the flavor waits;
- ``victims leaving``: a job waits for the victims it chose (their GPUs are still in use; the free ones wait
  with it for the rest);
- ``held for a reservation``: a job that would fit the free GPUs now waits because they are a reserved
  head's (``reserved_for_head``) or behind a head (``waiting_for_higher_priority``);
- ``held by quota``: a job that would fit physically waits on its department's quota or the cohort's;
- ``realtime headroom``: a job waits so that a realtime arrival finds a free GPU;
- ``no pending job fits``: every waiting job needs more GPUs per pod, or more pods, than the free GPUs give.

The shares are of the whole GPU-time of the arrival window (the window utilisation is measured on), so they
add up with the utilisation to about 1 (work that runs on past the window is not idle). Slurm-EASY's idle
share is printed beside them: the gap to the best baseline is what the classes have to explain.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from scheduling.core import reasons  # noqa: E402
from scheduling.sim import metrics, policies  # noqa: E402
from scheduling.sim.jobs import prepare  # noqa: E402
from scheduling.sim.scenario import load_scenario  # noqa: E402
from scheduling.sim.simulator import simulate  # noqa: E402

CLASSES = (
    "nothing pending",
    "victims leaving",
    "held for a reservation",
    "held by quota",
    "realtime headroom",
    "no pending job fits",
)
RESERVATION = {reasons.RESERVED_FOR_HEAD, reasons.WAITING_FOR_HIGHER_PRIORITY}
QUOTA = {reasons.QUOTA_EXHAUSTED, reasons.QUOTA_LENT_OUT, reasons.BORROW_LIMIT}


def free_after(snap, result) -> dict[str, list[int]]:
    """Free GPUs per node after the cycle's admissions, by flavor (schedulable, untainted nodes only)."""
    free = {n.name: n.gpus - n.used_by_others for n in snap.nodes if n.schedulable and not n.taints}
    for job in snap.running:
        for name in job.placement:
            if name in free:
                free[name] -= job.gpus_per_pod
    pending = {j.id: j for j in snap.pending}
    for adm in result.admissions:
        g = pending[adm.job_id].gpus_per_pod
        for name in adm.placement:
            if name in free:
                free[name] -= g
    out: dict[str, list[int]] = defaultdict(list)
    for n in snap.nodes:
        if n.name in free:
            out[n.flavor].append(max(0, free[n.name]))
    return out


def fits(job, nodes: list[int]) -> bool:
    return sum(f // job.gpus_per_pod for f in nodes) >= job.pods


def classify(snap, result) -> dict[str, int]:
    """Idle GPUs after one cycle, per class."""
    jobs = {j.id: j for j in snap.pending}
    by_flavor: dict[str, list] = defaultdict(list)  # flavor -> [(waiting job, its reason code)]
    for r in result.pending:
        job = jobs[r.job_id]
        by_flavor[job.flavor].append((job, r.code))
    out: dict[str, int] = defaultdict(int)
    for flavor, nodes in free_after(snap, result).items():
        idle = sum(nodes)
        if idle <= 0:
            continue
        left = by_flavor.get(flavor, [])
        if not left:
            cls = "nothing pending"
        elif any(code == reasons.PREEMPTION_IN_PROGRESS for _, code in left):
            cls = "victims leaving"
        elif any(code in RESERVATION and fits(job, nodes) for job, code in left):
            cls = "held for a reservation"
        elif any(code in QUOTA and fits(job, nodes) for job, code in left):
            cls = "held by quota"
        elif any(code == reasons.REALTIME_HEADROOM for _, code in left):
            cls = "realtime headroom"
        else:
            cls = "no pending job fits"
        out[cls] += idle
    return out


class Recording(policies.Portal):
    """The portal's engine, recording each cycle's idle GPUs per class."""

    def __init__(self):
        self.cycles: list[tuple[float, dict[str, int]]] = []

    def __call__(self, snap):
        result = super().__call__(snap)
        self.cycles.append((snap.now, classify(snap, result)))
        return result


def idle_shares(cycles, capacity: int, window: tuple[float, float]) -> dict[str, float]:
    """Each class's GPU-seconds, from one cycle to the next, within ``window``, as a share of its GPU-time."""
    lo, hi = window
    total = defaultdict(float)
    for (t, idle), (t_next, _) in zip(cycles, cycles[1:], strict=False):
        span = min(t_next, hi) - max(t, lo)
        if span <= 0:
            continue
        for cls, gpus in idle.items():
            total[cls] += gpus * span
    whole = capacity * (hi - lo)
    return {cls: total[cls] / whole if whole > 0 else 0.0 for cls in CLASSES}


def _one(args):
    path, load, seed = args
    sc = load_scenario(path)
    sc, jobs, info = prepare(sc, seed=seed, load=load)
    rec = Recording()
    res = simulate(scenario=sc, jobs=jobs, policy=rec, name="portal")
    shares = idle_shares(rec.cycles, res.capacity, res.window)
    easy = simulate(scenario=sc, jobs=jobs, policy=policies.make("slurm-easy"), name="slurm-easy")
    util = metrics.utilisation(res.busy_gpu_s, res.capacity, res.window)
    easy_util = metrics.utilisation(easy.busy_gpu_s, easy.capacity, easy.window)
    return sc.name, load, seed, util, easy_util, shares


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--scenarios", default="scenarios/lab1node.yaml,scenarios/lab8.yaml")
    ap.add_argument("--loads", default="0.9,1.1")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)
    try:
        loads = [float(x) for x in args.loads.split(",")]
        seeds = [int(x) for x in args.seeds.split(",")]
    except ValueError:
        ap.error(
            "--loads takes numbers and --seeds integers, comma-separated (e.g. --loads 0.9,1.1 --seeds 1,2)"
        )
    paths = [str(ROOT / p) if not Path(p).is_absolute() else p for p in args.scenarios.split(",")]
    for p in paths:
        if not Path(p).exists():
            ap.error(f"no scenario file {p}")
    tasks = [(p, load, seed) for p in paths for load in loads for seed in seeds]
    with multiprocessing.Pool(max(1, args.workers)) as pool:
        rows = pool.map(_one, tasks)
    groups: dict[tuple[str, float], list] = defaultdict(list)
    for name, load, _seed, util, easy_util, shares in rows:
        groups[(name, load)].append((util, easy_util, shares))
    header = ["scenario", "load", "util", "Slurm-EASY util", *CLASSES]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for (name, load), vals in sorted(groups.items()):
        n = len(vals)
        util = sum(v[0] for v in vals) / n
        easy = sum(v[1] for v in vals) / n
        cells = [f"{100 * sum(v[2][c] for v in vals) / n:.1f}%" for c in CLASSES]
        print(f"| {name} | {load} | {util:.3f} | {easy:.3f} | " + " | ".join(cells) + " |")
    print(f"\n(seed averages of {len(seeds)}; shares of the arrival window's GPU-time)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
