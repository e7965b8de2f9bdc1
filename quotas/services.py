"""Quota and budget use cases: wallets, the append-only ledger, prices, refills, approvals, reports.

The hooks the job lifecycle calls (``approval_required``, ``available_credits``, ``hold_for``,
``on_job_admitted``, ``on_attempt_ended``) are at the end of this module. See docs/budgets.md.

Money rules (house rule 4):

* Credits are integer milli-credits (mcr). Never floats.
* Every movement is one ``LedgerEntry`` written in the same transaction that changes the wallet, with the
  wallet row locked (``select_for_update``, several wallets always in primary-key order, Saleor's
  ``lock_objects`` idea), so concurrent holds, settlements and refills serialise per wallet and can never
  overspend. The database refuses what slips through: ``balance >= 0``, ``0 <= held <= balance``.
* Every entry has a unique idempotency key derived from what it is about (``settle:<job>:<attempt>``), so a
  duplicated task or a retried request applies once and returns the first result.
* Budgets are enforced for a department once it has a wallet. An install without any wallet does not use
  budgets at all (``available_credits()`` is None and every hold is 0).
"""

from __future__ import annotations

import calendar
import hashlib
import logging
import math
import threading
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass
from datetime import date, datetime, timedelta
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Count, Exists, OuterRef, Q, Sum
from django.db.models.functions import TruncDay, TruncMonth
from django.utils import timezone

from portal.errors import (
    Conflict,
    Forbidden,
    IdempotencyKeyReused,
    InvalidTransition,
    NotFound,
    ValidationFailed,
)
from portal.models import AuditEntry, Department
from portal.tenancy import membership_of
from quotas.models import (
    Allowance,
    Approval,
    ApprovalRule,
    Flavor,
    LedgerEntry,
    LedgerKind,
    Price,
    Quota,
    RefillRecord,
    RefillRule,
    Wallet,
)

log = logging.getLogger(__name__)

MCR_PER_CREDIT = 1000
TIER_NAMES = ("realtime", "elastic", "backfill")


class InsufficientCredits(Conflict):
    code = "insufficient_credits"
    message = "The wallet does not have enough available credits."


# ------------------------------------------------------------------------------------------ helpers


def _field_error(field: str, message: str, code: str = "invalid") -> ValidationFailed:
    return ValidationFailed(fields={field: [{"code": code, "message": message}]})


def audit(*, actor, action: str, obj, department=None, old=None, new=None, comment: str = "") -> AuditEntry:
    """Record who changed what, when, from which value to which (quotas, budgets, prices, policies)."""
    return AuditEntry.objects.create(
        actor=actor if getattr(actor, "pk", None) else None,
        action=action,
        object_type=obj._meta.label_lower,
        object_id=str(obj.pk),
        department=department,
        old=old,
        new=new,
        comment=comment[:2000],
    )


def cost_of(*, rate: int, gpu_seconds: int | float) -> int:
    """mcr for ``gpu_seconds`` at ``rate`` mcr per GPU-hour, rounded up to the next milli-credit."""
    if rate <= 0 or gpu_seconds <= 0:
        return 0
    return math.ceil(rate * int(math.ceil(gpu_seconds)) / 3600)


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
    return LedgerEntry.objects.create(
        wallet=wallet, kind=kind, amount=amount, held_change=held_change, balance_after=wallet.balance,
        held_after=wallet.held, idempotency_key=key, **fields,
    )


def _entry(key: str) -> LedgerEntry | None:
    return LedgerEntry.objects.filter(idempotency_key=key).first()


def hold_key(job_id: int, attempt: int) -> str:
    return f"hold:{job_id}:{attempt}"


# ------------------------------------------------------------------------------------------ wallets


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
        wallet = _lock_one(wallet_id)
        existing = _entry(key)
        if existing is not None:
            return existing
        if amount > wallet.available:
            if not allow_partial:
                raise InsufficientCredits(
                    f"The hold needs {amount} mcr; {wallet.available} available, missing "
                    f"{amount - wallet.available}.",
                    detail={"hold": amount, "available": wallet.available, "missing": amount - wallet.available},
                )
            amount = wallet.available
        if amount <= 0:
            return None
        return _append(wallet, kind=LedgerKind.HOLD, held_change=amount, key=key, job=job, attempt=attempt,
                       user_id=job.owner_id, flavor_id=job.flavor_id, actor=actor, rate=rate,
                       gpus=job.gpus * job.pods, data=data or {})


def open_hold(*, job_id: int, attempt: int) -> int:
    """What is still held for one attempt (hold minus settled and released)."""
    return LedgerEntry.objects.filter(job_id=job_id, attempt=attempt).aggregate(s=Sum("held_change"))["s"] or 0


