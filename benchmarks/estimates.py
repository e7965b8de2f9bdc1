"""How much predicted run times shrink the error of start estimates, measured in the trace simulator.

    python -m benchmarks.estimates [--scenario scenarios/lab8.yaml] [--limit 600] [--seed 1]

One replay under the portal's policy; at every cycle the engine's start estimates are asked twice on the
same snapshot (the decisions do not depend on them): once as the portal made them before right-sizing fed
them (every job runs to its ``max_runtime_s``) and once with each job's predicted run time (its user's
earlier jobs' run times, smoothed exactly as right-sizing does, alpha 0.3, x1.2 headroom, never past the max
runtime; ``observability/services/rightsizing.py``). For every job that got an estimate, the first estimate
it got is compared with when it really started. The simulator learns a run time when a job finishes, as the
portal does when an attempt's usage is settled; a user's first job has no prediction.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from engine import schedule  # noqa: E402 - after the path set-up above
from simulator import policies  # noqa: E402
from simulator.runner import prepared_scenario  # noqa: E402
from simulator.simulator import simulate  # noqa: E402

ALPHA, HEADROOM = 0.3, 1.2  # right-sizing's smoothing and headroom


class Measuring:
    """Wraps the portal's policy: decides as it does, and records both estimates of every pending job."""

    def __init__(self, decide):
        self.decide = decide
        self.time_dependent = getattr(decide, "time_dependent", True)
        self.ctx = None
        self.learned: set[int] = set()
        self.ewma: dict[str, float] = {}
        self.first: dict[str, dict[int, float]] = {"max_runtime": {}, "predicted": {}}

    def bind(self, ctx):
        self.ctx = ctx
        if hasattr(self.decide, "bind"):
            self.decide.bind(ctx)

    def _learn(self):
        for job_id, rec in self.ctx._sim.records.items():
            if rec.state == "done" and job_id not in self.learned:
                self.learned.add(job_id)
                user, run = rec.spec.user, rec.spec.duration_s  # its run time (a preempted attempt resumed)
                old = self.ewma.get(user)
                self.ewma[user] = run if old is None else ALPHA * run + (1 - ALPHA) * old

    def _predicted(self, job):
        p = self.ewma.get(self.ctx._sim.records[job.id].spec.user)
        return None if p is None else p * HEADROOM

    def __call__(self, snap):
        result = self.decide(snap)
        if not snap.pending:
            return result
        self._learn()
        plain = schedule(replace(snap, estimates=True))
        pred = schedule(replace(
            snap, estimates=True,
            pending=tuple(replace(j, predicted_runtime_s=self._predicted(j)) for j in snap.pending),
            running=tuple(replace(j, predicted_runtime_s=self._predicted(j)) for j in snap.running)))
        for name, res in (("max_runtime", plain), ("predicted", pred)):
            seen = self.first[name]
            for r in res.pending:
                if r.estimated_start is not None and r.job_id not in seen:
                    seen[r.job_id] = r.estimated_start
        return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--scenario", default=str(ROOT / "scenarios" / "lab8.yaml"))
    ap.add_argument("--limit", type=int, default=600)
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args(argv)
    sc, jobs, info = prepared_scenario(str(Path(args.scenario).resolve()), args.seed, None, None, args.limit)
    measuring = Measuring(policies.make("portal"))
    res = simulate(scenario=sc, jobs=jobs, policy=measuring, name="portal")
    starts = {r.spec.id: r.first_start for r in res.jobs if r.first_start is not None}
    both = sorted(set(measuring.first["max_runtime"]) & set(measuring.first["predicted"]) & set(starts))
    print(f"{sc.name}: {len(jobs)} jobs, load {info['rho']:.2f}, {len(both)} jobs got an estimate while waiting")
    for name in ("max_runtime", "predicted"):
        errors = [abs(measuring.first[name][i] - starts[i]) / 60 for i in both]
        signed = [(measuring.first[name][i] - starts[i]) / 60 for i in both]
        print(f"  {name:12s} mean |error| {statistics.fmean(errors):7.1f} min   median {statistics.median(errors):6.1f} min"
              f"   mean error {statistics.fmean(signed):+7.1f} min")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
