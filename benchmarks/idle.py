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

With resizable jobs (the ``-resizable`` scenarios) two classes come first. ``held for a grow's answer``: the
new GPUs of a grow that waits for the job's answer (the engine sees them in the job's placement, the job does not
compute on them yet); ``freed by a shrink, not yet reused``: GPUs a finished shrink gave back that are still
free after the cycles since (counted until one of them takes them).

The shares are of the whole GPU-time of the arrival window (the window utilisation is measured on), so they
add up with the utilisation to about 1 (work that runs on past the window is not idle). Slurm-EASY's idle
share is printed beside them: the gap to the best baseline is what the classes have to explain.

A second table follows each job larger than its department's nominal quota for its flavor through its waits:
the share of its waiting time (cycle to cycle) spent on quota reasons, on capacity and reservation reasons, and
holding a reservation of its own (``reserved_from`` in its detail), beside its average wait and Slurm-EASY's for
the same jobs.
"""

from __future__ import annotations

import argparse
import multiprocessing
import sys
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import reasons  # noqa: E402
from simulator import metrics, policies  # noqa: E402
from simulator.jobs import prepare  # noqa: E402
from simulator.scenario import load_scenario  # noqa: E402
from simulator.simulator import simulate  # noqa: E402
from simulator.tuner import free_gpus_after  # noqa: E402

CLASSES = (
    "held for a grow's answer",
    "freed by a shrink, not yet reused",
    "nothing pending",
    "victims leaving",
    "held for a reservation",
    "held by quota",
    "realtime headroom",
    "no pending job fits",
)
RESERVATION = {reasons.RESERVED_FOR_HEAD, reasons.WAITING_FOR_HIGHER_PRIORITY}
QUOTA = {reasons.QUOTA_EXHAUSTED, reasons.QUOTA_LENT_OUT, reasons.BORROW_LIMIT}


free_after = free_gpus_after  # the tuner's idle meter counts the same free GPUs


def fits(job, nodes: list[int]) -> bool:
    return sum(f // job.gpus_per_pod for f in nodes) >= job.pods


def classify(snap, result, shrunk: dict[str, int] | None = None,
             grown: dict[str, int] | None = None) -> dict[str, int]:
    """Idle GPUs after one cycle, per class. ``grown`` (node -> GPUs) are free GPUs this cycle's grows hold from
    now on (the caller counts them as held for the answer); ``shrunk`` (node -> GPUs a finished shrink gave back
    there and nobody took since) is cut to what is still free and counted first."""
    jobs = {j.id: j for j in snap.pending}
    by_flavor: dict[str, list] = defaultdict(list)  # flavor -> [(waiting job, its reason code)]
    for r in result.pending:
        job = jobs[r.job_id]
        by_flavor[job.flavor].append((job, r.code))
    out: dict[str, int] = defaultdict(int)
    apart: dict[str, int] = defaultdict(int)  # flavor -> free GPUs counted apart (held for a grow, shrunk)
    if shrunk is not None or grown:
        flavor_of = {n.name: n.flavor for n in snap.nodes}
        free = free_by_node(snap, result)
        for name, gpus in (grown or {}).items():
            free[name] = free.get(name, 0) - gpus
            apart[flavor_of[name]] += gpus
        for name in list(shrunk or ()):
            shrunk[name] = min(shrunk[name], max(0, free.get(name, 0)))
            if shrunk[name] <= 0:
                del shrunk[name]
            else:
                out["freed by a shrink, not yet reused"] += shrunk[name]
                apart[flavor_of[name]] += shrunk[name]
    for flavor, nodes in free_after(snap, result).items():
        idle = sum(nodes) - apart.get(flavor, 0)
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


def free_by_node(snap, result) -> dict[str, int]:
    """Free GPUs per node after a cycle's admissions (as ``free_after``, by node name)."""
    free = {n.name: n.gpus - n.used_by_others for n in snap.nodes if n.schedulable and not n.taints and n.gpus}
    pending = {j.id: j for j in snap.pending}
    for job, g in [(j, j.gpus_per_pod) for j in snap.running] + [
            (a, pending[a.job_id].gpus_per_pod) for a in result.admissions]:
        for name in job.placement:
            if name in free:
                free[name] -= g
    return {name: max(0, f) for name, f in free.items()}


def large_jobs(snap) -> dict[int, object]:
    """The pending jobs larger than their department's nominal quota of their flavor (global quotas)."""
    nominal: dict[tuple[str, str], int] = defaultdict(int)
    for q in snap.quotas:
        if q.cluster is None:
            nominal[(q.department, q.flavor)] += q.nominal
    return {j.id: j for j in snap.pending if j.total_gpus > nominal[(j.department, j.flavor)]}


def large_waits(snap, result) -> dict[int, tuple[str, bool]]:
    """Each waiting large job's (reason code, whether it holds a reservation) after one cycle."""
    large = large_jobs(snap)
    return {r.job_id: (r.code, "reserved_from" in r.detail) for r in result.pending if r.job_id in large}