def wallet_settle(*, job, attempt: int, amount: int, gpu_seconds: int = 0, outcome: str = "", actor=None,
                  memo: str = "") -> LedgerEntry | None:
    """Charge ``amount`` mcr (capped at the hold: a charge never exceeds what was held) for one attempt and
    release the rest of its hold, in one transaction. Idempotent: a duplicated settle returns the first
    settle entry and changes nothing. None when the attempt had no hold."""
    hold = _entry(hold_key(job.pk, attempt))
    if hold is None:
        return None
    key = f"settle:{job.pk}:{attempt}"
    with transaction.atomic():
        wallet = _lock_one(hold.wallet_id)
        existing = _entry(key)
        if existing is not None:
            return existing
        remaining = open_hold(job_id=job.pk, attempt=attempt)
        charge = max(0, min(int(amount), remaining))
        entry = _append(wallet, kind=LedgerKind.SETTLE, amount=-charge, held_change=-charge, key=key, job=job,
                        attempt=attempt, user_id=hold.user_id, flavor_id=hold.flavor_id, actor=actor,
                        rate=hold.rate, gpus=hold.gpus, gpu_seconds=int(gpu_seconds), outcome=outcome,
                        memo=memo[:300], data={"requested": int(amount), "capped": charge < amount})
        if remaining - charge > 0:
            _release(wallet, hold, job=job, attempt=attempt, amount=remaining - charge, actor=actor,
                     outcome=outcome, memo="rest of the hold released")
        return entry


def wallet_release(*, job, attempt: int, actor=None, memo: str = "") -> LedgerEntry | None:
    """Release whatever is still held for one attempt without charging. Idempotent."""
    hold = _entry(hold_key(job.pk, attempt))
    if hold is None:
        return None
    key = f"release:{job.pk}:{attempt}"
    with transaction.atomic():
        wallet = _lock_one(hold.wallet_id)
        existing = _entry(key)
        if existing is not None:
            return existing
        remaining = open_hold(job_id=job.pk, attempt=attempt)
        if remaining <= 0:
            return None
        return _release(wallet, hold, job=job, attempt=attempt, amount=remaining, actor=actor,
                        memo=memo[:300] or "hold released")


def _release(wallet, hold, *, job, attempt: int, amount: int, actor, memo: str, outcome: str = "") -> LedgerEntry:
    """The one RELEASE entry of an attempt (key ``release:<job>:<attempt>``): ``amount`` mcr stop being held."""
    return _append(wallet, kind=LedgerKind.RELEASE, held_change=-amount, key=f"release:{job.pk}:{attempt}",
                   job=job, attempt=attempt, user_id=hold.user_id, flavor_id=hold.flavor_id, actor=actor,
                   rate=hold.rate, gpus=hold.gpus, outcome=outcome, memo=memo)


def wallet_refund(*, job, attempt: int, amount: int, reason: str, actor=None) -> LedgerEntry | None:
    """Give back up to what one attempt was charged. Idempotent per (job, attempt)."""
    settle = _entry(f"settle:{job.pk}:{attempt}")
    if settle is None:
        return None
    key = f"refund:{job.pk}:{attempt}"
    with transaction.atomic():
        wallet = _lock_one(settle.wallet_id)
        existing = _entry(key)
        if existing is not None:
            return existing
        amount = min(int(amount), -settle.amount)
        if amount <= 0:
            return None
        return _append(wallet, kind=LedgerKind.REFUND, amount=amount, key=key, job=job, attempt=attempt,
                       user_id=settle.user_id, flavor_id=settle.flavor_id, actor=actor, rate=settle.rate,
                       gpus=settle.gpus, outcome=settle.outcome, memo=reason[:300])


def period_key(*, period: str, at: datetime) -> str:
    """"2026-11" for monthly, ISO week "2026-W48" for weekly."""
    at = timezone.localtime(at) if timezone.is_aware(at) else at
    if period == "weekly":
        year, week, _ = at.isocalendar()
        return f"{year}-W{week:02d}"
    return f"{at.year}-{at.month:02d}"


def refill_amount(*, rule: RefillRule) -> int:
    if rule.mode == "per_nominal_gpu":
        nominal = Quota.objects.filter(department_id=rule.department_id).aggregate(n=Sum("nominal"))["n"] or 0
        return rule.amount * nominal
    return rule.amount


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
        raise _field_error("amount", "The amount must not be zero.")
    wallet = Wallet.objects.filter(department=department).first()
    if wallet is None:
        raise NotFound("This department has no wallet.")
    key = key or f"adjust:{uuid.uuid4().hex}"
    with transaction.atomic():
        wallet = _lock_one(wallet.pk)
        existing = _entry(key)
        if existing is not None:
            if (existing.kind, existing.wallet_id, existing.amount, existing.memo) != (
                    LedgerKind.ADJUSTMENT, wallet.pk, amount, comment[:300]):
                raise IdempotencyKeyReused(detail={"entry_id": existing.pk})
            return existing
        if amount < 0 and -amount > wallet.available:
            raise _field_error("amount", f"Only {wallet.available} mcr are available to take away "
                                         f"({wallet.held} are held by running jobs).", "insufficient_credits")
        old = {"balance": wallet.balance}
        entry = _append(wallet, kind=LedgerKind.ADJUSTMENT, amount=amount, key=key, actor=actor,
                        memo=comment[:300])
        audit(actor=actor, action="wallet.adjust", obj=wallet, department=department, old=old,
              new={"balance": wallet.balance, "amount": amount}, comment=comment)
        return entry


def wallet_set_balance(*, department: Department, balance: int, actor, comment: str = "") -> LedgerEntry | None:
    """Set the department's budget to ``balance`` mcr (an adjustment by the difference)."""
    if balance < 0:
        raise _field_error("balance", "The balance cannot be negative.", "min_value")
    wallet = Wallet.objects.filter(department=department).first() or wallet_create(department=department,
                                                                                  actor=actor)
    with transaction.atomic():
        wallet = _lock_one(wallet.pk)
        delta = balance - wallet.balance
        if delta == 0:
            return None
        return wallet_adjust(department=department, amount=delta, actor=actor,
                             comment=comment or f"budget set to {balance} mcr")


