"""Synthetic, seeded job traces for scenarios without a real trace (the lab of the brief).

``generate(scenario, seed=..., jobs=..., days=..., mix=...)`` draws arrivals with a weekday/daytime rhythm and a
job mix per tier (GPU count, lognormal duration, urgency, deadlines, bids); users come from the scenario's
department members, so user tiers are the scenario's. The trace is then compressed to the target load like any
other trace (choose ``jobs`` so that the trace's own load is near the target to keep ``days`` of submissions).

``mix`` overrides ``DEFAULT_MIX`` per tier and per key (``{"elastic": {"share": 0.5, "gpus": {8: 0.1, ...}}}``
replaces the elastic share and GPU-count weights and keeps the rest); a tier's keys are ``share``, ``gpus``,
``median_s``, ``sigma``, ``urgency``, ``deadline_fraction`` and ``bid_fraction``. The draws and their order do
not depend on the mix, so a scenario without one (lab8) gets the same trace as before.
"""

from __future__ import annotations

import math
import random

from engine.types import TIERS, URGENCIES

from .errors import ScenarioError
from .trace import TraceRow

# tier -> share of jobs, GPU-count choices (weights), median duration (s), lognormal sigma, urgency weights
DEFAULT_MIX = {
    "realtime": {
        "share": 0.2,
        "gpus": {1: 0.85, 2: 0.15},
        "median_s": 1200,
        "sigma": 0.8,
        "urgency": {"normal": 0.3, "high": 0.5, "critical": 0.2},
    },
    "elastic": {
        "share": 0.45,
        "gpus": {1: 0.35, 2: 0.3, 4: 0.3, 8: 0.05},
        "median_s": 4 * 3600,
        "sigma": 1.0,
        "urgency": {"low": 0.15, "normal": 0.6, "high": 0.2, "critical": 0.05},
        "deadline_fraction": 0.2,
        "bid_fraction": 0.2,
    },
    "backfill": {
        "share": 0.35,
        "gpus": {1: 0.8, 2: 0.2},
        "median_s": 1800,
        "sigma": 1.0,
        "urgency": {"low": 0.7, "normal": 0.3},
    },
}


def _weighted(rng: random.Random, weights: dict) -> object:
    items = sorted(weights.items(), key=lambda kv: str(kv[0]))
    x = rng.random() * sum(w for _, w in items)
    for k, w in items:
        x -= w
        if x < 0:
            return k
    return items[-1][0]


MIX_KEYS = frozenset({"share", "gpus", "median_s", "sigma", "urgency", "deadline_fraction", "bid_fraction"})


def _mix(over: dict | None) -> dict:
    over = over or {}
    for t, m in over.items():
        if t not in TIERS:
            raise ScenarioError(f"trace.mix: unknown tier {t!r}")
        bad = set(m or {}) - MIX_KEYS
        if bad:
            raise ScenarioError(f"trace.mix.{t}: unknown key(s) {', '.join(sorted(bad))}")
        for g in (m or {}).get("gpus", {}):
            if int(g) < 1:
                raise ScenarioError(f"trace.mix.{t}.total_gpus: {g} is not a GPU count")
        for u in (m or {}).get("urgency", {}):
            if u not in URGENCIES:
                raise ScenarioError(f"trace.mix.{t}.urgency: unknown urgency {u!r}")
    mix = {t: dict(DEFAULT_MIX.get(t, {}), **(over.get(t) or {})) for t in sorted(set(DEFAULT_MIX) | set(over))}
    if sum(m["share"] for m in mix.values()) <= 0:
        raise ScenarioError("trace.mix: the tiers' shares add up to 0")
    return mix


def generate(sc, *, seed: int, jobs: int = 1500, days: float = 28.0, mix: dict | None = None,
             max_duration_s: float = 3 * 86400.0) -> list[TraceRow]:
    rng = random.Random(f"{seed}:synthetic")
    mix = _mix(mix)
    users = []
    for d in sorted(sc.departments):
        members = sc.departments[d].members or {f"{d}-u0": "standard"}
        # PIs submit less than students: weight standard 3, senior 2, pi 1
        for u, tier in sorted(members.items()):
            users.append((d, u, {"standard": 3, "senior": 2, "pi": 1}.get(tier, 1)))
    horizon = days * 86400.0
    # arrivals: thinning of a Poisson process with a weekday/daytime intensity
    times = []
    while len(times) < jobs:
        t = rng.random() * horizon
        day = int(t // 86400) % 7
        hour = (t % 86400) / 3600
        w = (1.0 if day < 5 else 0.35) * (1.0 if 8 <= hour < 20 else 0.3)
        if rng.random() < w:
            times.append(t)
    times.sort()
    rows = []
    user_w = {(d, u): w for d, u, w in users}
    for i, t in enumerate(times):
        d, u = _weighted(rng, user_w)
        tier = _weighted(rng, {k: v["share"] for k, v in mix.items()})
        m = mix[tier]
        g = int(_weighted(rng, m["gpus"]))
        dur = min(max_duration_s, max(60.0, rng.lognormvariate(math.log(m["median_s"]), m["sigma"])))
        urgency = _weighted(rng, m["urgency"])
        deadline = None
        if rng.random() < m.get("deadline_fraction", 0.0):
            deadline = t + dur * rng.uniform(1.5, 4.0)
        bid = rng.choice([100, 250, 500, 1000]) if rng.random() < m.get("bid_fraction", 0.0) else 0
        rows.append(
            TraceRow(
                job_id=f"lab-{i:05d}",
                submit_time_s=round(t, 1),
                duration_s=round(dur, 1),
                total_gpus=g,
                department=d,
                user=u,
                tier=tier,
                urgency=urgency,
                deadline_s=None if deadline is None else round(deadline, 1),
                bid=bid,
            )
        )
    return rows