class Recording(policies.Portal):
    """The portal's engine, recording each cycle's idle GPUs per class and the large jobs' reasons."""

    def __init__(self):
        self.cycles: list[tuple[float, dict[str, int]]] = []
        self.waits: list[tuple[float, dict[int, tuple[str, bool]]]] = []
        # resizes decided and not yet done: job -> (GPUs a grow adds, {node: GPUs a shrink gives back})
        self.resizing: dict[int, tuple[int, dict[str, int]]] = {}
        self.shrunk: dict[str, int] = {}  # node -> GPUs finished shrinks gave back that nobody took yet

    def __call__(self, snap):
        running = {j.id: j for j in snap.running}
        held = 0
        for job_id, (grown, freed) in list(self.resizing.items()):
            job = running.get(job_id)
            if job is not None and job.resizing:
                held += grown
                continue
            del self.resizing[job_id]  # done (or the job ended): a shrink's pods are free from now on
            if job is not None:
                for name, gpus in freed.items():
                    self.shrunk[name] = self.shrunk.get(name, 0) + gpus
        result = super().__call__(snap)
        grown: dict[str, int] = defaultdict(int)  # node -> free GPUs this cycle's grows hold from now on
        for rz in result.resizes:
            job = running[rz.job_id]
            before, after = list(job.placement), list(rz.placement)
            for name in rz.placement:
                if name in before:
                    before.remove(name)
            for name in job.placement:
                if name in after:
                    after.remove(name)
            freed: dict[str, int] = defaultdict(int)
            for name in before:
                freed[name] += job.gpus_per_pod
            self.resizing[rz.job_id] = (len(after) * job.gpus_per_pod, dict(freed))
            held += len(after) * job.gpus_per_pod
            for name in after:
                grown[name] += job.gpus_per_pod
        idle = classify(snap, result, self.shrunk, grown)
        if held:
            idle["held for a grow's answer"] = held
        self.cycles.append((snap.now, idle))
        self.waits.append((snap.now, large_waits(snap, result)))
        return result


WAIT_CLASSES = ("quota", "capacity or reservation", "other", "holds a reservation")


def wait_shares(waits) -> dict[str, float]:
    """Shares of the large jobs' waiting time (each cycle's reason held until the next cycle) per class; a
    reservation is held under a quota reason as well as under a capacity one, so that line is apart."""
    total = defaultdict(float)
    whole = 0.0
    for (t, rows), (t_next, _) in zip(waits, waits[1:], strict=False):
        span = t_next - t
        for code, reserved in rows.values():
            whole += span
            if code in QUOTA:
                total["quota"] += span
            elif code in CAPACITY:
                total["capacity or reservation"] += span
            else:
                total["other"] += span
            if reserved:
                total["holds a reservation"] += span
    return {c: total[c] / whole if whole > 0 else 0.0 for c in WAIT_CLASSES}


CAPACITY = RESERVATION | {reasons.NO_CAPACITY, reasons.NO_FITTING_NODE}


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
    nominal: dict[tuple[str, str], int] = defaultdict(int)
    for name, dept in sc.departments.items():
        for flavor, q in dept.quotas.items():
            nominal[(name, flavor)] += q.nominal
    large = {s.id for s in jobs if s.total_gpus > nominal[(s.department, s.flavor)]}
    return sc.name, load, seed, util, easy_util, shares, (
        wait_shares(rec.waits), _first_wait(res, large), _first_wait(easy, large)
    )


def _first_wait(res, ids: set[int]) -> float:
    """The average first wait (submission to first start) of the jobs ``ids`` that started."""
    waits = [r.first_start - r.spec.submit for r in res.jobs if r.spec.id in ids and r.first_start is not None]
    return sum(waits) / len(waits) if waits else float("nan")


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
    for name, load, _seed, util, easy_util, shares, large in rows:
        groups[(name, load)].append((util, easy_util, shares, large))
    header = ["scenario", "load", "util", "Slurm-EASY util", *CLASSES]
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for (name, load), vals in sorted(groups.items()):
        n = len(vals)
        util = sum(v[0] for v in vals) / n
        easy = sum(v[1] for v in vals) / n
        cells = [f"{100 * sum(v[2][c] for v in vals) / n:.1f}%" for c in CLASSES]
        print(f"| {name} | {load} | {util:.3f} | {easy:.3f} | " + " | ".join(cells) + " |")
    print(f"\n(seed averages of {len(seeds)}; shares of the arrival window's GPU-time)\n")
    header = ["scenario", "load", *(f"{c}" for c in WAIT_CLASSES), "wait (portal)", "wait (Slurm-EASY)"]
    print("Jobs larger than their department's nominal quota: shares of their waiting time\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for (name, load), vals in sorted(groups.items()):
        n = len(vals)
        cells = [f"{100 * sum(v[3][0][c] for v in vals) / n:.0f}%" for c in WAIT_CLASSES]
        portal = sum(v[3][1] for v in vals) / n / 3600
        easy = sum(v[3][2] for v in vals) / n / 3600
        print(f"| {name} | {load} | " + " | ".join(cells) + f" | {portal:.1f} h | {easy:.1f} h |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
