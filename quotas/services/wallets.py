"""Wallets and the append-only ledger: the only code that changes a wallet's balance or held credits.

Invariants:

* Every movement is one ``LedgerEntry`` written in the same transaction that changes the wallet, with the
  wallet row locked (``select_for_update``; several wallets always in primary-key order), so concurrent holds,
  settlements and refills serialise per wallet and can never overspend. The database refuses what slips
  through: ``balance >= 0``, ``0 <= held <= balance``.
* ``balance == sum(amount)`` and ``held == sum(held_change)`` over the wallet's entries, always.
* Every entry has a unique idempotency key derived from what it is about (``hold:<job>:<attempt>``,
  ``settle:<job>:<attempt>``, ``refill:<department>:<period>`` ...), so a duplicated task or a retried request
  applies once and returns the first result.
* A charge never exceeds its attempt's hold; a refund never exceeds its attempt's charge.
* The portal's one lock order: wallets in primary-key order, then jobs in primary-key order
  (``lock_department_wallets``).
"""

from __future__ import annotations

import hashlib
import uuid
from collections.abc import Callable
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Sum
from django.utils import timezone

from portal.audit import audit
from portal.errors import Conflict, IdempotencyKeyReused, NotFound
from portal.models import Department
from portal.money import format_credits
from quotas.models import LedgerEntry, LedgerKind, RefillRecord, Wallet
from quotas.services import alerts
from quotas.services.base import field_error


class InsufficientCredits(Conflict):
    code = "insufficient_credits"
    message = "The wallet does not have enough available credits."


def lock_wallets(ids) -> dict[int, Wallet]:
    """Lock wallet rows in primary-key order (a fixed order: two transactions locking the same wallets can
    never deadlock). Must run inside ``transaction.atomic``."""
    rows = Wallet.objects.select_for_update().filter(pk__in=sorted(set(ids))).order_by("pk")
    return {w.pk: w for w in rows}


def lock_department_wallets(department_ids) -> dict[int, Wallet]:
    """Lock the wallets of these departments (those that have one) in primary-key order, keyed by department.

    The portal's one lock order is: wallets in primary-key order first, then jobs in primary-key order. A
    transaction that may move money for a job (cancel, finish, requeue, admission) calls this before it
    touches the job row, so it can never hold a job while waiting for a wallet that another transaction
    holds while waiting for that job. Must run inside ``transaction.atomic``."""
    ids = sorted({d for d in department_ids if d is not None})
    if not ids:
        return {}
    rows = Wallet.objects.select_for_update().filter(department_id__in=ids).order_by("pk")
    return {w.department_id: w for w in rows}


def _lock_one(wallet_id: int) -> Wallet:
    wallet = lock_wallets([wallet_id]).get(wallet_id)
    if wallet is None:
        raise NotFound("No such wallet.")
    return wallet


def _append(wallet: Wallet, *, kind: str, amount: int = 0, held_change: int = 0, key: str, **fields) -> LedgerEntry:
    """Apply one movement to a *locked* wallet and write its ledger entry (same transaction)."""
    wallet.balance += amount
    wallet.held += held_change
    wallet.updated_at = timezone.now()
    if wallet.balance < 0 or wallet.held < 0 or wallet.held > wallet.balance:
        raise InsufficientCredits(detail={"balance": wallet.balance, "held": wallet.held})
    Wallet.objects.filter(pk=wallet.pk).update(balance=wallet.balance, held=wallet.held,
                                               updated_at=wallet.updated_at)
    if amount < 0:
        alerts.balance_fell(wallet=wallet, before=wallet.balance - amount)
    return LedgerEntry.objects.create(
        wallet=wallet, kind=kind, amount=amount, held_change=held_change, balance_after=wallet.balance,
        held_after=wallet.held, idempotency_key=key, **fields,
    )


def entry_for(key: str) -> LedgerEntry | None:
    """The ledger entry with this idempotency key, if any."""
    return LedgerEntry.objects.filter(idempotency_key=key).first()


def _locked_once(wallet_id: int, key: str) -> tuple[Wallet, LedgerEntry | None]:
    """Inside the caller's transaction: the wallet locked, then the entry an earlier call wrote under ``key``,
    read under the lock, so of two concurrent calls the second finds the first's entry and writes nothing."""
    return _lock_one(wallet_id), entry_for(key)


