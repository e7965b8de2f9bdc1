"""Reports, all read from the ledger: usage and spend, monthly statements, burn rate, a job's cost.

Invariants: nothing here writes; every figure is a sum of ledger entries (so a statement reconciles by
construction: opening + movements = closing); costs of running attempts go through ``pricing.cost_of`` at
their hold's rate; ``usage_report`` is one query and scoped to what the user may see.
"""

from __future__ import annotations

import calendar
from collections import defaultdict
from datetime import date, datetime, timedelta
from typing import Any

from django.db.models import Count, Q, Sum
from django.db.models.functions import TruncDay, TruncMonth
from django.utils import timezone

from portal.models import Department
from quotas import ports
from quotas.models import LedgerEntry, LedgerKind, Wallet
from quotas.services.pricing import cost_of
from quotas.services.settlement import attempt_usage, hold_speedup
from quotas.services.wallets import open_holds_in


def burn_rate(*, wallet: Wallet, now: datetime | None = None, days: int = 7) -> dict[str, int]:
    """Net spend per day over the last ``days`` days, and the rate (mcr/hour) of the attempts running now."""
    return burn_rates(wallets=[wallet], now=now, days=days)[wallet.pk]


def burn_rates(*, wallets: list[Wallet], now: datetime | None = None, days: int = 7) -> dict[int, dict[str, int]]:
    """``burn_rate`` of several wallets, by wallet id, in two queries however many wallets (the wallets page
    read two per wallet).

    Two paces, and the days each leaves: ``per_day`` is the net spend per day over the last ``days`` days, and
    ``running_per_hour`` what the attempts running now cost per hour of the wall clock (their rate x GPUs x
    the speed-up of the cluster they run on: on the demo's simulated cluster an hour of a job passes in a
    minute). ``days_left`` is the sooner of the two (``days_left_now`` at the current burn,
    ``days_left_average`` at the average): a department in its first busy week runs out at its current burn,
    however quiet its last seven days were. None when that pace spends nothing."""
    now = now or timezone.now()
    ids = [w.pk for w in wallets]
    spent = dict(LedgerEntry.objects.filter(wallet_id__in=ids, created_at__gte=now - timedelta(days=days),
                                            kind__in=(LedgerKind.SETTLE, LedgerKind.REFUND))
                 .order_by().values("wallet_id").annotate(s=Sum("amount")).values_list("wallet_id", "s"))
    running: dict[int, int] = defaultdict(int)
    for hold in open_holds_in(wallet_ids=ids).only("wallet_id", "rate", "gpus", "data"):
        running[hold.wallet_id] += cost_of(rate=hold.rate or 0,
                                           gpu_seconds=round(hold.gpus * 3600 * hold_speedup(hold)))
    out = {}
    for wallet in wallets:
        s = spent.get(wallet.pk) or 0
        per_day = -s // days if s < 0 else 0
        available = max(wallet.available, 0)
        average = (available // per_day) if per_day > 0 else None
        current = (available // (running[wallet.pk] * 24)) if running[wallet.pk] > 0 else None
        known = [d for d in (average, current) if d is not None]
        out[wallet.pk] = {"per_day": per_day, "window_days": days, "running_per_hour": running[wallet.pk],
                          "days_left": min(known) if known else None, "days_left_now": current,
                          "days_left_average": average}
    return out


def job_cost(*, job, now: datetime | None = None) -> dict[str, Any]:
    """A job's money across its attempts: hold of the current attempt, cost to date, final charge."""
    now = now or timezone.now()
    entries = list(LedgerEntry.objects.filter(job=job).order_by("created_at", "id"))
    per_attempt: dict[int, dict[str, Any]] = defaultdict(lambda: {"held": 0, "charged": 0, "refunded": 0,
                                                                  "released": 0, "rate": None, "open": False})
    holds: dict[int, LedgerEntry] = {}
    for e in entries:
        a = per_attempt[e.attempt or 0]
        if e.kind == LedgerKind.HOLD:
            a["held"] += e.held_change
            a["rate"] = e.rate
            a["basis"] = (e.data or {}).get("basis")
            holds[e.attempt or 0] = e
        elif e.kind == LedgerKind.RESIZE:  # a grow's GPUs held beside the admission's
            a["held"] += e.held_change
        elif e.kind == LedgerKind.SETTLE:
            a["charged"] += -e.amount
        elif e.kind == LedgerKind.RELEASE:
            a["released"] += -e.held_change
        elif e.kind == LedgerKind.REFUND:
            a["refunded"] += e.amount
    ended = {(e.attempt or 0) for e in entries if e.kind in (LedgerKind.SETTLE, LedgerKind.RELEASE)}
    running_cost = 0
    for attempt, hold in holds.items():
        a = per_attempt[attempt]
        a["open"] = attempt not in ended
        if a["open"]:
            _, c = attempt_usage(hold=hold, end=now)
            a["to_date"] = min(c, a["held"])
            running_cost += a["to_date"]
    charged = sum(a["charged"] for a in per_attempt.values())
    refunded = sum(a["refunded"] for a in per_attempt.values())
    current = per_attempt.get(job.attempt)
    return {
        "metered": bool(entries),
        "hold": current["held"] if current and current["open"] else 0,
        "rate": current["rate"] if current else None,
        "basis": current.get("basis") if current else None,
        "cost_to_date": charged - refunded + running_cost,
        "charged": charged,
        "refunded": refunded,
        "final": (charged - refunded) if job.is_final else None,
        "attempts": {k: dict(v) for k, v in sorted(per_attempt.items())},
    }


# ``team``: the team its job was submitted in (blank for a member of no team and for entries about no job).
GROUPS = {"department": "wallet__department__slug", "team": "job__team__slug", "user": "user__username",
          "flavor": "flavor__name"}
PERIODS = {"day": TruncDay, "month": TruncMonth}
REPORT_COLUMNS = ("period", "department", "team", "user", "flavor", "gpu_hours", "charged_mcr", "refunded_mcr",
                  "net_mcr", "attempts", "preemptions", "measured_gpu_hours", "used_gpu_hours", "efficiency")


def usage_report(*, entries, group_by: list[str], period: str = "month", since: datetime | None = None,
                 until: datetime | None = None, department: str | None = None) -> list[dict[str, Any]]:
    """Usage and spend from the ledger (settle and refund entries), grouped by period and the given columns,
    with the efficiency of the settled attempts that were measured: ``measured_gpu_hours`` held by them,
    ``used_gpu_hours`` their mean busy GPUs x that time (DCGM, through ``ports.measured()``), ``efficiency``
    used / measured (None when no attempt of the row was measured: unknown, not zero). Three queries. ``entries`` is the caller's ledger already through the tenancy gate
    (``LedgerEntry.objects.restrict(user, VIEW)``), so a report never reaches past what its reader may see;
    ``department`` narrows it to one department the caller has already resolved through the same gate."""
    qs = entries.filter(kind__in=(LedgerKind.SETTLE, LedgerKind.REFUND))
    if department:
        qs = qs.filter(wallet__department__slug=department)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if until is not None:
        qs = qs.filter(created_at__lt=until)
    fields = [GROUPS[g] for g in group_by]
    settle = Q(kind=LedgerKind.SETTLE)
    rows = (
        qs.annotate(bucket=PERIODS[period]("created_at"))
        .values("bucket", *fields)
        .annotate(
            gpu_seconds=Sum("gpu_seconds", filter=settle),
            charged=Sum("amount", filter=settle),
            refunded=Sum("amount", filter=Q(kind=LedgerKind.REFUND)),
            attempts=Count("id", filter=settle),
            preemptions=Count("id", filter=settle & Q(outcome="preempted")),
        )
        .order_by("bucket", *fields)
    )
    # Which attempts each row settled, and what of them was measured: the ledger's GPU-seconds are what was
    # charged, the measurement says how much of that the GPUs were busy.
    settled: dict[tuple, list[tuple[int, int]]] = defaultdict(list)
    for r in (qs.filter(settle, job__isnull=False, attempt__isnull=False)
              .annotate(bucket=PERIODS[period]("created_at")).values("bucket", *fields, "job_id", "attempt")
              .order_by()):
        settled[(r["bucket"], *(r[f] for f in fields))].append((r["job_id"], r["attempt"]))
    measured = ports.measured().held_and_used({a for pairs in settled.values() for a in pairs})
    out = []
    for r in rows:
        charged, refunded = -(r["charged"] or 0), r["refunded"] or 0
        bucket = r["bucket"]
        out.append({
            "period": bucket.strftime("%Y-%m-%d" if period == "day" else "%Y-%m"),
            "department": r.get(GROUPS["department"]),
            "team": r.get(GROUPS["team"]),
            "user": r.get(GROUPS["user"]),
            "flavor": r.get(GROUPS["flavor"]),
            "gpu_hours": round((r["gpu_seconds"] or 0) / 3600, 4),
            "charged_mcr": charged,
            "refunded_mcr": refunded,
            "net_mcr": charged - refunded,
            "attempts": r["attempts"],
            "preemptions": r["preemptions"],
            **_efficiency([measured[a] for a in settled.get((bucket, *(r[f] for f in fields)), ()) if a in measured]),
        })
    return out


def _efficiency(figures: list[tuple[float, float]]) -> dict[str, Any]:
    held = sum(h for h, _ in figures)
    used = sum(u for _, u in figures)
    return {"measured_gpu_hours": round(held, 4), "used_gpu_hours": round(used, 4),
            "efficiency": round(used / held, 3) if held else None}


def month_bounds(month: date) -> tuple[datetime, datetime]:
    tz = timezone.get_current_timezone()
    start = datetime(month.year, month.month, 1, tzinfo=tz)
    days = calendar.monthrange(month.year, month.month)[1]
    return start, start + timedelta(days=days)


def monthly_statement(*, month: date, department: Department) -> dict[str, Any]:
    """Opening balance, movements by kind, closing balance and per-user spend of one department and month,
    all from the ledger (so the statement reconciles by construction: opening + movements = closing)."""
    start, end = month_bounds(month)
    wallet = Wallet.objects.filter(department=department).first()
    empty = {"department": department.slug, "month": f"{month.year}-{month.month:02d}", "metered": False}
    if wallet is None:
        return empty
    entries = LedgerEntry.objects.filter(wallet=wallet)
    opening = entries.filter(created_at__lt=start).aggregate(s=Sum("amount"))["s"] or 0
    in_month = entries.filter(created_at__gte=start, created_at__lt=end)
    by_kind = {r["kind"]: r for r in in_month.values("kind").annotate(s=Sum("amount"), n=Count("id"),
                                                                       g=Sum("gpu_seconds"))}
    held_at_end = entries.filter(created_at__lt=end).aggregate(s=Sum("held_change"))["s"] or 0
    users = list(in_month.filter(kind__in=(LedgerKind.SETTLE, LedgerKind.REFUND)).values("user__username")
                 .annotate(net=Sum("amount"), g=Sum("gpu_seconds")).order_by("net", "user__username"))
    movements = {k: (by_kind.get(k, {}).get("s") or 0) for k in LedgerKind.values}
    return {
        **empty,
        "metered": True,
        "opening_mcr": opening,
        "refills_mcr": movements["refill"],
        "adjustments_mcr": movements["adjustment"],
        "charges_mcr": -movements["settle"],
        "refunds_mcr": movements["refund"],
        "closing_mcr": opening + sum(movements.values()),
        "held_at_end_mcr": held_at_end,
        "gpu_hours": round((by_kind.get("settle", {}).get("g") or 0) / 3600, 3),
        "attempts": by_kind.get("settle", {}).get("n") or 0,
        "users": [{"user": u["user__username"] or "-", "net_mcr": -(u["net"] or 0),
                   "gpu_hours": round((u["g"] or 0) / 3600, 3)} for u in users],
    }


def spend_by_department(*, since: datetime) -> dict[int, int]:
    """Net spend (charges less refunds, mcr, positive) of every metered department since ``since``, by
    department id, in one query."""
    rows = (LedgerEntry.objects.filter(created_at__gte=since, kind__in=(LedgerKind.SETTLE, LedgerKind.REFUND))
            .values_list("wallet__department_id").annotate(s=Sum("amount")).order_by())
    return {dept: -(total or 0) for dept, total in rows}
