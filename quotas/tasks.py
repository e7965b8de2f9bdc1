"""Budget tasks: thin, idempotent, stable names (``quotas.*``), time limits. The logic is in quotas.services.

Beat entries (merged into portal/settings.py CELERY_BEAT_SCHEDULE by the settings owner): ``BEAT_SCHEDULE``.
Refills may fire as often as you like: each department is refilled exactly once per period.
"""

from __future__ import annotations

import logging

from celery import shared_task

from quotas import services

log = logging.getLogger(__name__)

BEAT_SCHEDULE = {
    "quotas-refill": {"task": "quotas.refill", "schedule": 3600.0},
    "quotas-check-ledger": {"task": "quotas.check_ledger", "schedule": 900.0},
    "quotas-reconcile-holds": {"task": "quotas.reconcile_holds", "schedule": 600.0},
}


@shared_task(name="quotas.refill", time_limit=300, soft_time_limit=280)
def refill() -> int:
    """Refill every department whose period has begun and is not refilled yet (exactly once per period)."""
    n = services.refill_due()
    if n:
        log.info("refilled %d wallet(s)", n)
    return n


@shared_task(name="quotas.check_ledger", time_limit=300, soft_time_limit=280)
def check_ledger() -> int:
    """balance == sum(entries.amount) and held == sum(entries.held_change) for every wallet; alert on drift.
    The result is stored for /metrics (``portal_ledger_drifting_wallets``, ``portal_ledger_drift_mcr``)."""
    from portal import metrics

    drift = services.ledger_drift()
    values: dict[str, float] = {}
    for d in drift:
        log.error("ledger drift in %s: balance %s != ledger %s, held %s != ledger %s",
                  d.department, d.balance, d.ledger_balance, d.held, d.ledger_held)
        values[f"{d.department}|balance"] = d.balance - d.ledger_balance
        values[f"{d.department}|held"] = d.held - d.ledger_held
    metrics.set_gauges(metrics.LEDGER_DRIFTING, len(drift))
    metrics.set_drift(values)
    return len(drift)


@shared_task(name="quotas.settle_attempt", time_limit=60, soft_time_limit=50)
def settle_attempt(job_id: int, attempt: int, outcome: str) -> str:
    """Settle one ended attempt (idempotent: a duplicate applies nothing)."""
    from scheduling.models import Job

    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return "gone"
    result = services.settle_attempt(job=job, attempt=attempt, outcome=outcome)
    return "no-hold" if result is None else "settled"


@shared_task(name="quotas.reconcile_holds", time_limit=300, soft_time_limit=280)
def reconcile_holds() -> int:
    """Settle or release holds whose attempt ended without settlement (repairs a failed hook)."""
    return services.reconcile_holds()
