"""The policy tuner on a week of history from a mis-tuned policy: what it proposes and what that recovers.

    python -m benchmarks.tuner [--scenarios scenarios/lab1node.yaml,scenarios/lab8.yaml] [--loads 0.9,1.1]
                               [--seed 1] [--rounds 2] [--max-replays 24] [--workers 2]

Each scenario's seeded trace, at its offered load, gives the "week": the jobs submitted in its first 7 days,
as the portal's export would hand them to the tuner (trace rows with their recorded run times). The lab runs a
mis-tuned policy that starves realtime work: no realtime headroom, one preemption per window and a two-hour
minimum runtime (``MIS_TUNED``), the rest the defaults. The tuner (``simulator.tuner.tune``, default targets and
bounds) replays that week through ``simulator.whatif.replay``; the proposal is applied and, with ``--rounds``
above 1, the tuner runs again from it on the same week (the daily loop, one day later, on the same history).
Printed: each target's figure under the default policy, the mis-tuned one and each round's proposal, each
round's diff, the replays and the CPU time they took, with the machine's load average."""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

from benchmarks.harness import replay_all, scenario_paths
from engine.policy import DEFAULT_POLICY, policy_to_dict
from simulator import tuner, whatif
from simulator.jobs import prepare
from simulator.policies import Portal
from simulator.scenario import load_scenario
from simulator.trace import TraceRow

WEEK_S = 7 * 86400.0
MIS_TUNED = {"realtime_headroom_gpus": 0, "preemption_rate_limit": 1, "min_runtime_s": 7200.0}


def week_of(path: str, load: float, seed: int):
    """The scenario's first week as trace rows, and what the replay needs of the lab."""
    sc, jobs, info = prepare(load_scenario(path), seed=seed, load=load)
    rows = [TraceRow(j.key, j.submit, j.duration_s, j.total_gpus, j.department, user=j.user, tier=j.tier,
                     urgency=j.urgency, flavor=j.flavor, deadline_s=j.deadline, bid=j.bid,
                     max_runtime_s=j.max_runtime_s, pods=j.pods, checkpoint_interval_s=j.checkpoint_interval_s)
            for j in jobs if j.submit < WEEK_S]
    lab = {
        "node_groups": [{"name": g.name, "count": g.count, "gpus_per_node": g.gpus_per_node, "flavor": g.flavor}
                        for g in sc.node_groups],
        "quotas": {d.name: {f: {"nominal": q.nominal, "borrowing_limit": q.borrowing_limit,
                                "lending_limit": q.lending_limit} for f, q in d.quotas.items()}
                   for d in sc.departments.values()},
        "members": {d.name: dict(d.members) for d in sc.departments.values()},
        "options": sc.options,
    }
    return rows, lab, info


def _one(task):
    path, load, seed, rounds, max_replays = task
    c0 = time.process_time()
    rows, lab, info = week_of(path, load, seed)

    def evaluate(doc):
        meter = tuner.IdleMeter(Portal())
        s = whatif.replay(rows, policy=whatif.overrides_of(doc), decide=meter, **lab)
        s["idle_while_waiting"] = meter.share
        return s

    default = {k: v for k, v in policy_to_dict(DEFAULT_POLICY).items() if k != "version"}
    bad = dict(default, **MIS_TUNED)
    config = tuner.TunerConfig(max_replays=max_replays)
    default_summary = evaluate(default)
    out = {"jobs": len(rows), "realtime_jobs": sum(1 for r in rows if r.tier == "realtime"), "rho": info["rho"],
           "default_summary": default_summary, "rounds": []}
    doc = bad
    for _ in range(rounds):
        c = time.process_time()
        t = tuner.tune(evaluate, doc, config)
        out["rounds"].append({"tuning": t.to_dict(), "cpu_s": time.process_time() - c})
        if t.proposal is None:
            break
        doc = t.proposal
    out["cpu_s"] = time.process_time() - c0
    return (Path(path).stem, load), out


def _f(v) -> str:
    return "—" if v is None else f"{v:.3f}"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--scenarios", default="scenarios/lab1node.yaml,scenarios/lab8.yaml")
    ap.add_argument("--loads", default="0.9,1.1")
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--max-replays", type=int, default=24)
    ap.add_argument("--workers", type=int, default=2)
    a = ap.parse_args()
    tasks = [(p, float(load), a.seed, a.rounds, a.max_replays)
             for p in scenario_paths(a.scenarios) for load in a.loads.split(",")]
    run = replay_all(_one, tasks, a.workers)
    results = run.rows
    print(f"mis-tuned policy: {MIS_TUNED} (the rest the defaults); default targets and bounds; seed {a.seed}\n")
    for (sc, load), out in results:
        rounds = out["rounds"]
        first = rounds[0]["tuning"]
        names = list(first["current"])
        dflt = tuner.figures(out["default_summary"], [n[5:] for n in names if n.startswith("dept:")])
        print(f"## {sc} at offered load {load:g}: {out['jobs']} jobs in the week ({out['realtime_jobs']} realtime)\n")
        head = "| target | limit | default policy | mis-tuned |" + "".join(
            f" round {i + 1} proposal |" for i in range(len(rounds)))
        print(head)
        print("|---" * (4 + len(rounds)) + "|")
        for n in names:
            lim = first["limits"][n]
            cells = [_f((r["tuning"]["predicted"] or {}).get(n)) if r["tuning"]["proposal"] else "no proposal"
                     for r in rounds]
            print(f"| {n} | {'>=' if lim['at_least'] else '<='} {lim['limit']:g} | {_f(dflt.get(n))} | "
                  f"{_f(first['current'].get(n))} | " + " | ".join(cells) + " |")
        print()
        for i, r in enumerate(rounds):
            t = r["tuning"]
            diff = ", ".join(f"{d['field']} {d['old']:g} -> {d['new']:g}" for d in t["diff"]) or t["reason"]
            print(f"- round {i + 1}: {t['replays']} replays, {r['cpu_s']:.1f} s CPU; {diff}; improves "
                  f"{', '.join(t['improves']) or '-'}; costs {', '.join(t['costs']) or '-'}")
        print()
    cpu = sum(out["cpu_s"] for _, out in results)
    print(f"CPU {cpu:.1f} s in all (replays of every round and the default policy's); wall {run.wall_s:.1f} s on "
          f"{a.workers} workers; load average {run.load_start:.2f} -> {run.load_end:.2f} on {os.cpu_count()} cores")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
