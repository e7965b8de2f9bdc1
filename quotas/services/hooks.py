"""What the job lifecycle asks of budgets: one read per cycle, the admission hold, the end of an attempt.

Scheduling reaches this module only through ``quotas.budgets``. Nothing here writes a job or its timeline:
a hook returns a ``BudgetNote`` saying what happened to the money, and the caller (a transition of the job)
records it on the job's timeline.

Invariants:

* A cycle reads every wallet and the price list once (``read_for_cycle``: two queries with budgets in use,
  one without) and asks the returned ``BudgetView`` for each job's hold and for the credits left, so the
  holds and the credits it decides on come from one consistent read, whatever the order of the questions.
* ``on_job_admitted`` runs inside the transaction that admits the job: the hold commits or rolls back with
  the admission. It holds what is available when credits vanished since the snapshot (the charge can never
  exceed the hold), instead of failing the whole cycle.
* ``on_attempt_ended`` runs inside the transaction that ends the attempt, and applies once however often it
  is called.
* A department without a wallet is not metered: its holds are 0 and nothing is written.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import datetime

from django.utils import timezone

from billing import money
from portal.models import Team
from portal.money import format_credits
from quotas.models import LedgerEntry, Wallet
from quotas.services.pricing import (
    admission_rate,
    cpu_hourly,
    estimated_cost,
    job_base_rate,
    price_for,
    read_all_prices,
)
from quotas.services.settlement import resize_lots, settle_attempt
from quotas.services.wallets import entry_for, hold_key, open_holds_in, wallet_hold, wallet_resize

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class BudgetNote:
    """What a hook did to the money, for the job's timeline (an event of kind ``budget``)."""

    reason_code: str
    message: str
    data: dict = field(default_factory=dict)
    attempt: int | None = None


@dataclass(frozen=True)
class BudgetView:
    """Every wallet and price as one cycle read them.

    ``credits``: available credits by department slug, None when no wallet exists at all (budgets unused).
    ``metered``: ids of the departments that have a wallet. ``prices``: base prices by (flavor id, tier)."""

    credits: dict[str, int] | None
    metered: frozenset[int]
    prices: dict[tuple[int, str], int]
    cpu_prices: dict[tuple[int, str], tuple[int, int]] = field(default_factory=dict)  # CPU pools' per core/GiB-h
    # The teams of metered departments with a share of the budget: (team id, department slug, team slug, the
    # most their jobs may hold at once: the share of the department's balance), and the open holds by job
    # (read only when there are such teams: which team a job holds for is scheduling's to say).
    team_limits: tuple[tuple[int, str, str, int], ...] = ()
    open_holds: dict[int, int] = field(default_factory=dict)

    def hold_for(self, job) -> int:
        """Credits a job needs available to be admitted: its quote (worst-case rate x GPUs x max runtime).
        0 for a department without a wallet (not metered)."""
        if job.department_id not in self.metered:
            return 0
        return estimated_cost(job=job, prices=self.prices, cpu_prices=self.cpu_prices)

    def available_credits(self) -> dict[str, int] | None:
        """Credits each metered department can still commit to holds; None when no wallet exists at all."""
        return None if self.credits is None else dict(self.credits)


