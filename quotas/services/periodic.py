"""Periodic budget work, run by beat (quotas.tasks): refills, the ledger drift check, the repair of holds.

Invariants: each department is refilled exactly once per period however often beat fires (a unique
``RefillRecord`` per department and period); the drift check only reads; the repair settles or releases a
hold only once its attempt has ended, through the same idempotent settlement as the lifecycle hooks.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db.models import Sum
from django.utils import timezone

from quotas import ports
from quotas.models import LedgerEntry, RefillRule, Wallet
from quotas.services.alerts import refill_amount
from quotas.services.settlement import settle_attempt
from quotas.services.wallets import open_holds, wallet_refill, wallet_release


def period_key(*, period: str, at: datetime) -> str:
    """"2026-11" for monthly, ISO week "2026-W48" for weekly."""
    at = timezone.localtime(at) if timezone.is_aware(at) else at
    if period == "weekly":
        year, week, _ = at.isocalendar()
        return f"{year}-W{week:02d}"
    return f"{at.year}-{at.month:02d}"


def refill_due(*, now: datetime | None = None) -> int:
    """Refill every department with an active rule for the current period (once per period). Returns how
    many refills were applied now."""
    now = now or timezone.now()
    done = 0
    for rule in RefillRule.objects.filter(active=True).select_related("department").order_by("department_id"):
        if wallet_refill(department=rule.department, period=period_key(period=rule.period, at=now),
                         amount=refill_amount(rule=rule)) is not None:
            done += 1
    return done


@dataclass(frozen=True)
class Drift:
    department: str
    balance: int
    ledger_balance: int
    held: int
    ledger_held: int


def ledger_drift() -> list[Drift]:
    """Wallets whose balance/held differ from the sum of their ledger entries (should be none, ever)."""
    sums = {r["wallet_id"]: r for r in LedgerEntry.objects.values("wallet_id").annotate(
        b=Sum("amount"), h=Sum("held_change")).order_by()}
    out = []
    for w in Wallet.objects.select_related("department").order_by("pk"):
        s = sums.get(w.pk, {})
        b, h = s.get("b") or 0, s.get("h") or 0
        if b != w.balance or h != w.held:
            out.append(Drift(w.department.slug, w.balance, b, w.held, h))
    return out


def reconcile_holds(*, now: datetime | None = None) -> int:
    """Repair: settle or release holds whose attempt ended without being settled (a hook that failed)."""
    fixed = 0
    for wallet in Wallet.objects.order_by("pk"):
        holds = list(open_holds(wallet=wallet))
        # Where each attempt stands is scheduling's to say (quotas.ports): one read per wallet, no job read here.
        attempts = ports.facts().attempts({h.job_id for h in holds}) if holds else {}
        for hold in holds:
            job = attempts.get(hold.job_id)
            if job is None or (job.attempt == hold.attempt and job.active):
                continue
            if job.attempt == hold.attempt and job.state in ("succeeded", "failed", "cancelled"):
                settle_attempt(job=job, attempt=hold.attempt, outcome=job.state)
            else:
                wallet_release(job=job, attempt=hold.attempt, memo="attempt ended without settlement")
            fixed += 1
    return fixed