# ------------------------------------------------------------------------------------------ prices and rules


def price_for(*, flavor_id: int, tier: str) -> int:
    """Base price in mcr per GPU-hour (0 when none is set: the flavor is free in that tier)."""
    return Price.objects.filter(flavor_id=flavor_id, tier=tier).values_list("per_gpu_hour", flat=True).first() or 0


def price_set(*, flavor: Flavor, tier: str, per_gpu_hour: int, actor) -> tuple[Price, bool]:
    """Create or change a base price (audited). Realtime must be dearer than the other tiers of the flavor."""
    if tier not in TIER_NAMES:
        raise _field_error("tier", f"One of {', '.join(TIER_NAMES)}.", "invalid_choice")
    if per_gpu_hour < 0:
        raise _field_error("per_gpu_hour", "Must be >= 0.", "min_value")
    others = dict(Price.objects.filter(flavor=flavor).exclude(tier=tier).values_list("tier", "per_gpu_hour"))
    if tier == "realtime" and any(per_gpu_hour <= v for v in others.values()):
        raise _field_error("per_gpu_hour", f"Realtime must be dearer than the other tiers ({max(others.values())}"
                                           " mcr/GPU-h).", "realtime_not_dearer")
    if tier != "realtime" and "realtime" in others and per_gpu_hour >= others["realtime"]:
        raise _field_error("per_gpu_hour", f"Must be below the realtime price ({others['realtime']} mcr/GPU-h).",
                           "realtime_not_dearer")
    with transaction.atomic():
        price = Price.objects.select_for_update().filter(flavor=flavor, tier=tier).first()
        created = price is None
        old = None if created else {"per_gpu_hour": price.per_gpu_hour}
        if created:
            price = Price.objects.create(flavor=flavor, tier=tier, per_gpu_hour=per_gpu_hour)
        else:
            price.per_gpu_hour = per_gpu_hour
            price.updated_at = timezone.now()
            price.save(update_fields=["per_gpu_hour", "updated_at"])
        audit(actor=actor, action="price.set", obj=price, old=old,
              new={"flavor": flavor.name, "tier": tier, "per_gpu_hour": per_gpu_hour})
    _invalidate_cache()
    return price, created


def price_delete(*, price: Price, actor) -> None:
    with transaction.atomic():
        audit(actor=actor, action="price.delete", obj=price, old={"flavor": price.flavor.name, "tier": price.tier,
                                                                   "per_gpu_hour": price.per_gpu_hour})
        price.delete()
    _invalidate_cache()


RULE_FIELDS = ("mode", "amount", "period", "active")


def _rule_set(model, fields, action: str, *, department: Department, actor, values: dict):
    """Create or update a department's one rule row of ``model``, audited with old and new values."""
    with transaction.atomic():
        rule = model.objects.select_for_update().filter(department=department).first()
        old = None if rule is None else {f: getattr(rule, f) for f in fields}
        if rule is None:
            rule = model(department=department)
        for f in fields:
            if f in values:
                setattr(rule, f, values[f])
        rule.updated_at = timezone.now()
        rule.save()
        audit(actor=actor, action=action, obj=rule, department=department, old=old,
              new={f: getattr(rule, f) for f in fields})
    return rule


def refill_rule_set(*, department: Department, actor, **values) -> RefillRule:
    rule = _rule_set(RefillRule, RULE_FIELDS, "refill_rule.set", department=department, actor=actor, values=values)
    if not Wallet.objects.filter(department=department).exists():
        wallet_create(department=department, actor=actor)
    return rule


def refill_rule_delete(*, department: Department, actor) -> None:
    """Remove the department's refill rule (audited with its last values). NotFound when it has none."""
    with transaction.atomic():
        rule = RefillRule.objects.select_for_update().filter(department=department).first()
        if rule is None:
            raise NotFound("No refill rule.")
        audit(actor=actor, action="refill_rule.delete", obj=rule, department=department,
              old={f: getattr(rule, f) for f in RULE_FIELDS})
        rule.delete()


APPROVAL_FIELDS = ("gpus_above", "cost_above", "realtime")


def approval_rule_set(*, department: Department, actor, **values) -> ApprovalRule:
    return _rule_set(ApprovalRule, APPROVAL_FIELDS, "approval_rule.set", department=department, actor=actor,
                     values=values)


QUOTA_FIELDS = ("nominal", "borrowing_limit", "lending_limit")


def quota_set(*, quota: Quota, actor, **values) -> Quota:
    """Change a quota (platform admins; audited with old and new values)."""
    nominal = values.get("nominal", quota.nominal)
    lending = values.get("lending_limit", quota.lending_limit)
    if lending is not None and lending > nominal:
        raise _field_error("lending_limit", "The lending limit cannot exceed the nominal quota.", "exceeds_nominal")
    with transaction.atomic():
        old = {f: getattr(quota, f) for f in QUOTA_FIELDS}
        for f in QUOTA_FIELDS:
            if f in values:
                setattr(quota, f, values[f])
        quota.save(update_fields=list(QUOTA_FIELDS))
        audit(actor=actor, action="quota.set", obj=quota, department=quota.department, old=old,
              new={f: getattr(quota, f) for f in QUOTA_FIELDS})
    return quota