def read_for_cycle() -> BudgetView:
    """Read every wallet, and the prices when any wallet exists: the budget half of a cycle's snapshot."""
    wallets = list(Wallet.objects.values_list("department_id", "department__slug", "balance", "held"))
    if not wallets:
        return BudgetView(credits=None, metered=frozenset(), prices={})
    prices, cpu_prices = read_all_prices()
    balances = {dept: balance for dept, _, balance, _ in wallets}
    team_limits = tuple(
        (team_id, dept_slug, slug, balances[dept] * pct // 100)
        for team_id, dept, dept_slug, slug, pct in Team.objects.filter(
            budget_share_pct__isnull=False, department_id__in=balances).order_by("pk")
        .values_list("pk", "department_id", "department__slug", "slug", "budget_share_pct"))
    open_holds: dict[int, int] = {}
    if team_limits:
        wallet_ids = list(Wallet.objects.filter(department_id__in=balances).values_list("pk", flat=True))
        for job_id, amount in open_holds_in(wallet_ids=wallet_ids).values_list("job_id", "held_change"):
            open_holds[job_id] = open_holds.get(job_id, 0) + amount
    return BudgetView(credits={slug: balance - held for _, slug, balance, held in wallets},
                      metered=frozenset(d for d, *_ in wallets), prices=prices, cpu_prices=cpu_prices,
                      team_limits=team_limits, open_holds=open_holds)


def on_job_admitted(*, job, speedup: float = 1.0) -> BudgetNote | None:
    """Place the job's hold when it is admitted (inside the cycle's apply transaction). ``speedup``: seconds of
    the job's time per wall-clock second on its cluster (1 but on a sped-up simulated cluster), kept with the
    hold so that settlement charges the time the job ran, on the clock it ran by."""
    if not Wallet.objects.filter(department_id=job.department_id).exists():
        return None
    rate, basis = admission_rate(job=job)
    gpus = job.gpu_share  # a fraction holds and pays its share of a GPU
    cpu_per_hour = cpu_hourly(job=job)  # its CPU work, charged per hour beside its GPUs
    amount = money.hold_of(rate, total_gpus=gpus, max_runtime_s=job.max_runtime_s) + money.cost_of(
        cpu_per_hour, job.max_runtime_s)
    admitted_at = job.admitted_at or timezone.now()
    entry = wallet_hold(job=job, attempt=job.attempt, amount=amount, rate=rate, allow_partial=True,
                        data={"basis": basis, "borrowed": bool(job.borrowed), "price": job.price,
                              "admitted_at": admitted_at.isoformat(), "max_runtime_s": job.max_runtime_s,
                              "wanted": amount, "speedup": float(speedup), "cpu_per_hour": cpu_per_hour,
                              **({"resizable": True} if job.min_pods is not None else {}),
                              **({"gpu_milli": job.pods * job.share_milli} if job.share_milli else {})})
    held = -1 if entry is None else entry.held_change
    if amount == 0:
        return None
    message = (f"hold {format_credits(max(held, 0))}: {format_credits(rate)}/GPU-h ({basis} price) x {gpus:g} GPU(s) x "
               f"{job.max_runtime_s / 3600:g} h")
    if cpu_per_hour:
        message += f" + CPU work {format_credits(cpu_per_hour)}/h"
    if held < amount:
        log.warning("job %s: hold short, wanted %s mcr, held %s", job.pk, amount, max(held, 0))
        message += f"; SHORT by {format_credits(amount - max(held, 0))} (the charge can never exceed the hold)"
    return BudgetNote(reason_code="hold", message=message, data={"hold": max(held, 0), "rate": rate,
                                                                 "basis": basis})


def on_attempt_ended(*, job, attempt: int, outcome: str, preempted_by_portal: bool = False) -> BudgetNote | None:
    """Settle, release or refund the hold of one attempt of ``job``; a note only the first time.

    ``outcome``: succeeded | failed | cancelled | preempted | platform_failure. ``preempted_by_portal``: the
    preemption was the portal's decision (else a preempted attempt was evicted by the cluster)."""
    if not LedgerEntry.objects.filter(idempotency_key=hold_key(job.pk, attempt)).exists():
        return None
    already = LedgerEntry.objects.filter(idempotency_key=f"settle:{job.pk}:{attempt}").exists()
    result = settle_attempt(job=job, attempt=attempt, outcome=outcome, preempted_by_portal=preempted_by_portal)
    if result is None or already:
        return None
    message = (f"attempt {attempt} {outcome}: charged {format_credits(result.charged)} for "
               f"{result.gpu_seconds / 3600:.3f} GPU-h")
    if result.refunded:
        message += f", refunded {format_credits(result.refunded)}"
    return BudgetNote(reason_code="settle", message=message, attempt=attempt,
                      data={"charged": result.charged, "refunded": result.refunded,
                            "gpu_seconds": result.gpu_seconds, **({"lots": list(result.lots)} if result.lots else {})})


def on_job_resized(*, job, attempt: int, resize_id: int, pods_before: int, pods_after: int, price: int | None,
                   at) -> BudgetNote | None:
    """A resizable attempt changed size at ``at`` (inside the transaction that applies the resize, its wallet
    locked first). Its GPUs are lots ([GPUs, rate, borrowed]), the admitted ones first, on the admission's terms:
    a grow adds a lot of borrowed, preemptible capacity at its rate (the cycle's clearing price ``price``, at
    least the base price) and holds it for the rest of the max runtime; a shrink takes the newest lots off first
    (its highest ranks go first): ``money.resized_lots``, as the simulator resizes. Settlement charges each size
    from its resize on (``settlement.attempt_usage``)."""
    hold = entry_for(hold_key(job.pk, attempt))
    if hold is None or not (hold.data or {}).get("resizable"):
        return None
    g = job.gpus_per_pod
    lots = resize_lots(hold)[-1][1]
    have = sum(lot[0] for lot in lots)
    want = pods_after * g
    amount = rate = 0
    if want > have:
        base = job_base_rate(job=job, base=price_for(flavor_id=job.flavor_id, tier=job.tier))
        rate, _ = money.admission_rate(base, borrowed=True, price=price)
        left = float(hold.data.get("max_runtime_s") or job.max_runtime_s)
        admitted = hold.data.get("admitted_at")
        if admitted:
            ran = (at - datetime.fromisoformat(admitted)).total_seconds() * float(hold.data.get("speedup") or 1.0)
            left = max(0.0, left - ran)
        amount = money.hold_of(rate, total_gpus=want - have, max_runtime_s=left)
    lots = money.resized_lots(lots, gpus=want, rate=rate)
    entry = wallet_resize(job=job, attempt=attempt, resize_id=resize_id, amount=amount, rate=rate or hold.rate,
                          gpus=want, data={"at": at.isoformat(), "lots": lots, "pods_before": pods_before,
                                           "pods_after": pods_after})
    if entry is None:
        return None
    per_hour = sum(n * r for n, r, _ in lots)
    message = (f"size {pods_before} -> {pods_after} pods: {want} GPU(s) at {format_credits(per_hour)}/h from now")
    if amount:
        message += (f"; the {want - have} grown GPU(s) at {format_credits(rate)}/GPU-h (borrowed), "
                    f"hold {format_credits(entry.held_change)} more")
    return BudgetNote(reason_code="resize", message=message, attempt=attempt,
                      data={"lots": lots, "held": entry.held_change, "rate": rate})
