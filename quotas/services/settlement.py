"""Settlement: what an ended attempt is charged for the GPU-time it used, and what it gets back.

Invariants:

* An attempt is charged its GPU-seconds from admission to its end (capped at its max runtime) at the rate of
  its hold, through ``pricing.cost_of``; the charge never exceeds the hold, and the rest of the hold is
  released in the same transaction.
* Refunds follow ``REFUND_POLICY`` (the platform's faults are refunded in full, borrowed capacity is sold as
  preemptible) and never exceed the charge.
* Settling twice applies once: each step (settle, release, refund) has its own idempotency key.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from quotas.models import LedgerEntry
from quotas.services.pricing import cost_of
from quotas.services.wallets import entry_for, hold_key, wallet_refund, wallet_settle

REFUND_POLICY = {
    "platform_failure": 1.0,  # node lost, cluster unreachable, pods vanished: never the user's fault
    "preempted_nominal": 1.0,  # evicted while inside its department's guarantee (for a realtime job)
    "preempted_borrowed": 0.0,  # borrowed capacity is sold as preemptible at the clearing price
    "evicted_by_cluster": 1.0,  # an eviction the portal did not decide (node pressure, drain)
}


@dataclass(frozen=True)
class Settlement:
    charged: int
    refunded: int
    gpu_seconds: int


def attempt_usage(*, hold: LedgerEntry, end: datetime) -> tuple[int, int]:
    """(gpu_seconds, cost) of one attempt from its admission to ``end``, at the hold's rate."""
    start_s = (hold.data or {}).get("admitted_at")
    start = datetime.fromisoformat(start_s) if start_s else hold.created_at
    max_runtime = (hold.data or {}).get("max_runtime_s")
    seconds = max(0.0, (end - start).total_seconds())
    if max_runtime:
        seconds = min(seconds, float(max_runtime))
    gpu_seconds = int(math.ceil(seconds)) * hold.gpus
    return gpu_seconds, cost_of(rate=hold.rate or 0, gpu_seconds=gpu_seconds)


def _refund_share(*, outcome: str, hold: LedgerEntry, decided: bool) -> tuple[float, str]:
    if outcome == "platform_failure":
        return REFUND_POLICY["platform_failure"], "platform failure: refunded in full"
    if outcome != "preempted":
        return 0.0, ""
    if not decided:
        return REFUND_POLICY["evicted_by_cluster"], "evicted by the cluster, not by the portal: refunded in full"
    if (hold.data or {}).get("borrowed"):
        return REFUND_POLICY["preempted_borrowed"], "preempted on borrowed capacity: charged up to the eviction"
    return REFUND_POLICY["preempted_nominal"], "preempted inside the nominal quota: refunded in full"


def settle_attempt(*, job, attempt: int, outcome: str, end: datetime | None = None, actor=None,
                   preempted_by_portal: bool = False) -> Settlement | None:
    """Settle one attempt's actual GPU-time, release the rest of its hold and refund per REFUND_POLICY.
    Idempotent (every step has its own key). None when the attempt had no hold.

    ``preempted_by_portal``: a preempted attempt was the portal's own decision (scheduling recorded it as a
    preemption victim), not an eviction by the cluster; scheduling says so, quotas never reads a job."""
    hold = entry_for(hold_key(job.pk, attempt))
    if hold is None:
        return None
    if end is None:
        if outcome == "preempted" and job.last_preempted_at:
            end = job.last_preempted_at
        elif outcome in ("succeeded", "failed", "cancelled") and job.finished_at and job.attempt == attempt:
            end = job.finished_at
        else:
            end = timezone.now()
    gpu_seconds, cost = attempt_usage(hold=hold, end=end)
    with transaction.atomic():
        settle = wallet_settle(job=job, attempt=attempt, amount=cost, gpu_seconds=gpu_seconds, outcome=outcome,
                               actor=actor, memo=f"{outcome}: {gpu_seconds / 3600:.3f} GPU-h")
        share, why = _refund_share(outcome=outcome, hold=hold, decided=preempted_by_portal)
        refund = None
        if settle is not None and share > 0 and settle.amount < 0:
            refund = wallet_refund(job=job, attempt=attempt, amount=math.floor(-settle.amount * share), reason=why)
    return Settlement(charged=-settle.amount if settle else 0, refunded=refund.amount if refund else 0,
                      gpu_seconds=settle.gpu_seconds if settle else 0)
