"""What teams inside departments cost the engine: ``python -m benchmarks.teams [--cells 10000x1000] [--runs 5]``.

For each cell (pending x GPU nodes) it builds the engine benchmark's snapshot (``benchmarks.engine``: ten
departments in one cohort) and the same snapshot with every department split into three teams (40%, 30% and 20%
of its nominal, the rest unassigned; the first team keeps a quarter of its nominal as its guaranteed part, held
while idle; ``--kept 1``: all of it), every job given a team (10% none), and each team some decayed history. It reports the cycle's CPU time
(``time.process_time``, median of the runs, the two measured alternately so that a neighbour's load falls on
both alike), the ratio, the admissions of each and the load average. The issue's bound: within 1.2x of the
snapshot without teams.
"""

from __future__ import annotations

import argparse
import random
import sys
from dataclasses import replace

from benchmarks.engine import DEPTS, load_average, make_snapshot, parse_cells
from benchmarks.harness import alternately, cell_options, verdict
from engine import schedule
from engine.types import Snapshot, TeamQuota

# (name, share of the department's nominal, share of its own nominal it keeps for itself: its guaranteed part)
TEAMS = (("t0", 0.4, 0.25), ("t1", 0.3, 0.0), ("t2", 0.2, 0.0))


def with_teams(snap: Snapshot, seed: int = 13, kept: float | None = None) -> Snapshot:
    """``snap`` with every department split into ``TEAMS`` (``kept``: the first team's guaranteed share of its
    own nominal instead of 25%)."""
    rnd = random.Random(seed)
    quotas = []
    for q in snap.quotas:
        for i, (name, share, keep) in enumerate(TEAMS):
            nominal = int(q.nominal * share)
            keep = kept if kept is not None and i == 0 else keep
            quotas.append(TeamQuota(q.department, name, q.flavor, nominal, None, nominal - int(nominal * keep)))

    def team() -> str:
        return "" if rnd.random() < 0.1 else rnd.choice(TEAMS)[0]

    return replace(
        snap,
        running=tuple(replace(j, team=team()) for j in snap.running),
        pending=tuple(replace(j, team=team()) for j in snap.pending),
        team_quotas=tuple(quotas),
        team_usage={(d, name): rnd.uniform(0, 1e6) for d in DEPTS for name, _, _ in TEAMS},
    )


def measure(pending: int, nodes: int, runs: int, kept: float | None = None) -> dict[str, float]:
    flat = make_snapshot(pending, nodes)
    split = with_teams(flat, kept=kept)
    admitted = {"flat": len(schedule(flat).admissions), "teams": len(schedule(split).admissions)}
    cost = alternately(flat, split, runs)
    return {"pending": pending, "nodes": nodes, "flat_s": cost.first_s, "teams_s": cost.second_s,
            "ratio": cost.ratio, "admitted_flat": admitted["flat"],
            "admitted_teams": admitted["teams"]}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    cell_options(parser)
    parser.add_argument("--kept", type=float, default=None,
                        help="the first team's guaranteed share of its nominal (default 0.25; 1: it lends nothing)")
    args = parser.parse_args(argv)
    print("| pending x GPU nodes | without teams CPU s | 3 teams a department CPU s | ratio | admitted "
          "(without / with) | load average |")
    print("|---|---|---|---|---|---|")
    worst = 0.0
    for pending, nodes in parse_cells(args.cells):
        row = measure(pending, nodes, args.runs, args.kept)
        worst = max(worst, row["ratio"])
        print(f"| {pending} x {nodes} | {row['flat_s']:.3f} | {row['teams_s']:.3f} | {row['ratio']:.2f}x | "
              f"{row['admitted_flat']} / {row['admitted_teams']} | {load_average()} |", flush=True)
    return verdict(worst)


if __name__ == "__main__":
    sys.exit(main())