def hold_key(job_id: int, attempt: int) -> str:
    return f"hold:{job_id}:{attempt}"


def wallet_create(*, department: Department, actor=None, balance: int = 0) -> Wallet:
    """The department's wallet (created if missing; with an opening adjustment when ``balance`` > 0)."""
    wallet, created = Wallet.objects.get_or_create(department=department)
    if created:
        audit(actor=actor, action="wallet.create", obj=wallet, department=department, new={"balance": 0})
        if balance:
            wallet_adjust(department=department, amount=balance, actor=actor, comment="opening balance",
                          key=f"opening:{wallet.pk}")
            wallet.refresh_from_db()
    return wallet


def wallet_hold(*, job, attempt: int, amount: int, rate: int, actor=None, allow_partial: bool = False,
                data: dict | None = None) -> LedgerEntry | None:
    """Hold ``amount`` mcr of the job's department wallet for one attempt. Idempotent per (job, attempt).

    Refuses (InsufficientCredits) when the wallet's available credits do not cover it, unless
    ``allow_partial`` (then it holds what is available; the charge can never exceed the hold)."""
    key = hold_key(job.pk, attempt)
    wallet_id = Wallet.objects.filter(department_id=job.department_id).values_list("pk", flat=True).first()
    if wallet_id is None:
        return None
    with transaction.atomic():
        wallet, existing = _locked_once(wallet_id, key)
        if existing is not None:
            return existing
        if amount > wallet.available:
            if not allow_partial:
                raise InsufficientCredits(
                    f"The hold needs {format_credits(amount)}; {format_credits(wallet.available)} available, "
                    f"missing {format_credits(amount - wallet.available)}.",
                    detail={"hold": amount, "available": wallet.available, "missing": amount - wallet.available},
                )
            amount = wallet.available
        if amount <= 0:
            return None
        return _append(wallet, kind=LedgerKind.HOLD, held_change=amount, key=key, job_id=job.pk, attempt=attempt,
                       user_id=job.owner_id, flavor_id=job.flavor_id, actor=actor, rate=rate,
                       gpus=job.total_gpus, data=data or {})


def resize_key(job_id: int, attempt: int, resize_id: int) -> str:
    return f"resize:{job_id}:{attempt}:{resize_id}"


def wallet_resize(*, job, attempt: int, resize_id: int, amount: int, rate: int, gpus: int, data: dict,
                  actor=None) -> LedgerEntry | None:
    """Record that a resizable attempt changed size (``data``: when, and the lots of GPUs it holds from then
    on) and hold ``amount`` mcr more for a grow's GPUs (what is available when less is: the charge can never
    exceed the hold; 0 for a shrink, whose GPUs stop costing from then on). Idempotent per resize. None when
    the attempt has no hold (its department is not metered)."""
    hold = entry_for(hold_key(job.pk, attempt))
    if hold is None:
        return None
    key = resize_key(job.pk, attempt, resize_id)
    with transaction.atomic():
        wallet, existing = _locked_once(hold.wallet_id, key)
        if existing is not None:
            return existing
        held = max(0, min(int(amount), wallet.available))
        return _append(wallet, kind=LedgerKind.RESIZE, held_change=held, key=key, job_id=job.pk, attempt=attempt,
                       user_id=hold.user_id, flavor_id=hold.flavor_id, actor=actor, rate=rate, gpus=gpus,
                       data={**data, "wanted": int(amount)})


def open_hold(*, job_id: int, attempt: int) -> int:
    """What is still held for one attempt (hold minus settled and released)."""
    return LedgerEntry.objects.filter(job_id=job_id, attempt=attempt).aggregate(s=Sum("held_change"))["s"] or 0


@dataclass
class _OpenHold:
    """An attempt's hold under its wallet's lock: what a settle or a release starts from."""

    hold: LedgerEntry
    wallet: Wallet
    remaining: int  # still held
    done: LedgerEntry | None  # what an earlier call with the same key wrote


def _open_hold_locked(job, attempt: int, key: str) -> _OpenHold | None:
    """Inside the caller's transaction: the attempt's hold, or None when it had none."""
    hold = entry_for(hold_key(job.pk, attempt))
    if hold is None:
        return None
    wallet, done = _locked_once(hold.wallet_id, key)
    return _OpenHold(hold, wallet, open_hold(job_id=job.pk, attempt=attempt), done)


