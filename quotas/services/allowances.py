"""Allowances: a user's limit inside their department's wallet, per week or month.

Invariants:

* What a user has committed (``allowance_used``) is charges net of refunds this period, plus open holds, plus
  the worst-case quote of each of their queued jobs (they hold nothing until admitted, but each one will), so
  any number of queued jobs cannot slip under the limit before the first is admitted.
* An allowance belongs to the user's department's wallet; only an admin of that department (or a platform
  admin) sets it, audited.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.db.models import Sum
from django.utils import timezone

from portal.audit import audit
from portal.tenancy import membership_of
from quotas import ports
from quotas.models import Allowance, LedgerEntry, LedgerKind, Wallet
from quotas.services.base import field_error
from quotas.services.pricing import estimated_cost, read_prices
from quotas.services.wallets import wallet_create


def allowance_set(*, user, limit: int | None, period: str = "monthly", actor) -> Allowance | None:
    """Set (or with ``limit=None`` remove) a user's allowance inside their department's wallet."""
    m = membership_of(user)
    if m is None:
        raise field_error("user", "The user is not a member of a department.")
    with transaction.atomic():
        current = Allowance.objects.filter(user=user).first()
        old = None if current is None else {"limit": current.limit, "period": current.period}
        if limit is None:
            if current is not None:
                audit(actor=actor, action="allowance.delete", obj=current, department=m.department, old=old)
                current.delete()
            return None
        wallet = Wallet.objects.filter(department=m.department).first() or wallet_create(department=m.department)
        allowance, _ = Allowance.objects.update_or_create(user=user, defaults={"wallet": wallet, "limit": limit,
                                                                               "period": period})
        audit(actor=actor, action="allowance.set", obj=allowance, department=m.department, old=old,
              new={"user": user.get_username(), "limit": limit, "period": period})
    return allowance


def allowance_used(*, allowance: Allowance, now: datetime | None = None) -> int:
    """What the user committed this period: charges net of refunds, plus open holds, plus the worst-case cost
    of their queued jobs (they hold nothing until admitted, but each one will; without them any number of
    jobs could queue under the allowance before the first was admitted)."""
    now = now or timezone.now()
    start = period_start(period=allowance.period, at=now)
    rows = LedgerEntry.objects.filter(wallet_id=allowance.wallet_id, user_id=allowance.user_id)
    charged = rows.filter(created_at__gte=start, kind__in=(LedgerKind.SETTLE, LedgerKind.REFUND)).aggregate(
        s=Sum("amount"))["s"] or 0
    held = rows.filter(kind__in=(LedgerKind.HOLD, LedgerKind.RESIZE, LedgerKind.SETTLE, LedgerKind.RELEASE)).aggregate(
        s=Sum("held_change"))["s"] or 0
    # Queued jobs are scheduling's: it tells what they would cost (quotas.ports), quotas never reads a job.
    queued = ports.facts().queued_costs(owner_id=allowance.user_id, wallet_id=allowance.wallet_id)
    waiting = 0
    if queued:
        prices = read_prices()
        waiting = sum(estimated_cost(job=job, prices=prices) for job in queued)
    return -charged + held + waiting


def period_start(*, period: str, at: datetime) -> datetime:
    local = timezone.localtime(at)
    day = local.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "weekly":
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)
