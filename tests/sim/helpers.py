"""Builders for small pure simulator tests."""

from __future__ import annotations

from simulator.scenario import parse_scenario
from simulator.trace import TraceRow


def small_scenario(**over):
    data = {
        "name": "tiny",
        "cluster": {"node_groups": [{"name": "n", "count": 2, "gpus_per_node": 4, "flavor": "a100"}]},
        "departments": {
            "a": {"quotas": {"a100": {"nominal": 4}}, "members": {"alice": "pi", "al": "standard"}},
            "b": {"quotas": {"a100": {"nominal": 4}}, "members": {"bob": "senior"}},
        },
        "simulation": {"tick_s": 300, "preemption_grace_s": 30, "checkpoint_interval_s": 600, "strict": True},
    }
    data.update(over)
    return parse_scenario(data)


def rows(n=60, seed=0):
    import random

    rng = random.Random(seed)
    out = []
    t = 0.0
    tiers = ["realtime", "elastic", "backfill"]
    for i in range(n):
        t += rng.expovariate(1 / 400)
        out.append(
            TraceRow(
                job_id=f"j{i}", submit_time_s=round(t, 1), duration_s=round(rng.uniform(200, 4000), 1),
                total_gpus=rng.choice([1, 1, 2, 4, 8]), department=rng.choice(["a", "b"]),
                tier=tiers[i % 3], urgency=rng.choice(["normal", "high", "critical", "low"]),
                deadline_s=round(t + 9000, 1) if i % 5 == 0 else None,
            )
        )
    return out