def wallet_settle(*, job, attempt: int, amount: int, gpu_seconds: int = 0, outcome: str = "", actor=None,
                  memo: str = "", detail: Callable[[int], dict] | None = None) -> LedgerEntry | None:
    """Charge ``amount`` mcr (capped at the hold: a charge never exceeds what was held) for one attempt and
    release the rest of its hold, in one transaction. Idempotent: a duplicated settle returns the first
    settle entry and changes nothing. None when the attempt had no hold. ``detail``: what the entry's data
    adds, given the charge applied (known only under the wallet's lock: a resizable attempt's lots)."""
    key = f"settle:{job.pk}:{attempt}"
    with transaction.atomic():
        o = _open_hold_locked(job, attempt, key)
        if o is None or o.done is not None:
            return None if o is None else o.done
        wallet, hold, remaining = o.wallet, o.hold, o.remaining
        charge = max(0, min(int(amount), remaining))
        entry = _append(wallet, kind=LedgerKind.SETTLE, amount=-charge, held_change=-charge, key=key, job_id=job.pk,
                        attempt=attempt, user_id=hold.user_id, flavor_id=hold.flavor_id, actor=actor,
                        rate=hold.rate, gpus=hold.gpus, gpu_seconds=int(gpu_seconds), outcome=outcome,
                        memo=memo[:300], data={"requested": int(amount), "capped": charge < amount,
                                               **(detail(charge) if detail else {})})
        if remaining - charge > 0:
            _release(wallet, hold, job=job, attempt=attempt, amount=remaining - charge, actor=actor,
                     outcome=outcome, memo="rest of the hold released")
        return entry


def wallet_release(*, job, attempt: int, actor=None, memo: str = "") -> LedgerEntry | None:
    """Release whatever is still held for one attempt without charging. Idempotent."""
    with transaction.atomic():
        o = _open_hold_locked(job, attempt, f"release:{job.pk}:{attempt}")
        if o is None or o.done is not None:
            return None if o is None else o.done
        if o.remaining <= 0:
            return None
        return _release(o.wallet, o.hold, job=job, attempt=attempt, amount=o.remaining, actor=actor,
                        memo=memo[:300] or "hold released")


def _release(wallet, hold, *, job, attempt: int, amount: int, actor, memo: str, outcome: str = "") -> LedgerEntry:
    """The one RELEASE entry of an attempt (key ``release:<job>:<attempt>``): ``amount`` mcr stop being held."""
    return _append(wallet, kind=LedgerKind.RELEASE, held_change=-amount, key=f"release:{job.pk}:{attempt}",
                   job_id=job.pk, attempt=attempt, user_id=hold.user_id, flavor_id=hold.flavor_id, actor=actor,
                   rate=hold.rate, gpus=hold.gpus, outcome=outcome, memo=memo)


def wallet_refund(*, job, attempt: int, amount: int, reason: str, actor=None,
                  data: dict | None = None) -> LedgerEntry | None:
    """Give back up to what one attempt was charged (``data``: how it was reckoned, e.g. lot by lot).
    Idempotent per (job, attempt)."""
    settle = entry_for(f"settle:{job.pk}:{attempt}")
    if settle is None:
        return None
    key = f"refund:{job.pk}:{attempt}"
    with transaction.atomic():
        wallet, existing = _locked_once(settle.wallet_id, key)
        if existing is not None:
            return existing
        amount = min(int(amount), -settle.amount)
        if amount <= 0:
            return None
        return _append(wallet, kind=LedgerKind.REFUND, amount=amount, key=key, job_id=job.pk, attempt=attempt,
                       user_id=settle.user_id, flavor_id=settle.flavor_id, actor=actor, rate=settle.rate,
                       gpus=settle.gpus, outcome=settle.outcome, memo=reason[:300], data=data or {})


