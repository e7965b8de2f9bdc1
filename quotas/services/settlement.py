"""Settlement: what an ended attempt is charged for the GPU-time it used, and what it gets back.

Invariants:

* An attempt is charged its GPU-seconds from admission to its end (capped at its max runtime) at the rate of
  its hold, through ``billing.money`` (the simulator settles with the same functions); the charge
  never exceeds the hold, and the rest of the hold is released in the same transaction.
* Refunds follow ``money.REFUND_POLICY`` (the platform's faults are refunded in full, borrowed capacity is sold as
  preemptible) lot by lot (a resized job's admitted GPUs on the admission's terms, each grow's as borrowed, each
  from its own start at its own rate) and never exceed the charge.
* Settling twice applies once: each step (settle, release, refund) has its own idempotency key.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from billing import money
from billing.money import REFUND_POLICY
from portal.money import format_credits
from quotas.models import LedgerEntry, LedgerKind
from quotas.services.wallets import entry_for, hold_key, wallet_refund, wallet_settle

__all__ = ["REFUND_POLICY", "Lot", "Settlement", "attempt_lots", "attempt_usage", "resize_lots", "settle_attempt"]


@dataclass(frozen=True)
class Settlement:
    charged: int
    refunded: int
    gpu_seconds: int
    lots: tuple[dict, ...] = ()  # what each lot was charged and refunded, when the attempt had more than one


def hold_speedup(hold: LedgerEntry) -> float:
    """Seconds of the job's time per wall second on the cluster the attempt ran on, as its hold recorded (1
    for a real cluster and for holds placed before it was recorded)."""
    return float((hold.data or {}).get("speedup") or 1.0)


@dataclass(frozen=True)
class Lot:
    """GPUs of one attempt held on the same terms from the same moment: the admitted ones (borrowed or inside
    the quota as the admission was, at the hold's rate, from admission) or one grow's (always borrowed, at its
    cycle's clearing price, from its resize), with what they cost up to the end of the attempt."""

    gpus: int
    rate: int
    borrowed: bool
    since: str
    cost: int


def attempt_usage(*, hold: LedgerEntry, end: datetime) -> tuple[int, int]:
    """(gpu_seconds, cost) of one attempt from its admission to ``end``, at the hold's rate. The seconds are
    the job's own: the wall's times the speed-up of the cluster it ran on (the demo's simulated cluster runs a
    2-hour job in 2 wall minutes, and charges it 2 hours, as its quote said). A resizable job's attempt is
    charged size by size: from each resize applied (its ``resize`` ledger entries) at the lots it holds then."""
    gpu_seconds, cost, _ = attempt_lots(hold=hold, end=end)
    return gpu_seconds, cost


def attempt_lots(*, hold: LedgerEntry, end: datetime) -> tuple[int, int, list[Lot]]:
    """``attempt_usage`` with the cost of each lot: one lot for a job that never resized (its CPU work
    included), each resizable lot apart (the CPU work with the admitted lot, whose terms it was admitted on)."""
    start_s = (hold.data or {}).get("admitted_at")
    start = datetime.fromisoformat(start_s) if start_s else hold.created_at
    data = hold.data or {}
    borrowed = bool(data.get("borrowed"))
    since = start_s or hold.created_at.isoformat()
    ran_s = (end - start).total_seconds() * hold_speedup(hold)
    # CPU work: its hourly rate for the time it ran (capped at the max runtime), beside the GPU-seconds
    ran = money.attempt_gpu_seconds(total_gpus=1, ran_s=ran_s, max_runtime_s=data.get("max_runtime_s"))
    cpu = money.cost_of(int(data.get("cpu_per_hour") or 0), ran)
    if data.get("resizable"):
        gpu_seconds, cost, lots = _sized_usage(hold=hold, start=start, end=end)
        if lots and lots[0].since == since:
            lots[0] = Lot(lots[0].gpus, lots[0].rate, lots[0].borrowed, since, lots[0].cost + cpu)
        elif cpu:
            lots.insert(0, Lot(0, 0, borrowed, since, cpu))
        return gpu_seconds, cost + cpu, lots
    # a fraction's hold records its share in milli-GPUs: it is charged that share of the GPU-seconds
    gpus = data["gpu_milli"] / 1000 if data.get("gpu_milli") else hold.gpus
    gpu_seconds = money.attempt_gpu_seconds(total_gpus=gpus, ran_s=ran_s, max_runtime_s=data.get("max_runtime_s"))
    cost = money.attempt_charge(hold.rate or 0, gpu_seconds=gpu_seconds) + cpu
    return gpu_seconds, cost, [Lot(int(hold.gpus or 0), int(hold.rate or 0), borrowed, since, cost)]


def resize_lots(hold: LedgerEntry) -> list[tuple[str, list[list[int]]]]:
    """A resizable attempt's sizes as (from when, lots): the lots are [GPUs, rate, borrowed (1 or 0)] in the
    order they were added (the admitted GPUs at the hold's rate and on the admission's terms first, each grow's
    GPUs at its own rate after them, always borrowed), as its hold and its ``resize`` ledger entries recorded
    them, oldest first. Entries written before lots carried their terms say only [GPUs, rate]: a lot stays
    where it was added (grows append, shrinks take the newest off), so the first is the admitted one."""
    data = hold.data or {}
    admitted = int(bool(data.get("borrowed")))
    out = [(data.get("admitted_at") or hold.created_at.isoformat(),
            [[int(hold.gpus or 0), int(hold.rate or 0), admitted]])]
    for d in (LedgerEntry.objects.filter(job_id=hold.job_id, attempt=hold.attempt, kind=LedgerKind.RESIZE)
              .order_by("id").values_list("data", flat=True)):
        out.append((d["at"], [[int(lot[0]), int(lot[1]), int(lot[2]) if len(lot) > 2 else (admitted if i == 0 else 1)]
                              for i, lot in enumerate(d["lots"])]))
    return out


def _sized_usage(*, hold: LedgerEntry, start: datetime, end: datetime) -> tuple[int, int, list[Lot]]:
    """GPU-seconds, cost and lots of a resizable attempt: each size from its resize to the next (or ``end``),
    capped as a whole at the max runtime, each lot of GPUs at its own rate (a grown pod is borrowed capacity at
    the clearing price of the cycle that grew it). A lot is the same from one size to the next while it keeps
    its place with no more GPUs (a shrink only takes GPUs off); a grow always adds a new one."""
    data = hold.data or {}
    speedup = hold_speedup(hold)
    cap = data.get("max_runtime_s")
    limit = start.timestamp() + (float(cap) / speedup if cap else float("inf"))
    stop = min(end.timestamp(), limit)
    sizes = resize_lots(hold)
    gpu_seconds = cost = 0
    done: list[Lot] = []  # lots no longer held
    live: list[Lot] = []  # the lots of the size before, with what they cost so far
    for k, (at, lots) in enumerate(sizes):
        now = []
        for i, (gpus, rate, borrowed) in enumerate(lots):
            same = i < len(live) and gpus <= live[i].gpus and (rate, bool(borrowed)) == (live[i].rate,
                                                                                             live[i].borrowed)
            now.append(Lot(gpus, rate, bool(borrowed), live[i].since if same else at, live[i].cost if same else 0))
        done.extend(lot for i, lot in enumerate(live) if i >= len(now) or now[i].since != lot.since)
        live = now
        a = max(start.timestamp(), datetime.fromisoformat(at).timestamp())
        b = min(stop, datetime.fromisoformat(sizes[k + 1][0]).timestamp() if k + 1 < len(sizes) else stop)
        if b <= a:
            continue
        ran_s = (b - a) * speedup
        for i, lot in enumerate(live):
            used = money.attempt_gpu_seconds(total_gpus=lot.gpus, ran_s=ran_s, max_runtime_s=None)
            charge = money.attempt_charge(lot.rate, gpu_seconds=used)
            gpu_seconds += used
            cost += charge
            live[i] = Lot(lot.gpus, lot.rate, lot.borrowed, lot.since, lot.cost + charge)
    return gpu_seconds, cost, done + live


def _refund_share(*, outcome: str, borrowed: bool, decided: bool) -> tuple[float, str]:
    # (only a preemption needs to know who decided it: scheduling says so; the policy itself is the core's)
    decided = outcome != "preempted" or decided
    return money.refund_share(outcome, decided_by_portal=decided, borrowed=borrowed)


def _lot_refunds(*, outcome: str, lots: list[Lot], decided: bool, charged: int, cost: int
                 ) -> tuple[int, str, list[dict]]:
    """What each lot gets back on its own terms (a preemption refunds the lots inside the quota, not the
    borrowed ones), as (total, why, one line per lot). When the charge was capped at the hold, each lot is
    charged, and refunded, its share of what was charged."""
    lines, total, whys = [], 0, []
    for lot in lots:
        share, why = _refund_share(outcome=outcome, borrowed=lot.borrowed, decided=decided)
        charge = lot.cost if charged >= cost or cost <= 0 else lot.cost * charged // cost
        back = money.refund_of(charge, share)
        total += back
        if why and why not in whys:
            whys.append(why)
        lines.append({"gpus": lot.gpus, "rate": lot.rate, "borrowed": lot.borrowed, "since": lot.since,
                      "charged": charge, "refunded": back})
    why = "; ".join(whys)
    if len(lines) > 1:  # the memo says it lot by lot (a ledger reader sees no data column)
        why = "by lot: " + "; ".join(
            f"{ln['gpus']} GPU(s) {'borrowed' if ln['borrowed'] else 'inside the quota'} since {ln['since'][11:19]}"
            f" {format_credits(ln['refunded'])} of {format_credits(ln['charged'])}" for ln in lines)
    return min(total, charged), why, lines


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
    gpu_seconds, cost, lots = attempt_lots(hold=hold, end=end)
    with transaction.atomic():
        settle = wallet_settle(job=job, attempt=attempt, amount=cost, gpu_seconds=gpu_seconds, outcome=outcome,
                               actor=actor, memo=f"{outcome}: {gpu_seconds / 3600:.3f} GPU-h")
        refund, lines = None, []
        if settle is not None and settle.amount < 0:
            amount, why, lines = _lot_refunds(outcome=outcome, lots=lots, decided=preempted_by_portal,
                                              charged=-settle.amount, cost=cost)
            if amount > 0:
                refund = wallet_refund(job=job, attempt=attempt, amount=amount, reason=why,
                                       data={"lots": lines} if len(lines) > 1 else None)
    return Settlement(charged=-settle.amount if settle else 0, refunded=refund.amount if refund else 0,
                      gpu_seconds=settle.gpu_seconds if settle else 0, lots=tuple(lines) if len(lines) > 1 else ())
