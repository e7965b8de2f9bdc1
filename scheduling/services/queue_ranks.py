"""The engine's pending order, kept on the queued jobs so that every page reads the same queue.

Each cycle's result lists the pending jobs in the engine's order (``core.CycleResult.pending``). A job's
``queue_rank`` stores its place in that order; only the order of the ranks means anything, so a cycle rewrites
only the ranks that are out of order: the longest run of jobs whose stored ranks already increase along the
new order keeps them, and the others get ranks between their neighbours' (a new job, one that overtook
others). A cycle that only admits the head, or ages the queue without reordering it, writes no rank at all;
when there is little room left between two neighbours, the jobs around them are spread again (``_fill``), and
only when the whole queue has none is every job numbered again, ``GAP`` apart.

A job's position in its flavor's queue is then 1 + the queued jobs of the flavor before it by
``(queue_rank, submitted_at, id)``; jobs submitted since the last cycle (no rank yet) come after those the
engine has ordered, by submission (``scheduling.selectors.QUEUE_ORDER``).
"""

from __future__ import annotations

from bisect import bisect_left
from collections.abc import Mapping, Sequence

GAP = 1 << 16
# The least room per job between two kept neighbours: below it the ranks around them are spread again.
SPACING = 1 << 10
# Far inside a 64-bit integer: ranks outside it are numbered again rather than risk the column's range.
BOUND = 1 << 60


def reranked(order: Sequence[int], current: Mapping[int, int | None]) -> dict[int, int]:
    """New ranks for the jobs of ``order`` (ids in the engine's order) whose ``current`` rank (None: none
    yet) is out of that order: after it, every rank increases strictly along ``order``. Only the changed
    ranks are returned."""
    ranks = [current.get(job_id) for job_id in order]
    if None not in ranks and all(a < b for a, b in zip(ranks, ranks[1:], strict=False)):
        return {}  # the common cycle: the head admitted, the rest aged in the same order
    kept = _longest_increasing(ranks)
    new: list[int | None] = [None] * len(order)
    for i in kept:
        new[i] = ranks[i]
    if not kept or not _fill(new, kept):
        new = [(i + 1) * GAP for i in range(len(order))]
    return {job_id: rank for job_id, rank in zip(order, new, strict=True) if rank != current.get(job_id)}


def _fill(new: list, kept: list[int]) -> bool:
    """Rank the jobs between the kept ones in place; False when even the whole queue leaves too little room.

    Where two kept neighbours leave less than ``SPACING`` per job between them, the window widens over the
    kept jobs next to it, one at a time on alternate sides, and every job in it is ranked again: a job that
    keeps moving between the same two neighbours (a department's fair share going up and down) halves the
    room there each time, and numbering the whole queue again then rewrote every waiting job's row."""
    bounds = [-1, *kept, len(new)]
    i, widen_left = 0, False
    while i < len(bounds) - 1:
        lo_i, hi_i = bounds[i], bounds[i + 1]
        count = hi_i - lo_i - 1
        if count == 0:
            i += 1
            continue
        if lo_i < 0 and hi_i >= len(new):
            return False  # nothing kept any more: number everything again
        if lo_i < 0:  # before the first kept job
            values = [new[hi_i] - GAP * (count - k) for k in range(count)]
        elif hi_i >= len(new):  # after the last kept job
            values = [new[lo_i] + GAP * (k + 1) for k in range(count)]
        else:
            lo, hi = new[lo_i], new[hi_i]
            if (hi - lo) // (count + 1) < SPACING:
                if widen_left:  # give up the lower neighbour's rank and rank its gap again too
                    del bounds[i]
                    i = max(i - 1, 0)
                else:
                    del bounds[i + 1]
                widen_left = not widen_left
                continue
            values = [lo + (hi - lo) * (k + 1) // (count + 1) for k in range(count)]
        if values[0] <= -BOUND or values[-1] >= BOUND:
            return False
        new[lo_i + 1:hi_i] = values
        i += 1
    return True


def _longest_increasing(values: Sequence[int | None]) -> list[int]:
    """Indexes of a longest strictly increasing subsequence of the values that are not None (patience sort)."""
    tails: list[int] = []
    tail_at: list[int] = []
    before = [-1] * len(values)
    for i, v in enumerate(values):
        if v is None:
            continue
        k = bisect_left(tails, v)
        if k == len(tails):
            tails.append(v)
            tail_at.append(i)
        else:
            tails[k], tail_at[k] = v, i
        before[i] = tail_at[k - 1] if k else -1
    out: list[int] = []
    i = tail_at[-1] if tail_at else -1
    while i >= 0:
        out.append(i)
        i = before[i]
    return out[::-1]
