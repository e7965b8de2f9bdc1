"""Budget alerts: a department's admins hear when its balance falls below a threshold.

The threshold is the department's own (set by its admins, ``/api/v1/notifications/department``) or, by
default, ``DEFAULT_FRACTION`` of what its refill rule adds per period; a department without either is not
alerted. The alert fires when a ledger entry takes the balance from at or above the threshold to below it, so
one descent is reported once (a refill or an adjustment above it re-arms it). It is emitted in the ledger
entry's transaction: a rolled-back charge alerts nobody.
"""

from __future__ import annotations

from notifications.services import emit
from notifications.services.preferences import budget_low_threshold
from quotas.models import Quota, RefillRule, Wallet

DEFAULT_FRACTION = 0.10


def refill_amount(*, rule: RefillRule) -> int:
    """What the rule adds per period: its amount, or its amount per nominal GPU of the department's quotas."""
    if rule.mode == "per_nominal_gpu":
        # Per-cluster quotas inside a global one are not counted twice.
        nominal = sum(Quota.objects.filter(department_id=rule.department_id).nominal_by_flavor().values())
        return rule.amount * nominal
    return rule.amount


def threshold_for(*, department_id: int) -> int | None:
    explicit = budget_low_threshold(department_id=department_id)
    if explicit is not None:
        return explicit
    rule = RefillRule.objects.filter(department_id=department_id, active=True).first()
    if rule is None:
        return None
    amount = refill_amount(rule=rule)
    return int(amount * DEFAULT_FRACTION) if amount > 0 else None


def balance_fell(*, wallet: Wallet, before: int) -> None:
    """Called by the ledger with the wallet locked, after an entry lowered its balance from ``before``."""
    threshold = threshold_for(department_id=wallet.department_id)
    if threshold is None or not (wallet.balance < threshold <= before):
        return
    emit(kind="budget.low", department_id=wallet.department_id, admins=True,
         data={"department": wallet.department.slug, "balance": wallet.balance, "threshold": threshold, "held": wallet.held})