def allowance_member(*, actor, username: str):
    """The user whose allowance ``actor`` may set: a member of the actor's own department (platform admins:
    anyone's). Another department's member, or nobody, is NotFound; a non-admin actor is Forbidden."""
    m = membership_of(actor)
    if m is None:
        raise Forbidden("You are not a member of any department.")
    from portal.models import Membership

    target = Membership.objects.select_related("user", "department").filter(user__username=username).first()
    if target is None or (not m.is_platform_admin and target.department_id != m.department_id):
        raise NotFound("No such member.")
    if not m.is_department_admin:
        raise Forbidden("Only department admins can set allowances.")
    return target.user


def allowance_set(*, user, limit: int | None, period: str = "monthly", actor) -> Allowance | None:
    """Set (or with ``limit=None`` remove) a user's allowance inside their department's wallet."""
    m = membership_of(user)
    if m is None:
        raise _field_error("user", "The user is not a member of a department.")
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


# ------------------------------------------------------------------------------------------ the hooks


# hold_for is called once per queued job in every snapshot, right before available_credits. So that the
# snapshot stays a fixed number of queries, the wallets and the price list are read once per cycle (keyed by
# the cycle's ``now``), and available_credits() consumes the wallet rows that same read just loaded (one
# consistent read of holds and credits; only by the same thread and within a few seconds).
_cache_lock = threading.Lock()
_cache: dict[str, Any] = {"now": None}
_fresh = threading.local()
FRESH_S = 5.0


def _invalidate_cache() -> None:
    with _cache_lock:
        _cache["now"] = None
    _fresh.credits = None


def _tables(now) -> tuple[dict[tuple[int, str], int], set[int]]:
    with _cache_lock:
        if now is not None and _cache["now"] == now:
            return _cache["prices"], _cache["metered"]
    wallets = list(Wallet.objects.values_list("department_id", "department__slug", "balance", "held"))
    metered = {w[0] for w in wallets}
    prices = {}
    if metered:
        prices = {(f, t): p for f, t, p in Price.objects.values_list("flavor_id", "tier", "per_gpu_hour")}
    _fresh.credits = (time.monotonic(), {slug: b - h for _, slug, b, h in wallets} if wallets else None)
    with _cache_lock:
        _cache.update(now=now, prices=prices, metered=metered)
    return prices, metered


def worst_case_rate(*, job, prices: dict | None = None) -> int:
    """The highest rate an admission can cost: the base price inside nominal, at most the bid when borrowed
    (winners pay the clearing price, which never exceeds their own bid)."""
    base = prices.get((job.flavor_id, job.tier), 0) if prices is not None else price_for(
        flavor_id=job.flavor_id, tier=job.tier)
    return max(base, job.bid or 0)


def estimated_cost(*, job) -> int:
    return cost_of(rate=worst_case_rate(job=job), gpu_seconds=job.gpus * job.pods * job.max_runtime_s)


@dataclass
class ApprovalInputs:
    """What ``approval_required`` reads about a submitter: the department's rule, the user's allowance and
    what that allowance already has committed. A batch of jobs by one user reads them once; every job the
    check lets through directly is added to ``used``, so the next job of the batch counts it too."""

    rule: ApprovalRule | None
    allowance: Allowance | None
    used: int = 0


def approval_inputs(*, department_id, owner_id) -> ApprovalInputs:
    rule = ApprovalRule.objects.filter(department_id=department_id).first()
    allowance = Allowance.objects.filter(user_id=owner_id).first() if owner_id else None
    used = allowance_used(allowance=allowance) if allowance is not None else 0
    return ApprovalInputs(rule=rule, allowance=allowance, used=used)


def approval_required(*, job, inputs: ApprovalInputs | None = None) -> str | None:
    """Why ``job`` must wait for a department admin's approval, or None to queue it directly (then the job's
    estimated cost counts against the owner's allowance in ``inputs`` from now on).

    ``inputs`` is ``approval_inputs(...)`` for the job's department and owner, read here when not given."""
    if inputs is None:
        inputs = approval_inputs(department_id=job.department_id, owner_id=job.owner_id)
    rule, allowance = inputs.rule, inputs.allowance
    if rule is None and allowance is None:
        return None
    why: list[str] = []
    gpus = job.gpus * job.pods
    cost = None
    if rule is not None:
        if rule.realtime and job.tier == "realtime":
            why.append("realtime jobs need approval")
        if rule.gpus_above is not None and gpus > rule.gpus_above:
            why.append(f"{gpus} GPUs > {rule.gpus_above}")
        if rule.cost_above is not None:
            cost = estimated_cost(job=job)
            if cost > rule.cost_above:
                why.append(f"estimated cost {cost} mcr > {rule.cost_above}")
    if allowance is not None:
        cost = estimated_cost(job=job) if cost is None else cost
        if inputs.used + cost > allowance.limit:
            why.append(f"exceeds {job.owner.get_username()}'s {allowance.period} allowance "
                       f"({inputs.used} + {cost} > {allowance.limit} mcr)")
        elif not why:
            inputs.used += cost
    return ("Needs a department admin's approval: " + "; ".join(why)) if why else None


