"""The price of borrowed capacity in one cycle (pure): each winner pays its critical bid.

A job's bid only moves it within its tier's order (``bid_weight`` points per milli-credit of score); whether
that wins it the GPUs is decided by the same cycle the engine runs. A winner on borrowed capacity pays the
lowest bid at which it would still have been admitted, everything else in the snapshot unchanged (its
*critical bid*, the payment rule of Myerson's lemma): 0 when tier, urgency, fair share, waiting time or a
starving guard admitted it whatever it bid (the adapter then charges the base price, the reserve), otherwise
the bid of the first job it would have fallen behind, converted through the score. With an allocation that
only improves with a higher bid, the critical bid makes bidding one's true value a dominant strategy: one's
price does not depend on one's own bid, and any bid that changes the outcome trades a win worth at least its
price for nothing, or a loss for a win that costs more than it is worth (docs/budgets.md, "How the price of
borrowed capacity is set"). A job that could never have fitted never displaces anyone, so it sets no price.
"""

from __future__ import annotations

from collections.abc import Callable


def critical_bid(bid: int, wins: Callable[[int], bool]) -> int:
    """The lowest integer bid in ``[0, bid]`` at which ``wins`` (the job would be admitted this cycle with that
    bid, all else equal) holds, given that it holds at ``bid``; 0 when the job would win without bidding.
    Found by bisection (the allocation is monotone in the bid: a higher bid only moves a job earlier in its
    tier), so at most about log2(bid) + 1 replays of the cycle."""
    if bid <= 0 or wins(0):
        return 0
    lo, hi = 0, bid  # loses at lo, wins at hi
    while hi - lo > 1:
        mid = (lo + hi) // 2
        if wins(mid):
            hi = mid
        else:
            lo = mid
    return hi
