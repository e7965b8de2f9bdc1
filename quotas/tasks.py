"""Budget tasks: thin, idempotent, stable names (``quotas.*``), time limits. The logic is in
quotas.services.periodic.

Beat runs them on the schedule declared in portal/settings.py (CELERY_BEAT_SCHEDULE, the one list of periodic
tasks). Refills may fire as often as you like: each department is refilled exactly once per period.
"""

from __future__ import annotations

import logging

from celery import shared_task

from portal import metrics
from quotas.services import periodic

log = logging.getLogger(__name__)


@shared_task(name="quotas.refill", time_limit=300, soft_time_limit=280)
def refill() -> int:
    """Refill every department whose period has begun and is not refilled yet (exactly once per period)."""
    n = periodic.refill_due()
    if n:
        log.info("refilled %d wallet(s)", n)
    return n


@shared_task(name="quotas.check_ledger", time_limit=300, soft_time_limit=280)
def check_ledger() -> int:
    """balance == sum(entries.amount) and held == sum(entries.held_change) for every wallet; alert on drift.
    The result is stored for /metrics (``portal_ledger_drifting_wallets``, ``portal_ledger_drift_mcr``)."""
    drift = periodic.ledger_drift()
    values: dict[str, float] = {}
    for d in drift:
        log.error("ledger drift in %s: balance %s != ledger %s, held %s != ledger %s",
                  d.department, d.balance, d.ledger_balance, d.held, d.ledger_held)
        values[f"{d.department}|balance"] = d.balance - d.ledger_balance
        values[f"{d.department}|held"] = d.held - d.ledger_held
    metrics.set_gauges(metrics.LEDGER_DRIFTING, len(drift))
    metrics.set_drift(values)
    return len(drift)


@shared_task(name="quotas.reconcile_holds", time_limit=300, soft_time_limit=280)
def reconcile_holds() -> int:
    """Settle or release holds whose attempt ended without settlement (repairs a failed hook)."""
    return periodic.reconcile_holds()
