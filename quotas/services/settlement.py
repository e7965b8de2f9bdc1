"""Settlement: what an ended attempt is charged for the GPU-time it used, and what it gets back.

Invariants:

* An attempt is charged its GPU-seconds from admission to its end (capped at its max runtime) at the rate of
  its hold, through ``billing.money`` (the simulator settles with the same functions); the charge
  never exceeds the hold, and the rest of the hold is released in the same transaction.
* Refunds follow ``money.REFUND_POLICY`` (the platform's faults are refunded in full, borrowed capacity is sold as
  preemptible) and never exceed the charge.
* Settling twice applies once: each step (settle, release, refund) has its own idempotency key.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from billing import money
from billing.money import REFUND_POLICY
from quotas.models import LedgerEntry, LedgerKind
from quotas.services.wallets import entry_for, hold_key, wallet_refund, wallet_settle

__all__ = ["REFUND_POLICY", "Settlement", "attempt_usage", "resize_lots", "settle_attempt"]


@dataclass(frozen=True)
class Settlement:
    charged: int
    refunded: int
    gpu_seconds: int


def hold_speedup(hold: LedgerEntry) -> float:
    """Seconds of the job's time per wall second on the cluster the attempt ran on, as its hold recorded (1
    for a real cluster and for holds placed before it was recorded)."""
    return float((hold.data or {}).get("speedup") or 1.0)


def attempt_usage(*, hold: LedgerEntry, end: datetime) -> tuple[int, int]:
    """(gpu_seconds, cost) of one attempt from its admission to ``end``, at the hold's rate. The seconds are
    the job's own: the wall's times the speed-up of the cluster it ran on (the demo's simulated cluster runs a
    2-hour job in 2 wall minutes, and charges it 2 hours, as its quote said). A resizable job's attempt is
    charged size by size: from each resize applied (its ``resize`` ledger entries) at the lots it holds then."""
    start_s = (hold.data or {}).get("admitted_at")
    start = datetime.fromisoformat(start_s) if start_s else hold.created_at
    data = hold.data or {}
    ran_s = (end - start).total_seconds() * hold_speedup(hold)
    # CPU work: its hourly rate for the time it ran (capped at the max runtime), beside the GPU-seconds
    ran = money.attempt_gpu_seconds(total_gpus=1, ran_s=ran_s, max_runtime_s=data.get("max_runtime_s"))
    cpu = money.cost_of(int(data.get("cpu_per_hour") or 0), ran)
    if data.get("resizable"):
        gpu_seconds, cost = _sized_usage(hold=hold, start=start, end=end)
        return gpu_seconds, cost + cpu
    # a fraction's hold records its share in milli-GPUs: it is charged that share of the GPU-seconds
    gpus = data["gpu_milli"] / 1000 if data.get("gpu_milli") else hold.gpus
    gpu_seconds = money.attempt_gpu_seconds(total_gpus=gpus, ran_s=ran_s, max_runtime_s=data.get("max_runtime_s"))
    return gpu_seconds, money.attempt_charge(hold.rate or 0, gpu_seconds=gpu_seconds) + cpu


def resize_lots(hold: LedgerEntry) -> list[tuple[str, list[list[int]]]]:
    """A resizable attempt's sizes as (from when, lots): the lots are [GPUs, rate] in the order they were added
    (the admitted GPUs at the hold's rate first, each grow's GPUs at its own rate after them), as its hold and
    its ``resize`` ledger entries recorded them, oldest first."""
    data = hold.data or {}
    out = [(data.get("admitted_at") or hold.created_at.isoformat(), [[int(hold.gpus or 0), int(hold.rate or 0)]])]
    for d in (LedgerEntry.objects.filter(job_id=hold.job_id, attempt=hold.attempt, kind=LedgerKind.RESIZE)
              .order_by("id").values_list("data", flat=True)):
        out.append((d["at"], [[int(g), int(r)] for g, r in d["lots"]]))
    return out


def _sized_usage(*, hold: LedgerEntry, start: datetime, end: datetime) -> tuple[int, int]:
    """GPU-seconds and cost of a resizable attempt: each size from its resize to the next (or ``end``), capped
    as a whole at the max runtime, each lot of GPUs at its own rate (a grown pod is borrowed capacity at the
    clearing price of the cycle that grew it)."""
    data = hold.data or {}
    speedup = hold_speedup(hold)
    cap = data.get("max_runtime_s")
    limit = start.timestamp() + (float(cap) / speedup if cap else float("inf"))
    stop = min(end.timestamp(), limit)
    sizes = resize_lots(hold)
    gpu_seconds = cost = 0
    for k, (at, lots) in enumerate(sizes):
        a = max(start.timestamp(), datetime.fromisoformat(at).timestamp())
        b = min(stop, datetime.fromisoformat(sizes[k + 1][0]).timestamp() if k + 1 < len(sizes) else stop)
        if b <= a:
            continue
        ran_s = (b - a) * speedup
        for gpus, rate in lots:
            used = money.attempt_gpu_seconds(total_gpus=gpus, ran_s=ran_s, max_runtime_s=None)
            gpu_seconds += used
            cost += money.attempt_charge(rate, gpu_seconds=used)
    return gpu_seconds, cost


def _refund_share(*, outcome: str, hold: LedgerEntry, decided: bool) -> tuple[float, str]:
    # (only a preemption needs to know who decided it: scheduling says so; the policy itself is the core's)
    decided = outcome != "preempted" or decided
    return money.refund_share(outcome, decided_by_portal=decided, borrowed=bool((hold.data or {}).get("borrowed")))


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
            refund = wallet_refund(job=job, attempt=attempt, amount=money.refund_of(-settle.amount, share), reason=why)
    return Settlement(charged=-settle.amount if settle else 0, refunded=refund.amount if refund else 0,
                      gpu_seconds=settle.gpu_seconds if settle else 0)
