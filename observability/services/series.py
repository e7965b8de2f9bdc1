"""Pure arithmetic over one attempt's GPU series: aggregates, idle streaks, the chart's downsampling.

No Django here: sources (Prometheus, the simulated cluster) hand over plain numbers, and the tests feed it
hand-made series.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

# A GPU between these two is neither starved nor busy; a series that keeps crossing from below LOW to above
# HIGH is a saw-tooth (a data loader that cannot keep up).
LOW_PCT = 20.0
HIGH_PCT = 70.0


@dataclass
class GpuSeries:
    """Samples of one attempt, per GPU (key: pod/gpu), at offsets in seconds since the attempt started."""

    step_s: int
    util: dict[str, dict[int, float]] = field(default_factory=dict)  # percent
    fb_used: dict[str, dict[int, float]] = field(default_factory=dict)  # MiB
    fb_free: dict[str, dict[int, float]] = field(default_factory=dict)  # MiB
    engine_active: dict[str, dict[int, float]] = field(default_factory=dict)  # 0-1
    host_memory_peak_mib: float | None = None
    source: str = ""  # what measured it, where not the source's own name (a fraction's HAMi series: "hami")


@dataclass(frozen=True)
class Aggregates:
    samples: int
    gpus_seen: int
    mean_util: float | None
    p95_util: float | None
    busy_gpus: float | None
    engine_active: float | None
    peak_memory_mib: float | None
    memory_total_mib: float | None
    idle_minutes: float
    idle_streak_minutes: float
    shape: dict
    series: list[list[float]]


def percentile(values: list[float], q: float) -> float | None:
    """Nearest-rank percentile (q in 0..100) of ``values``; None when empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(q / 100 * len(ordered)))
    return ordered[rank - 1]


def downsample(points: list[tuple[int, float, float | None]], limit: int) -> list[list[float]]:
    """At most ``limit`` points: consecutive buckets, utilisation averaged and memory at its peak, so a memory
    spike survives the chart and the utilisation's area stays right."""
    if not points:
        return []
    size = max(1, math.ceil(len(points) / limit))
    out = []
    for i in range(0, len(points), size):
        bucket = points[i:i + size]
        mems = [m for _, _, m in bucket if m is not None]
        out.append([bucket[0][0], round(sum(u for _, u, _ in bucket) / len(bucket), 2),
                    round(max(mems), 1) if mems else None])
    return out


def aggregate(series: GpuSeries, *, idle_below_pct: float, chart_points: int = 120) -> Aggregates:
    times = sorted({t for per_gpu in series.util.values() for t in per_gpu})
    all_values: list[float] = []
    means: list[float] = []
    busy: list[float] = []
    idle_flags: list[bool] = []
    points: list[tuple[int, float, float | None]] = []
    for t in times:
        values = [per_gpu[t] for per_gpu in series.util.values() if t in per_gpu]
        mems = [per_gpu[t] for per_gpu in series.fb_used.values() if t in per_gpu]
        all_values += values
        means.append(sum(values) / len(values))
        busy.append(sum(values) / 100)
        idle_flags.append(max(values) < idle_below_pct)
        points.append((t, means[-1], max(mems) if mems else None))
    used = [v for per_gpu in series.fb_used.values() for v in per_gpu.values()]
    totals = [u + series.fb_free[g][t] for g, per_gpu in series.fb_used.items() for t, u in per_gpu.items()
              if t in series.fb_free.get(g, {})]
    active = [v for per_gpu in series.engine_active.values() for v in per_gpu.values()]
    streak = 0
    for flag in reversed(idle_flags):
        if not flag:
            break
        streak += 1
    minutes = series.step_s / 60
    return Aggregates(
        samples=len(times),
        gpus_seen=len(series.util),
        mean_util=_round(sum(all_values) / len(all_values)) if all_values else None,
        p95_util=_round(percentile(means, 95)),
        busy_gpus=_round(sum(busy) / len(busy)) if busy else None,
        engine_active=_round(sum(active) / len(active), 3) if active else None,
        peak_memory_mib=_round(max(used)) if used else None,
        memory_total_mib=_round(max(totals)) if totals else None,
        idle_minutes=_round(sum(idle_flags) * minutes),
        idle_streak_minutes=_round(streak * minutes),
        shape=shape(means),
        series=downsample(points, chart_points),
    )


def shape(means: list[float]) -> dict:
    """Share of samples below LOW_PCT and above HIGH_PCT, and how many times the series swung between them."""
    if not means:
        return {}
    swings, last = 0, None
    for v in means:
        side = "low" if v < LOW_PCT else "high" if v > HIGH_PCT else None
        if side and last and side != last:
            swings += 1
        last = side or last
    return {"low": _round(sum(v < LOW_PCT for v in means) / len(means), 3),
            "high": _round(sum(v > HIGH_PCT for v in means) / len(means), 3), "swings": swings}


def _round(value: float | None, digits: int = 2) -> float | None:
    return None if value is None else round(value, digits)
