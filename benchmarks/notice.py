"""GPU-hours lost to preemption with notice before preemption against without it.

    python -m benchmarks.notice [--scenarios scenarios/lab1node.yaml,scenarios/lab8.yaml] [--loads 0.9,1.1]
                                [--seeds 1,2,3] [--notice 300] [--workers 2]

Each seeded trace is replayed by the portal's policy three times: without notice (a victim is evicted at once,
keeping its last periodic checkpoint), with every job declaring ``--notice`` seconds and answering "checkpoint
written" in half of it (then evicted at once, losing only its grace period), and with the same notice but no
answer (evicted at the notice's end). Beside the lost GPU-hours: how much of the loss notice saves, the
realtime starts within 5 minutes (notice delays the preemptor) and the utilisation, with the offered load. The
CPU time of the replays and the machine's load average are printed, as the figures depend on both."""

from __future__ import annotations

import argparse
import time
from dataclasses import replace
from pathlib import Path

from benchmarks.harness import mean, replay_all, scenario_paths
from simulator import metrics, policies
from simulator.jobs import prepare
from simulator.scenario import load_scenario
from simulator.simulator import simulate

VARIANTS = ("none", "answered", "unanswered")


def _one(task):
    path, load, seed, variant, notice = task
    c0 = time.process_time()
    sc, jobs, info = prepare(load_scenario(path), seed=seed, load=load)
    if variant != "none":
        sc = replace(sc, options=replace(sc.options, notice_s=float(notice),
                                         notice_answer=0.5 if variant == "answered" else None))
    res = simulate(scenario=sc, jobs=jobs, policy=policies.make("portal"), name="portal")
    m = metrics.compute(res, rho=info["rho"], keep_samples=False)
    return (Path(path).stem, load, variant), {
        "lost": m["gpu_hours_lost_preemption"], "preemptions": m["preemptions"], "rt": m["realtime_within_5min"],
        "util": m["utilisation"], "rho": info["rho"], "answered": m["notices_answered"],
        "cpu_s": time.process_time() - c0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="scenarios/lab1node.yaml,scenarios/lab8.yaml")
    ap.add_argument("--loads", default="0.9,1.1")
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--notice", type=float, default=300.0, help="the notice every job declares, in seconds")
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    tasks = [(p, float(load), int(seed), variant, a.notice)
             for p in scenario_paths(a.scenarios) for load in a.loads.split(",") for seed in a.seeds.split(",")
             for variant in VARIANTS]
    run = replay_all(_one, tasks, a.workers)
    agg = run.by_key()

    def avg(key, field):
        return mean(agg[key], field)

    seeds = len(a.seeds.split(","))
    print(f"notice {a.notice:g} s, jobs answer in half of it; portal policy; mean of {seeds} seed(s)\n")
    print("| scenario | offered load | GPU-h lost, no notice | with notice, answered | saved | with notice, "
          "no answer | saved | preemptions | realtime <= 5 min (none / answered) | utilisation (none / answered) |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for sc, load in sorted({k[:2] for k in agg}):
        none, ans, silent = ((sc, load, v) for v in VARIANTS)
        base = avg(none, "lost")

        def saved(key, base=base):
            return f"{100 * (1 - avg(key, 'lost') / base):.0f}%" if base > 0 else "n/a"

        print(f"| {sc} | {load} (rho {avg(none, 'rho'):.2f}) | {base:.1f} | {avg(ans, 'lost'):.1f} | {saved(ans)} | "
              f"{avg(silent, 'lost'):.1f} | {saved(silent)} | {avg(none, 'preemptions'):.0f} / "
              f"{avg(ans, 'preemptions'):.0f} | {avg(none, 'rt'):.1%} / {avg(ans, 'rt'):.1%} | "
              f"{avg(none, 'util'):.3f} / {avg(ans, 'util'):.3f} |")
    print("\n" + run.summary(sum(o["cpu_s"] for _, o in run.rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
