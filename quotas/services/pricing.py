"""Prices and the one cost function: what GPU time costs, at base price or at the auction's clearing price.

Invariants:

* ``cost_of`` is the only place a rate (mcr per GPU-hour) becomes milli-credits: holds, settlements,
  quotes, allowances and reports all go through it, so they round the same way (up, to the next mcr, of
  whole GPU-seconds). The arithmetic itself is ``billing.money``, shared with the simulator.
* A quote (``estimated_cost``) is the worst case: the base price inside nominal quota, at most the job's bid
  when it borrows (winners pay the clearing price, which never exceeds their own bid), for its whole
  ``max_runtime_s``. A hold is never less than what the attempt can be charged.
* Realtime is dearer than the other tiers of the same flavor (``money.price_order_conflict``, checked on
  every change); price changes are audited.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from billing import money
from portal.audit import audit
from portal.money import format_credits
from quotas.models import TIER_NAMES, Flavor, Price
from quotas.services.base import field_error


def cost_of(*, rate: int, gpu_seconds: int | float) -> int:
    """mcr for ``gpu_seconds`` at ``rate`` mcr per GPU-hour, rounded up to the next milli-credit
    (``billing.money.cost_of``, the arithmetic the simulator uses too)."""
    return money.cost_of(rate, gpu_seconds)


def gpu_seconds_of(job) -> int:
    """The most GPU-seconds one attempt of ``job`` can use: all its GPUs (a fraction's share) for its whole max
    runtime."""
    return job.gpu_share * job.max_runtime_s


def read_prices() -> dict[tuple[int, str], int]:
    """Every base price, by (flavor id, tier), in one query."""
    return {(f, t): p for f, t, p in Price.objects.values_list("flavor_id", "tier", "per_gpu_hour")}


def price_for(*, flavor_id: int, tier: str) -> int:
    """Base price in mcr per GPU-hour (0 when none is set: the flavor is free in that tier)."""
    return Price.objects.filter(flavor_id=flavor_id, tier=tier).values_list("per_gpu_hour", flat=True).first() or 0


def worst_case_rate(*, job, prices: dict | None = None) -> int:
    """The highest rate an admission can cost: the base price inside nominal, at most the bid when borrowed
    (winners pay the clearing price, which never exceeds their own bid)."""
    base = prices.get((job.flavor_id, job.tier), 0) if prices is not None else price_for(
        flavor_id=job.flavor_id, tier=job.tier)
    return money.worst_case_rate(job_base_rate(job=job, base=base), job.bid)


def job_base_rate(*, job, base: int) -> int:
    """The base price a job pays: its tier's, with the surcharge of a non-preemptible job (``PreemptionLimit``)."""
    return money.surcharged(base, job.price_surcharge_pct or 0)


def estimated_cost(*, job, prices: dict | None = None, cpu_prices: dict | None = None) -> int:
    """The quote of one attempt of ``job``: the worst-case rate for all its GPU-seconds, plus its CPU work (the
    cores and GiB of its roles without GPUs) for its whole max runtime at its CPU pools' prices. ``prices`` is
    ``read_prices()`` (and ``cpu_prices`` ``read_cpu_prices()``) when quoting many jobs (else they are read)."""
    gpu = cost_of(rate=worst_case_rate(job=job, prices=prices), gpu_seconds=gpu_seconds_of(job))
    return gpu + cost_of(rate=cpu_hourly(job=job, prices=cpu_prices), gpu_seconds=job.max_runtime_s)


def read_cpu_prices() -> dict[tuple[int, str], tuple[int, int]]:
    """Every CPU pool's prices per core-hour and GiB-hour, by (flavor id, tier), in one query."""
    return read_all_prices()[1]


def read_all_prices() -> tuple[dict[tuple[int, str], int], dict[tuple[int, str], tuple[int, int]]]:
    """``read_prices()`` and ``read_cpu_prices()`` in one query (a cycle reads both)."""
    gpu, cpu = {}, {}
    for f, t, p, c, g in Price.objects.values_list("flavor_id", "tier", "per_gpu_hour", "per_core_hour",
                                                   "per_gib_hour"):
        gpu[(f, t)] = p
        if c or g:
            cpu[(f, t)] = (c, g)
    return gpu, cpu


def cpu_hourly(*, job, prices: dict | None = None) -> int:
    """mcr per hour of the job's CPU work (``job.cpu_work()``: per CPU pool, the millicores and MiB of its roles
    without GPUs) at each pool's prices in the job's tier; 0 for a job of GPUs only."""
    work = job.cpu_work() if hasattr(job, "cpu_work") else ()
    if not work:
        return 0
    if prices is None:
        prices = read_cpu_prices()
    total = 0
    for flavor_id, millicores, mib in work:
        core, gib = prices.get((flavor_id, job.tier), (0, 0))
        total += money.cpu_rate(millicores, mib, per_core_hour=core, per_gib_hour=gib)
    return total


def admission_rate(*, job) -> tuple[int, str]:
    """(mcr per GPU-hour, basis) for an admitted job. The base price is the reserve: a winner whose bid bought
    nothing pays it; a winner whose bid decided (on borrowed capacity, or before its colleagues' jobs inside its
    quota) pays its critical bid when that is higher (the engine never sets it above the job's own bid)."""
    base = job_base_rate(job=job, base=price_for(flavor_id=job.flavor_id, tier=job.tier))
    return money.admission_rate(base, borrowed=bool(job.borrowed), price=job.price)


def price_set(*, flavor: Flavor, tier: str, per_gpu_hour: int, actor, per_core_hour: int | None = None,
              per_gib_hour: int | None = None) -> tuple[Price, bool]:
    """Create or change a base price (audited). Realtime must be dearer than the other tiers of the flavor. A
    CPU pool's prices are per core-hour and per GiB-hour (``per_gpu_hour`` 0)."""
    for name, value in (("per_core_hour", per_core_hour), ("per_gib_hour", per_gib_hour)):
        if value is not None and value < 0:
            raise field_error(name, "Must be >= 0.", "min_value")
    if tier not in TIER_NAMES:
        raise field_error("tier", f"One of {', '.join(TIER_NAMES)}.", "invalid_choice")
    if per_gpu_hour < 0:
        raise field_error("per_gpu_hour", "Must be >= 0.", "min_value")
    others = dict(Price.objects.filter(flavor=flavor).exclude(tier=tier).values_list("tier", "per_gpu_hour"))
    # A CPU pool's GPU prices are all 0: the realtime-dearer rule reads GPU prices, so it does not hold them.
    conflict = None if flavor.is_cpu else money.price_order_conflict(tier, per_gpu_hour, others)
    if conflict is not None:
        side, bound = conflict
        text = ("Realtime must be dearer than the other tiers" if side == "above"
                else "Must be below the realtime price")
        raise field_error("per_gpu_hour", f"{text} ({format_credits(bound)}/GPU-h).", "realtime_not_dearer")
    with transaction.atomic():
        price = Price.objects.select_for_update().filter(flavor=flavor, tier=tier).first()
        created = price is None
        old = None if created else {"per_gpu_hour": price.per_gpu_hour}
        cpu = {k: v for k, v in (("per_core_hour", per_core_hour), ("per_gib_hour", per_gib_hour)) if v is not None}
        if created:
            price = Price.objects.create(flavor=flavor, tier=tier, per_gpu_hour=per_gpu_hour, **cpu)
        else:
            price.per_gpu_hour = per_gpu_hour
            for k, v in cpu.items():
                setattr(price, k, v)
            price.updated_at = timezone.now()
            price.save(update_fields=["per_gpu_hour", *cpu, "updated_at"])
        audit(actor=actor, action="price.set", obj=price, old=old,
              new={"flavor": flavor.name, "tier": tier, "per_gpu_hour": per_gpu_hour, **cpu})
    return price, created


def price_delete(*, price: Price, actor) -> None:
    with transaction.atomic():
        audit(actor=actor, action="price.delete", obj=price, old={"flavor": price.flavor.name, "tier": price.tier,
                                                                   "per_gpu_hour": price.per_gpu_hour})
        price.delete()
