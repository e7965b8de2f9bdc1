"""GPU efficiency per member and per department, by week, from the measured use of each attempt
(``AttemptUsage``): what was held against what was used, the idle hours, and the right-sizing savings not taken.

Per attempt, in the job's own time (its GPU series is sampled on the clock the job ran by, so a demo job sped up
by ``SIM_SPEEDUP`` counts the hours it ran, as its charge does):

* **held** GPU-hours: the GPUs it held x the time its series covers (samples x step); a fraction of a GPU
  holds its share (``Job.share_milli``), what its quota and price count;
* **used** GPU-hours: its mean busy GPUs (the sum of utilisation / 100) x that time;
* **idle** GPU-hours: the minutes every GPU of the attempt was idle x its GPUs;
* **savings not taken**: the GPU-hours it would have left to others had it asked for the GPUs right-sizing
  recommends for what it used (``rightsizing.whole_gpus``): (held GPUs - recommended) x that time.

Rows are grouped by ISO week (Monday, UTC) of the attempt's start, and by department, or by department and
member. What a user sees is what ``AttemptUsage.objects.restrict(user, VIEW)`` lets them see: their own
department's members (a platform admin: every department's), never another department's.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

from observability.services.rightsizing import whole_gpus

GROUPS = ("department", "user")
COLUMNS = ("week", "department", "user", "attempts", "held_gpu_hours", "used_gpu_hours", "efficiency",
           "idle_gpu_hours", "savings_gpu_hours")


def week_of(when: datetime) -> str:
    """The ISO week's Monday (UTC) of ``when``, as YYYY-MM-DD."""
    day = when.date() if when.tzinfo is None else when.astimezone(UTC).date()
    return (day - timedelta(days=day.weekday())).isoformat()


def attempt_figures(*, gpus: float, samples: int, step_s: int, busy_gpus: float | None,
                    idle_minutes: float) -> dict[str, float]:
    """(held, used, idle, savings) GPU-hours of one attempt, as the module says."""
    hours = max(0, samples) * max(0, step_s) / 3600
    held = gpus * hours
    used = min(held, (busy_gpus or 0.0) * hours)
    idle = min(held, (idle_minutes or 0.0) / 60 * gpus)
    recommended = whole_gpus(busy_gpus, gpus) if busy_gpus is not None and gpus else gpus
    savings = max(0, gpus - recommended) * hours
    return {"held": held, "used": used, "idle": idle, "savings": savings}


def efficiency_report(*, usages, group_by: str = "user", since: datetime | None = None,
                      until: datetime | None = None, department: str | None = None) -> list[dict]:
    """One row per week and department (``group_by="department"``) or week, department and member
    (``"user"``), newest week first, then by name. ``usages``: an ``AttemptUsage`` queryset already cut to
    what the reader may see. One query."""
    if group_by not in GROUPS:
        raise ValueError(f"group_by: one of {', '.join(GROUPS)}")
    qs = usages.filter(samples__gt=0)
    if since is not None:
        qs = qs.filter(started_at__gte=since)
    if until is not None:
        qs = qs.filter(started_at__lt=until)
    if department:
        qs = qs.filter(job__department__slug=department)
    sums: dict[tuple, dict] = defaultdict(lambda: {"attempts": 0, "held": 0.0, "used": 0.0, "idle": 0.0,
                                                   "savings": 0.0})
    for started, dept, user, gpus, share_milli, samples, step_s, busy, idle in qs.order_by().values_list(
            "started_at", "job__department__slug", "job__owner__username", "gpus", "job__share_milli", "samples",
            "step_s", "busy_gpus", "idle_minutes"):
        key = (week_of(started), dept, user if group_by == "user" else None)
        row = sums[key]
        row["attempts"] += 1
        held = share_milli / 1000 if share_milli else gpus
        for name, value in attempt_figures(gpus=held, samples=samples, step_s=step_s, busy_gpus=busy,
                                           idle_minutes=idle).items():
            row[name] += value
    out = []
    for (week, dept, user), s in sums.items():
        out.append({"week": week, "department": dept, "user": user, "attempts": s["attempts"],
                    "held_gpu_hours": round(s["held"], 3), "used_gpu_hours": round(s["used"], 3),
                    "efficiency": round(s["used"] / s["held"], 3) if s["held"] else None,
                    "idle_gpu_hours": round(s["idle"], 3), "savings_gpu_hours": round(s["savings"], 3)})
    out.sort(key=lambda r: (-int(r["week"].replace("-", "")), r["department"] or "", r["user"] or ""))
    return out