def allowance_used(*, allowance: Allowance, now: datetime | None = None) -> int:
    """What the user committed this period: charges net of refunds, plus open holds, plus the worst-case cost
    of their queued jobs (they hold nothing until admitted, but each one will; without them any number of
    jobs could queue under the allowance before the first was admitted)."""
    from scheduling.models import Job, JobState

    now = now or timezone.now()
    start = period_start(period=allowance.period, at=now)
    rows = LedgerEntry.objects.filter(wallet_id=allowance.wallet_id, user_id=allowance.user_id)
    charged = rows.filter(created_at__gte=start, kind__in=(LedgerKind.SETTLE, LedgerKind.REFUND)).aggregate(
        s=Sum("amount"))["s"] or 0
    held = rows.filter(kind__in=(LedgerKind.HOLD, LedgerKind.SETTLE, LedgerKind.RELEASE)).aggregate(
        s=Sum("held_change"))["s"] or 0
    queued = list(Job.objects.filter(owner_id=allowance.user_id, state=JobState.QUEUED,
                                     department__wallet__id=allowance.wallet_id)
                  .values_list("flavor_id", "tier", "gpus", "pods", "max_runtime_s", "bid"))
    waiting = 0
    if queued:
        prices = {(f, t): p for f, t, p in Price.objects.values_list("flavor_id", "tier", "per_gpu_hour")}
        waiting = sum(cost_of(rate=max(prices.get((f, t), 0), bid or 0), gpu_seconds=g * n * r)
                      for f, t, g, n, r, bid in queued)
    return -charged + held + waiting


def period_start(*, period: str, at: datetime) -> datetime:
    local = timezone.localtime(at)
    day = local.replace(hour=0, minute=0, second=0, microsecond=0)
    if period == "weekly":
        return day - timedelta(days=day.weekday())
    return day.replace(day=1)


def available_credits() -> dict[str, int] | None:
    """Credits each metered department can still commit to holds; None when no wallet exists at all."""
    fresh = getattr(_fresh, "credits", None)
    _fresh.credits = None
    if fresh is not None and time.monotonic() - fresh[0] < FRESH_S:
        return fresh[1]
    rows = list(Wallet.objects.values_list("department__slug", "balance", "held"))
    if not rows:
        return None
    return {slug: balance - held for slug, balance, held in rows}


def hold_for(*, job, now) -> int:
    """Credits a job needs available to be admitted: its worst-case rate x GPUs x max runtime. 0 for a
    department without a wallet (not metered)."""
    prices, metered = _tables(now)
    if job.department_id not in metered:
        return 0
    return cost_of(rate=worst_case_rate(job=job, prices=prices), gpu_seconds=job.gpus * job.pods * job.max_runtime_s)


def admission_rate(*, job) -> tuple[int, str]:
    """(mcr per GPU-hour, basis) for an admitted job: the clearing price when borrowed, else the base price."""
    if job.borrowed and job.price is not None:
        return int(job.price), "clearing"
    return price_for(flavor_id=job.flavor_id, tier=job.tier), "base"


def on_job_admitted(*, job) -> None:
    """Place the job's hold when it is admitted (inside the cycle's apply transaction)."""
    from scheduling.services.jobs import record_event

    if not Wallet.objects.filter(department_id=job.department_id).exists():
        return
    rate, basis = admission_rate(job=job)
    gpus = job.gpus * job.pods
    amount = cost_of(rate=rate, gpu_seconds=gpus * job.max_runtime_s)
    admitted_at = job.admitted_at or timezone.now()
    entry = wallet_hold(job=job, attempt=job.attempt, amount=amount, rate=rate, allow_partial=True,
                        data={"basis": basis, "borrowed": bool(job.borrowed), "price": job.price,
                              "admitted_at": admitted_at.isoformat(), "max_runtime_s": job.max_runtime_s,
                              "wanted": amount})
    held = -1 if entry is None else entry.held_change
    if amount == 0:
        return
    message = (f"hold {held} mcr: {rate} mcr/GPU-h ({basis} price) x {gpus} GPU(s) x "
               f"{job.max_runtime_s / 3600:g} h")
    if held < amount:
        log.warning("job %s: hold short, wanted %s mcr, held %s", job.pk, amount, max(held, 0))
        message += f"; SHORT by {amount - max(held, 0)} mcr (the charge can never exceed the hold)"
    record_event(job=job, kind="budget", reason_code="hold", message=message,
                 data={"hold": max(held, 0), "rate": rate, "basis": basis})


# The refund policy (docs/budgets.md): what a preempted or failed attempt gets back after being charged for
# the GPU-time it used up to its end.
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


def _refund_share(*, job, attempt: int, outcome: str, hold: LedgerEntry) -> tuple[float, str]:
    if outcome == "platform_failure":
        return REFUND_POLICY["platform_failure"], "platform failure: refunded in full"
    if outcome != "preempted":
        return 0.0, ""
    from scheduling.models import PreemptionVictim

    decided = PreemptionVictim.objects.filter(job_id=job.pk, attempt=attempt).exists()
    if not decided:
        return REFUND_POLICY["evicted_by_cluster"], "evicted by the cluster, not by the portal: refunded in full"
    if (hold.data or {}).get("borrowed"):
        return REFUND_POLICY["preempted_borrowed"], "preempted on borrowed capacity: charged up to the eviction"
    return REFUND_POLICY["preempted_nominal"], "preempted inside the nominal quota: refunded in full"


