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

from dataclasses import dataclass, replace
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from billing import money
from billing.money import REFUND_POLICY
from portal.money import format_credits
from quotas.models import LedgerEntry, LedgerKind
from quotas.services.wallets import entry_for, hold_key, wallet_refund, wallet_settle

__all__ = ["REFUND_POLICY", "Settlement", "attempt_lots", "attempt_usage", "entry_lots", "lot_lines", "resize_lots",
           "settle_attempt"]


@dataclass(frozen=True)
class Settlement:
    charged: int
    refunded: int
    gpu_seconds: int
    lots: tuple[dict, ...] = ()  # a resizable attempt's: what each lot was charged and refunded


def hold_speedup(hold: LedgerEntry) -> float:
    """Seconds of the job's time per wall second on the cluster the attempt ran on, as its hold recorded (1
    for a real cluster and for holds placed before it was recorded)."""
    return float((hold.data or {}).get("speedup") or 1.0)


def attempt_usage(*, hold: LedgerEntry, end: datetime) -> tuple[int, int]:
    """(gpu_seconds, cost) of one attempt from its admission to ``end``, at the hold's rate. The seconds are
    the job's own: the wall's times the speed-up of the cluster it ran on (the demo's simulated cluster runs a
    2-hour job in 2 wall minutes, and charges it 2 hours, as its quote said). A resizable job's attempt is
    charged size by size: from each resize applied (its ``resize`` ledger entries) at the lots it holds then."""
    gpu_seconds, cost, _ = attempt_lots(hold=hold, end=end)
    return gpu_seconds, cost


def attempt_lots(*, hold: LedgerEntry, end: datetime) -> tuple[int, int, list[tuple[money.Lot, str]]]:
    """``attempt_usage`` with each lot (``money.Lot``) and when it was added (ISO, as the ledger wrote it): one lot
    for a job that never resized (its CPU work included), each resizable lot apart (the CPU work with the
    admitted lot, whose terms it was admitted on)."""
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
        sizes = resize_lots(hold)
        when = {datetime.fromisoformat(at).timestamp(): at for at, _ in sizes}
        gpu_seconds, cost, lots = money.lot_usage(
            [(datetime.fromisoformat(at).timestamp(), lots) for at, lots in sizes], start=start.timestamp(),
            end=end.timestamp(), max_runtime_s=data.get("max_runtime_s"), speedup=hold_speedup(hold))
        out = [(lot, when[lot.since]) for lot in lots]
        if out and out[0][1] == since:
            out[0] = (replace(out[0][0], cost=out[0][0].cost + cpu), since)
        elif cpu:
            out.insert(0, (money.Lot(0, 0, borrowed, start.timestamp(), 0, cpu), since))
        return gpu_seconds, cost + cpu, out
    # a fraction's hold records its share in milli-GPUs: it is charged that share of the GPU-seconds
    gpus = data["gpu_milli"] / 1000 if data.get("gpu_milli") else hold.gpus
    gpu_seconds = money.attempt_gpu_seconds(total_gpus=gpus, ran_s=ran_s, max_runtime_s=data.get("max_runtime_s"))
    cost = money.attempt_charge(hold.rate or 0, gpu_seconds=gpu_seconds) + cpu
    return gpu_seconds, cost, [(money.Lot(int(hold.gpus or 0), int(hold.rate or 0), borrowed, start.timestamp(),
                                          gpu_seconds, cost), since)]


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


LOT_FIELDS = ("gpus", "rate", "borrowed", "since", "gpu_seconds", "charged", "refunded")


def entry_lots(entry: LedgerEntry) -> list[dict] | None:
    """A resizable attempt's lots as one ledger entry records them, each with every field of ``LOT_FIELDS`` (None
    where the entry does not say it): its ``settle`` and ``refund`` say what each lot was charged and gets back; a
    ``resize`` the lots held from then on (not charged yet, and when each was added is its own resize's); the
    ``hold`` its admitted lot. None for every other entry, and for a settle written before settlements recorded
    their lots."""
    data = entry.data or {}
    if entry.kind in (LedgerKind.SETTLE, LedgerKind.REFUND):
        lots = data.get("lots")
        if not lots:
            return None
        return [{f: (bool(lot[f]) if f == "borrowed" else lot.get(f)) for f in LOT_FIELDS} for lot in lots]
    if entry.kind == LedgerKind.RESIZE and data.get("lots"):
        admitted = None  # entries written before lots carried their terms: the first lot is the admitted one
        out = []
        for i, lot in enumerate(data["lots"]):
            if len(lot) > 2:
                borrowed = bool(lot[2])
            else:
                if admitted is None:
                    hold = entry_for(hold_key(entry.job_id, entry.attempt))
                    admitted = bool(((hold.data or {}) if hold else {}).get("borrowed"))
                borrowed = admitted if i == 0 else True
            out.append({"gpus": int(lot[0]), "rate": int(lot[1]), "borrowed": borrowed, "since": None,
                        "gpu_seconds": None, "charged": None, "refunded": None})
        return out
    if entry.kind == LedgerKind.HOLD and data.get("resizable"):
        return [{"gpus": entry.gpus, "rate": entry.rate, "borrowed": bool(data.get("borrowed")),
                 "since": data.get("admitted_at"), "gpu_seconds": None, "charged": None, "refunded": None}]
    return None


def lot_lines(lots: list[tuple[money.Lot, str]], *, outcome: str, decided: bool, charged: int
              ) -> tuple[int, str, list[dict]]:
    """What each lot was charged and gets back on its own terms (``money.lot_settlement``), as (total refund,
    why, one line per lot: gpus, rate, borrowed, since, gpu_seconds, charged, refunded)."""
    lines, total, whys = [], 0, []
    settled = money.lot_settlement([lot for lot, _ in lots], outcome=outcome, decided_by_portal=decided,
                                   charged=charged)
    for (lot, since), (charge, back, why) in zip(lots, settled, strict=True):
        total += back
        if why and why not in whys:
            whys.append(why)
        lines.append({"gpus": lot.gpus, "rate": lot.rate, "borrowed": lot.borrowed, "since": since,
                      "gpu_seconds": lot.gpu_seconds, "charged": charge, "refunded": back})
    why = "; ".join(whys)
    if len(lines) > 1:  # the memo says it lot by lot (a reader of the memo alone sees every lot)
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
    by_lot = bool((hold.data or {}).get("resizable"))  # a resizable attempt's entries say it lot by lot

    def settled_lots(charge: int) -> dict:
        return {"lots": lot_lines(lots, outcome=outcome, decided=preempted_by_portal, charged=charge)[2]}

    with transaction.atomic():
        settle = wallet_settle(job=job, attempt=attempt, amount=cost, gpu_seconds=gpu_seconds, outcome=outcome,
                               actor=actor, memo=f"{outcome}: {gpu_seconds / 3600:.3f} GPU-h",
                               detail=settled_lots if by_lot else None)
        refund, lines = None, []
        if settle is not None and settle.amount < 0:
            amount, why, lines = lot_lines(lots, outcome=outcome, decided=preempted_by_portal,
                                           charged=-settle.amount)
            if amount > 0:
                refund = wallet_refund(job=job, attempt=attempt, amount=amount, reason=why,
                                       data={"lots": lines} if by_lot else None)
    return Settlement(charged=-settle.amount if settle else 0, refunded=refund.amount if refund else 0,
                      gpu_seconds=settle.gpu_seconds if settle else 0, lots=tuple(lines) if by_lot else ())
