"""The money model (pure): what GPU time costs, what an admission holds, what an ended attempt is charged and
what it gets back. The portal's budgets (``quotas.services``) and the trace simulator both call these, so a
replay spends credits exactly as the ledger would.

Units: rates in milli-credits (mcr) per GPU-hour, amounts in integer mcr, time in seconds.

* ``cost_of`` is the only place a rate becomes an amount: rounded up, to the next mcr, of whole GPU-seconds.
* A fraction of a GPU (docs/fractions.md) pays its share of the GPU's price: its GPUs are its share (0.25 for a
  quarter), so a quarter of an A100 for an hour costs a quarter of an A100-hour.
* A quote or a pending job's hold is the worst case (``worst_case_rate``: the base price inside nominal quota,
  at most the job's bid when it borrows, for its whole max runtime); an admission holds its ``admission_rate``
  (the base price is the reserve, contested borrowing pays the cycle's clearing price when that is higher).
* An attempt is charged its GPU-seconds from admission to its end, capped at its max runtime, at the rate of
  its hold, and never more than the hold (``attempt_charge``); the rest of the hold is released.
* Refunds follow ``REFUND_POLICY`` (``refund_share``) and never exceed the charge (``refund_of``).
* A resizable attempt's GPUs are *lots* ``[GPUs, rate, borrowed]``, the admitted ones first on the admission's
  terms: a grow adds a lot of borrowed capacity at its own rate, a shrink takes the newest lots off first
  (``resized_lots``); each lot is charged from its own start at its own rate (``lot_usage``) and refunded on
  its own terms (``lot_settlement``: a preemption gives back the lots inside the quota, not the borrowed ones).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from types import MappingProxyType

from engine import tiers

SECONDS_PER_HOUR = 3600

REFUND_POLICY: Mapping[str, float] = MappingProxyType({
    "platform_failure": 1.0,  # node lost, cluster unreachable, pods vanished: never the user's fault
    "preempted_nominal": 1.0,  # evicted while inside its department's guarantee (for a realtime job)
    "preempted_borrowed": 0.0,  # borrowed capacity is sold as preemptible at the clearing price
    "evicted_by_cluster": 1.0,  # an eviction the portal did not decide (node pressure, drain)
})


def cost_of(rate: int, gpu_seconds: int | float) -> int:
    """mcr for ``gpu_seconds`` at ``rate`` mcr per GPU-hour, rounded up to the next milli-credit."""
    if rate <= 0 or gpu_seconds <= 0:
        return 0
    return math.ceil(rate * int(math.ceil(gpu_seconds)) / SECONDS_PER_HOUR)


def cpu_rate(millicores: int, mib: int, *, per_core_hour: int, per_gib_hour: int) -> int:
    """mcr per hour of CPU work of ``millicores`` and ``mib`` at a CPU pool's prices per core-hour and per
    GiB-hour, rounded up to the next milli-credit (CPU work is charged per hour it holds them, as GPUs are)."""
    if millicores <= 0 and mib <= 0:
        return 0
    return math.ceil(max(0, millicores) * per_core_hour / 1000 + max(0, mib) * per_gib_hour / 1024)


def surcharged(base: int, pct: int) -> int:
    """A base price per GPU-hour with a surcharge of ``pct`` percent (a non-preemptible job's), rounded up to the
    next milli-credit."""
    return base if pct <= 0 else -(-base * (100 + pct) // 100)


def worst_case_rate(base: int, bid: int | None) -> int:
    """The highest rate an admission can cost: the base price, or the bid when that is higher (winners of
    contested borrowing pay the clearing price, which never exceeds their own bid)."""
    return max(base, bid or 0)


def admission_rate(base: int, *, borrowed: bool, price: int | None) -> tuple[int, str]:
    """(rate, basis) an admitted attempt is held and charged at: the base price (the reserve), or the job's
    critical bid ``price`` (the engine sets it for every winner whose bid decided, inside its quota or on
    borrowed capacity) when that is higher: ``clearing`` on borrowed capacity, ``bid`` inside the quota."""
    if price is not None and int(price) > base:
        return int(price), "clearing" if borrowed else "bid"
    return base, "base"


def hold_of(rate: int, *, total_gpus: int | float, max_runtime_s: int | float) -> int:
    """What an attempt holds: its rate for all its GPUs for its whole max runtime."""
    return cost_of(rate, total_gpus * max_runtime_s)


def attempt_gpu_seconds(*, total_gpus: int | float, ran_s: float, max_runtime_s: float | None) -> int:
    """Whole GPU-seconds an attempt used: its run time (never negative, capped at its max runtime when one is
    known) rounded up to the second, times its GPUs (a fraction's share: the product rounded up again)."""
    seconds = max(0.0, ran_s)
    if max_runtime_s:
        seconds = min(seconds, float(max_runtime_s))
    used = int(math.ceil(seconds)) * total_gpus
    return used if isinstance(used, int) else int(math.ceil(used - 1e-9))


def attempt_charge(rate: int, *, gpu_seconds: int, hold: int | None = None) -> int:
    """What an ended attempt is charged: its GPU-seconds at its rate, never more than its ``hold`` (when
    given: the ledger caps the charge itself when it applies it)."""
    cost = cost_of(rate, gpu_seconds)
    return cost if hold is None else min(cost, hold)


def refund_share(outcome: str, *, decided_by_portal: bool = True, borrowed: bool = False) -> tuple[float, str]:
    """(share of the charge refunded, why) for an attempt that ended with ``outcome`` (succeeded, failed,
    cancelled, preempted, platform_failure). A preemption is refunded in full when the portal did not decide
    it (the cluster evicted the pods) or the attempt ran inside its nominal quota, and not at all on
    borrowed capacity."""
    if outcome == "platform_failure":
        return REFUND_POLICY["platform_failure"], "platform failure: refunded in full"
    if outcome != "preempted":
        return 0.0, ""
    if not decided_by_portal:
        return REFUND_POLICY["evicted_by_cluster"], "evicted by the cluster, not by the portal: refunded in full"
    if borrowed:
        return REFUND_POLICY["preempted_borrowed"], "preempted on borrowed capacity: charged up to the eviction"
    return REFUND_POLICY["preempted_nominal"], "preempted inside the nominal quota: refunded in full"


def refund_of(charge: int, share: float) -> int:
    """The refund of ``share`` of ``charge`` (rounded down: never more than was charged)."""
    if charge <= 0 or share <= 0:
        return 0
    return math.floor(charge * share)


def price_order_conflict(tier: str, rate: int, others: Mapping[str, int]) -> tuple[str, int] | None:
    """Whether ``rate`` for ``tier`` breaks the tiers' price order against the flavor's ``others`` prices
    (tier -> rate): a premium tier (realtime) must be dearer than every other tier, and every other tier
    cheaper than a premium one. None when it keeps the order, else ("above", the price it must exceed) or
    ("below", the premium price it must stay under)."""
    if tiers.is_premium(tier):
        if others and any(rate <= v for v in others.values()):
            return "above", max(others.values())
        return None
    for t, v in sorted(others.items(), key=lambda tv: (tiers.rank(tv[0]), tv[0])):
        if tiers.is_premium(t) and rate >= v:
            return "below", v
    return None


# ------------------------------------------------------------------ a resizable attempt's lots


@dataclass(frozen=True, slots=True)
class Lot:
    """GPUs of one attempt held on the same terms from the same moment: the admitted ones (borrowed or inside the
    quota as the admission was, at the admission's rate) or one grow's (always borrowed, at its cycle's clearing
    price), with the GPU-seconds and the cost they ran up. ``since``: when the lot was added, on the caller's clock
    (seconds)."""

    gpus: int
    rate: int
    borrowed: bool
    since: float
    gpu_seconds: int = 0
    cost: int = 0


def resized_lots(lots: Sequence[Sequence[int]], *, gpus: int, rate: int) -> list[list[int]]:
    """The lots ``[GPUs, rate, borrowed (1 or 0)]`` an attempt holds once resized to ``gpus`` GPUs: a grow appends
    one lot of the added GPUs, borrowed capacity at ``rate`` (the grow's clearing price, at least the base price); a
    shrink takes the newest lots off first (the pods a shrink removes are the last ranks, the ones added last)."""
    out = [[int(n), int(r), int(b)] for n, r, b in lots]
    have = sum(lot[0] for lot in out)
    if gpus > have:
        out.append([gpus - have, int(rate), 1])
        return out
    cut = have - gpus
    while cut > 0 and out:
        n = out[-1][0]
        if n <= cut:
            out.pop()
            cut -= n
        else:
            out[-1][0] = n - cut
            cut = 0
    return out


def lot_usage(sizes: Sequence[tuple[float, Sequence[Sequence[int]]]], *, start: float, end: float,
              max_runtime_s: float | None, speedup: float = 1.0) -> tuple[int, int, list[Lot]]:
    """(GPU-seconds, cost, lots) of a resizable attempt admitted at ``start`` and ended at ``end``: ``sizes`` are
    its sizes as (from when, lots), oldest first, the first the admission's. Each size counts from its resize to
    the next (or the end), all of them together capped at the max runtime from admission, each lot of GPUs at its
    own rate. A lot stays the same from one size to the next while it keeps its place on the same terms with no
    more GPUs (a shrink only takes GPUs off); a grow always adds a new one. ``speedup``: seconds of the job's time
    per second of the clock (the lots are charged the job's time). The lots come back in the order they stopped
    being held, the ones held to the end last."""
    limit = start + (float(max_runtime_s) / speedup if max_runtime_s else float("inf"))
    stop = min(end, limit)
    gpu_seconds = cost = 0
    done: list[Lot] = []  # lots no longer held
    live: list[Lot] = []  # the lots of the size before, with what they ran up so far
    for k, (at, lots) in enumerate(sizes):
        now = []
        for i, (gpus, rate, borrowed) in enumerate(lots):
            same = i < len(live) and gpus <= live[i].gpus and (rate, bool(borrowed)) == (live[i].rate,
                                                                                             live[i].borrowed)
            old = live[i] if same else None
            now.append(Lot(int(gpus), int(rate), bool(borrowed), old.since if old else at,
                           old.gpu_seconds if old else 0, old.cost if old else 0))
        done.extend(lot for i, lot in enumerate(live) if i >= len(now) or now[i].since != lot.since)
        live = now
        a = max(start, at)
        b = min(stop, sizes[k + 1][0] if k + 1 < len(sizes) else stop)
        if b <= a:
            continue
        ran_s = (b - a) * speedup
        for i, lot in enumerate(live):
            used = attempt_gpu_seconds(total_gpus=lot.gpus, ran_s=ran_s, max_runtime_s=None)
            charge = attempt_charge(lot.rate, gpu_seconds=used)
            gpu_seconds += used
            cost += charge
            live[i] = Lot(lot.gpus, lot.rate, lot.borrowed, lot.since, lot.gpu_seconds + used, lot.cost + charge)
    return gpu_seconds, cost, done + live


def lot_settlement(lots: Sequence[Lot], *, outcome: str, decided_by_portal: bool, charged: int
                   ) -> list[tuple[int, int, str]]:
    """(charge, refund, why) of each lot of an ended attempt that was charged ``charged`` in all: each lot pays its
    cost, or its share of ``charged`` when the charge was capped at the hold, and is refunded on its own terms
    (``refund_share``: a preemption by the portal gives back a lot inside the quota in full and a borrowed one not
    at all; a platform failure or an eviction the portal did not decide gives back every lot)."""
    cost = sum(lot.cost for lot in lots)
    out = []
    for lot in lots:
        share, why = refund_share(outcome, decided_by_portal=decided_by_portal or outcome != "preempted",
                                  borrowed=lot.borrowed)
        charge = lot.cost if charged >= cost or cost <= 0 else lot.cost * charged // cost
        out.append((charge, refund_of(charge, share), why))
    return out