def settle_attempt(*, job, attempt: int, outcome: str, end: datetime | None = None, actor=None) -> Settlement | None:
    """Settle one attempt's actual GPU-time, release the rest of its hold and refund per REFUND_POLICY.
    Idempotent (every step has its own key). None when the attempt had no hold."""
    hold = _entry(hold_key(job.pk, attempt))
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
        share, why = _refund_share(job=job, attempt=attempt, outcome=outcome, hold=hold)
        refund = None
        if settle is not None and share > 0 and settle.amount < 0:
            refund = wallet_refund(job=job, attempt=attempt, amount=math.floor(-settle.amount * share), reason=why)
    return Settlement(charged=-settle.amount if settle else 0, refunded=refund.amount if refund else 0,
                      gpu_seconds=settle.gpu_seconds if settle else 0)


def on_attempt_ended(*, job, attempt: int, outcome: str) -> None:
    """Settle, release or refund the hold of one attempt of ``job``.

    ``outcome``: succeeded | failed | cancelled | preempted | platform_failure."""
    from scheduling.services.jobs import record_event

    if not LedgerEntry.objects.filter(idempotency_key=hold_key(job.pk, attempt)).exists():
        return
    already = LedgerEntry.objects.filter(idempotency_key=f"settle:{job.pk}:{attempt}").exists()
    result = settle_attempt(job=job, attempt=attempt, outcome=outcome)
    if result is None or already:
        return
    message = f"attempt {attempt} {outcome}: charged {result.charged} mcr for {result.gpu_seconds / 3600:.3f} GPU-h"
    if result.refunded:
        message += f", refunded {result.refunded} mcr"
    record_event(job=job, kind="budget", reason_code="settle", message=message, attempt=attempt,
                 data={"charged": result.charged, "refunded": result.refunded, "gpu_seconds": result.gpu_seconds})


# ------------------------------------------------------------------------------------------ approvals


def _check_approver(*, user, job) -> None:
    m = membership_of(user)
    if m is None or (not m.is_platform_admin and m.department_id != job.department_id):
        raise NotFound("No such job.")
    if not m.is_department_admin:
        raise Forbidden("Only a department admin of the job's department can approve or reject it.")


def _decided(job, decision: str):
    from scheduling.models import JobState

    job.refresh_from_db()
    existing = Approval.objects.filter(job=job).first()
    if existing is not None and existing.decision == decision:
        return job
    if job.state != JobState.PENDING_APPROVAL:
        raise InvalidTransition(f"The job is {job.state}; only jobs pending approval can be "
                                f"{decision}.")
    return None


def job_approve(*, user, job, comment: str = ""):
    """Approve a job waiting in pending_approval: it is queued and its pods are created. Idempotent."""
    from scheduling.core import reasons
    from scheduling.models import JobState
    from scheduling.services.jobs import enqueue_pod_creation, transition

    _check_approver(user=user, job=job)
    done = _decided(job, "approved")
    if done is not None:
        return done
    why = job.reason_message
    with transaction.atomic():
        ok = transition(job=job, to=JobState.QUEUED, allowed_from=[JobState.PENDING_APPROVAL], actor=user,
                        reason_code=reasons.QUEUED, message=f"approved by {user.get_username()}"
                        + (f": {comment}" if comment else ""), queued_at=timezone.now())
        if not ok:
            done = _decided(job, "approved")
            if done is not None:
                return done
            raise InvalidTransition("The job is no longer pending approval.")
        job.reason_message = reasons.CODES[reasons.QUEUED]
        type(job).objects.filter(pk=job.pk).update(reason_message=job.reason_message)
        approval = Approval.objects.create(job=job, decision="approved", actor=user, comment=comment, reason=why)
        audit(actor=user, action="job.approve", obj=approval, department=job.department,
              new={"job": job.pk, "decision": "approved"}, comment=comment)
        enqueue_pod_creation(job)
    return job


def job_reject(*, user, job, comment: str):
    """Reject a job waiting in pending_approval (a comment is required): it is cancelled. Idempotent."""
    from scheduling.models import JobState
    from scheduling.services.jobs import transition

    _check_approver(user=user, job=job)
    if not (comment or "").strip():
        raise _field_error("comment", "Say why the job is rejected.", "required")
    done = _decided(job, "rejected")
    if done is not None:
        return done
    why = job.reason_message
    with transaction.atomic():
        ok = transition(job=job, to=JobState.CANCELLED, allowed_from=[JobState.PENDING_APPROVAL], actor=user,
                        reason_code="rejected", message=f"rejected by {user.get_username()}: {comment}",
                        finished_at=timezone.now())
        if not ok:
            done = _decided(job, "rejected")
            if done is not None:
                return done
            raise InvalidTransition("The job is no longer pending approval.")
        approval = Approval.objects.create(job=job, decision="rejected", actor=user, comment=comment, reason=why)
        audit(actor=user, action="job.reject", obj=approval, department=job.department,
              new={"job": job.pk, "decision": "rejected"}, comment=comment)
    return job


# ------------------------------------------------------------------------------------------ selectors


def department_for(user, slug: str) -> Department:
    """The department ``slug`` if ``user`` may see it (their own; platform admins any), else NotFound: the
    one tenancy rule for a department named in a URL."""
    m = membership_of(user)
    if m is None:
        raise Forbidden("You are not a member of any department.")
    if not m.is_platform_admin and m.department.slug != slug:
        raise NotFound("No such department.")
    dept = Department.objects.filter(slug=slug).first()
    if dept is None:
        raise NotFound("No such department.")
    return dept