def wallet_refill(*, department: Department, period: str, amount: int, actor=None) -> LedgerEntry | None:
    """Add ``amount`` mcr for ``period`` exactly once: a second call for the same department and period
    (beat firing twice, two workers) returns None and changes nothing."""
    wallet = Wallet.objects.filter(department=department).first() or wallet_create(department=department)
    try:
        with transaction.atomic():
            wallet = _lock_one(wallet.pk)
            if RefillRecord.objects.filter(department=department, period=period).exists():
                return None
            entry = None
            if amount > 0:
                entry = _append(wallet, kind=LedgerKind.REFILL, amount=amount, key=f"refill:{department.pk}:{period}",
                                actor=actor, memo=f"refill for {period}")
            RefillRecord.objects.create(department=department, period=period, amount=max(0, amount), entry=entry)
            return entry
    except IntegrityError:  # a concurrent refill of the same period won (the lock makes this rare)
        return None


def adjust_key(wallet: Wallet, client_key: str) -> str:
    """The ledger key of an adjustment retried with the client's Idempotency-Key (fits the column whatever
    the key's length)."""
    key = f"adjust:{wallet.pk}:{client_key}"
    return key if len(key) <= 200 else f"adjust:{wallet.pk}:sha256:{hashlib.sha256(client_key.encode()).hexdigest()}"


def wallet_adjust(*, department: Department, amount: int, actor, comment: str, key: str | None = None
                  ) -> LedgerEntry:
    """A manual correction or budget grant by a platform admin (audited). Negative adjustments cannot take
    more than is available (held credits belong to running jobs). A retry with the same ``key`` returns the
    first entry; the same key with another amount or comment raises IdempotencyKeyReused (as jobs do)."""
    if amount == 0:
        raise field_error("amount", "The amount must not be zero.")
    wallet = Wallet.objects.filter(department=department).first()
    if wallet is None:
        raise NotFound("This department has no wallet.")
    key = key or f"adjust:{uuid.uuid4().hex}"
    with transaction.atomic():
        wallet, existing = _locked_once(wallet.pk, key)
        if existing is not None:
            if (existing.kind, existing.wallet_id, existing.amount, existing.memo) != (
                    LedgerKind.ADJUSTMENT, wallet.pk, amount, comment[:300]):
                raise IdempotencyKeyReused(detail={"entry_id": existing.pk})
            return existing
        if amount < 0 and -amount > wallet.available:
            raise field_error("amount", f"Only {format_credits(wallet.available)} are available to take away "
                                         f"({format_credits(wallet.held)} held by running jobs).",
                              "insufficient_credits")
        old = {"balance": wallet.balance}
        entry = _append(wallet, kind=LedgerKind.ADJUSTMENT, amount=amount, key=key, actor=actor,
                        memo=comment[:300])
        audit(actor=actor, action="wallet.adjust", obj=wallet, department=department, old=old,
              new={"balance": wallet.balance, "amount": amount}, comment=comment)
        return entry


def wallet_set_balance(*, department: Department, balance: int, actor, comment: str = "") -> LedgerEntry | None:
    """Set the department's budget to ``balance`` mcr (an adjustment by the difference)."""
    if balance < 0:
        raise field_error("balance", "The balance cannot be negative.", "min_value")
    wallet = Wallet.objects.filter(department=department).first() or wallet_create(department=department,
                                                                                  actor=actor)
    with transaction.atomic():
        wallet = _lock_one(wallet.pk)
        delta = balance - wallet.balance
        if delta == 0:
            return None
        return wallet_adjust(department=department, amount=delta, actor=actor,
                             comment=comment or f"budget set to {balance} mcr")


def open_holds(*, wallet: Wallet):
    """Hold entries of attempts that have not ended yet (no settle or release)."""
    return (open_holds_in(wallet_ids=[wallet.pk]).select_related("job", "user", "flavor")
            .order_by("created_at", "id"))


def open_holds_in(*, wallet_ids: list[int]):
    """``open_holds`` of several wallets in one query (unordered, no related rows)."""
    # An attempt's hold and its end are in the same wallet (the job's department's): saying so lets PostgreSQL
    # look for the end among the wallet's own entries, not the whole ledger's (60 ms instead of 180 at 100k jobs).
    ended = LedgerEntry.objects.filter(wallet_id=OuterRef("wallet_id"), job_id=OuterRef("job_id"),
                                       attempt=OuterRef("attempt"),
                                       kind__in=(LedgerKind.SETTLE, LedgerKind.RELEASE))
    return LedgerEntry.objects.filter(wallet_id__in=wallet_ids, kind=LedgerKind.HOLD).filter(~Exists(ended))