def wallets_for(user):
    """The one scoping rule for wallets: platform admins all, members their department's, others none."""
    m = membership_of(user)
    qs = Wallet.objects.select_related("department")
    if m is None:
        return qs.none()
    return qs if m.is_platform_admin else qs.filter(department_id=m.department_id)


def allowances_for(user):
    """Allowances ``user`` may see: platform admins all, department admins their department's, researchers
    only their own (a colleague's limit and spending are the department admins' business), others none."""
    m = membership_of(user)
    qs = Allowance.objects.select_related("user", "wallet__department").order_by("wallet__department__slug",
                                                                                 "user__username", "id")
    if m is None:
        return qs.none()
    if m.is_platform_admin:
        return qs
    qs = qs.filter(wallet__department_id=m.department_id)
    return qs if m.is_department_admin else qs.filter(user=user)


def ledger_for(user):
    m = membership_of(user)
    qs = LedgerEntry.objects.select_related("wallet__department", "user", "actor", "flavor")
    if m is None:
        return qs.none()
    return qs if m.is_platform_admin else qs.filter(wallet__department_id=m.department_id)


def open_holds(*, wallet: Wallet):
    """Hold entries of attempts that have not ended yet (no settle or release)."""
    ended = LedgerEntry.objects.filter(job_id=OuterRef("job_id"), attempt=OuterRef("attempt"),
                                       kind__in=(LedgerKind.SETTLE, LedgerKind.RELEASE))
    return (LedgerEntry.objects.filter(wallet=wallet, kind=LedgerKind.HOLD).filter(~Exists(ended))
            .select_related("job", "user", "flavor").order_by("created_at", "id"))


def burn_rate(*, wallet: Wallet, now: datetime | None = None, days: int = 7) -> dict[str, int]:
    """Net spend per day over the last ``days`` days, and the rate (mcr/hour) of the attempts running now."""
    now = now or timezone.now()
    spent = LedgerEntry.objects.filter(wallet=wallet, created_at__gte=now - timedelta(days=days),
                                       kind__in=(LedgerKind.SETTLE, LedgerKind.REFUND)).aggregate(
        s=Sum("amount"))["s"] or 0
    running = sum(cost_of(rate=h.rate or 0, gpu_seconds=h.gpus * 3600) for h in open_holds(wallet=wallet))
    per_day = -spent // days if spent < 0 else 0
    days_left = (wallet.available // per_day) if per_day > 0 else None
    return {"per_day": per_day, "window_days": days, "running_per_hour": running, "days_left": days_left}


def job_cost(*, job, now: datetime | None = None) -> dict[str, Any]:
    """A job's money across its attempts: hold of the current attempt, cost to date, final charge."""
    now = now or timezone.now()
    entries = list(LedgerEntry.objects.filter(job=job).order_by("created_at", "id"))
    per_attempt: dict[int, dict[str, Any]] = defaultdict(lambda: {"held": 0, "charged": 0, "refunded": 0,
                                                                  "released": 0, "rate": None, "open": False})
    holds: dict[int, LedgerEntry] = {}
    for e in entries:
        a = per_attempt[e.attempt or 0]
        if e.kind == LedgerKind.HOLD:
            a["held"] += e.held_change
            a["rate"] = e.rate
            a["basis"] = (e.data or {}).get("basis")
            holds[e.attempt or 0] = e
        elif e.kind == LedgerKind.SETTLE:
            a["charged"] += -e.amount
        elif e.kind == LedgerKind.RELEASE:
            a["released"] += -e.held_change
        elif e.kind == LedgerKind.REFUND:
            a["refunded"] += e.amount
    ended = {(e.attempt or 0) for e in entries if e.kind in (LedgerKind.SETTLE, LedgerKind.RELEASE)}
    running_cost = 0
    for attempt, hold in holds.items():
        a = per_attempt[attempt]
        a["open"] = attempt not in ended
        if a["open"]:
            _, c = attempt_usage(hold=hold, end=now)
            a["to_date"] = min(c, a["held"])
            running_cost += a["to_date"]
    charged = sum(a["charged"] for a in per_attempt.values())
    refunded = sum(a["refunded"] for a in per_attempt.values())
    current = per_attempt.get(job.attempt)
    return {
        "metered": bool(entries),
        "hold": current["held"] if current and current["open"] else 0,
        "rate": current["rate"] if current else None,
        "basis": current.get("basis") if current else None,
        "cost_to_date": charged - refunded + running_cost,
        "charged": charged,
        "refunded": refunded,
        "final": (charged - refunded) if job.is_final else None,
        "attempts": {k: dict(v) for k, v in sorted(per_attempt.items())},
    }


# ------------------------------------------------------------------------------------------ reports

GROUPS = {"department": "wallet__department__slug", "user": "user__username", "flavor": "flavor__name"}
PERIODS = {"day": TruncDay, "month": TruncMonth}
REPORT_COLUMNS = ("period", "department", "user", "flavor", "gpu_hours", "charged_mcr", "refunded_mcr",
                  "net_mcr", "attempts", "preemptions")


def usage_report(*, user, group_by: list[str], period: str = "month", since: datetime | None = None,
                 until: datetime | None = None, department: str | None = None) -> list[dict[str, Any]]:
    """Usage and spend from the ledger (settle and refund entries), grouped by period and the given columns.
    One query. Scoped: a member sees their department only (another department is a 404)."""
    m = membership_of(user)
    if m is None:
        raise Forbidden("You are not a member of any department.")
    qs = LedgerEntry.objects.filter(kind__in=(LedgerKind.SETTLE, LedgerKind.REFUND))
    if department:
        if not m.is_platform_admin and department != m.department.slug:
            raise NotFound("No such department.")
        if not Department.objects.filter(slug=department).exists():
            raise NotFound("No such department.")
        qs = qs.filter(wallet__department__slug=department)
    elif not m.is_platform_admin:
        qs = qs.filter(wallet__department_id=m.department_id)
    if since is not None:
        qs = qs.filter(created_at__gte=since)
    if until is not None:
        qs = qs.filter(created_at__lt=until)
    fields = [GROUPS[g] for g in group_by]
    settle = Q(kind=LedgerKind.SETTLE)
    rows = (
        qs.annotate(bucket=PERIODS[period]("created_at"))
        .values("bucket", *fields)
        .annotate(
            gpu_seconds=Sum("gpu_seconds", filter=settle),
            charged=Sum("amount", filter=settle),
            refunded=Sum("amount", filter=Q(kind=LedgerKind.REFUND)),
            attempts=Count("id", filter=settle),
            preemptions=Count("id", filter=settle & Q(outcome="preempted")),
        )
        .order_by("bucket", *fields)
    )
    out = []
    for r in rows:
        charged, refunded = -(r["charged"] or 0), r["refunded"] or 0
        bucket = r["bucket"]
        out.append({
            "period": bucket.strftime("%Y-%m-%d" if period == "day" else "%Y-%m"),
            "department": r.get(GROUPS["department"]),
            "user": r.get(GROUPS["user"]),
            "flavor": r.get(GROUPS["flavor"]),
            "gpu_hours": round((r["gpu_seconds"] or 0) / 3600, 4),
            "charged_mcr": charged,
            "refunded_mcr": refunded,
            "net_mcr": charged - refunded,
            "attempts": r["attempts"],
            "preemptions": r["preemptions"],
        })
    return out


def month_bounds(month: date) -> tuple[datetime, datetime]:
    tz = timezone.get_current_timezone()
    start = datetime(month.year, month.month, 1, tzinfo=tz)
    days = calendar.monthrange(month.year, month.month)[1]
    return start, start + timedelta(days=days)


def monthly_statement(*, month: date, department: Department) -> dict[str, Any]:
    """Opening balance, movements by kind, closing balance and per-user spend of one department and month,
    all from the ledger (so the statement reconciles by construction: opening + movements = closing)."""
    start, end = month_bounds(month)
    wallet = Wallet.objects.filter(department=department).first()
    empty = {"department": department.slug, "month": f"{month.year}-{month.month:02d}", "metered": False}
    if wallet is None:
        return empty
    entries = LedgerEntry.objects.filter(wallet=wallet)
    opening = entries.filter(created_at__lt=start).aggregate(s=Sum("amount"))["s"] or 0
    in_month = entries.filter(created_at__gte=start, created_at__lt=end)
    by_kind = {r["kind"]: r for r in in_month.values("kind").annotate(s=Sum("amount"), n=Count("id"),
                                                                       g=Sum("gpu_seconds"))}
    held_at_end = entries.filter(created_at__lt=end).aggregate(s=Sum("held_change"))["s"] or 0
    users = list(in_month.filter(kind__in=(LedgerKind.SETTLE, LedgerKind.REFUND)).values("user__username")
                 .annotate(net=Sum("amount"), g=Sum("gpu_seconds")).order_by("net", "user__username"))
    movements = {k: (by_kind.get(k, {}).get("s") or 0) for k in LedgerKind.values}
    return {
        **empty,
        "metered": True,
        "opening_mcr": opening,
        "refills_mcr": movements["refill"],
        "adjustments_mcr": movements["adjustment"],
        "charges_mcr": -movements["settle"],
        "refunds_mcr": movements["refund"],
        "closing_mcr": opening + sum(movements.values()),
        "held_at_end_mcr": held_at_end,
        "gpu_hours": round((by_kind.get("settle", {}).get("g") or 0) / 3600, 3),
        "attempts": by_kind.get("settle", {}).get("n") or 0,
        "users": [{"user": u["user__username"] or "-", "net_mcr": -(u["net"] or 0),
                   "gpu_hours": round((u["g"] or 0) / 3600, 3)} for u in users],
    }


# ------------------------------------------------------------------------------------------ periodic work


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
    from scheduling.models import ACTIVE_STATES, Job

    fixed = 0
    for wallet in Wallet.objects.order_by("pk"):
        for hold in open_holds(wallet=wallet):
            job = Job.objects.filter(pk=hold.job_id).first()
            if job is None or (job.attempt == hold.attempt and job.state in ACTIVE_STATES):
                continue
            if job.attempt == hold.attempt and job.state in ("succeeded", "failed", "cancelled"):
                settle_attempt(job=job, attempt=hold.attempt, outcome=job.state)
            else:
                wallet_release(job=job, attempt=hold.attempt, memo="attempt ended without settlement")
            fixed += 1
    return fixed
