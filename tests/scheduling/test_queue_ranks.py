"""The ranks that keep the engine's order on the queued jobs (``scheduling.services.queue_ranks``): after a
cycle they increase along its order, and only ranks out of order are rewritten."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduling.services.queue_ranks import BOUND, GAP, reranked


def _apply(order, current):
    changed = reranked(order, current)
    return changed, {**current, **changed}


def test_a_first_cycle_numbers_the_queue_gap_apart():
    assert reranked([7, 3, 5], {}) == {7: GAP, 3: 2 * GAP, 5: 3 * GAP}


def test_admitting_the_head_or_ageing_without_reordering_writes_nothing():
    current = {7: GAP, 3: 2 * GAP, 5: 3 * GAP}
    assert reranked([3, 5], current) == {}
    assert reranked([7, 3, 5], current) == {}


def test_a_new_job_or_one_that_overtakes_is_the_only_write():
    current = {7: GAP, 3: 2 * GAP, 5: 3 * GAP}
    assert reranked([7, 9, 3, 5], current) == {9: GAP + GAP // 2}
    assert reranked([5, 7, 3], current) == {5: 0}  # before the first kept one
    assert reranked([7, 3, 5, 9], current) == {9: 4 * GAP}


def test_no_room_between_neighbours_spreads_the_ranks_around_them_only():
    assert reranked([1, 3, 2], {1: 10, 2: 11}) == {3: 10 + GAP, 2: 10 + 2 * GAP}
    current = {j: j * GAP for j in range(1, 8)}
    current[9] = 4 * GAP + 1  # right after 4: no room for a job between them
    assert reranked([1, 2, 3, 4, 8, 9, 5, 6, 7], current) == {8: 4 * GAP + GAP // 3, 9: 4 * GAP + 2 * GAP // 3}
    # only when the whole queue has no room is everything numbered again
    assert reranked([1, 2], {1: BOUND - 1}) == {1: GAP, 2: 2 * GAP}


def test_a_job_that_keeps_moving_between_the_same_neighbours_rewrites_a_few_ranks_each_time():
    """A department's job overtaking its neighbour and falling back, cycle after cycle, in a long queue:
    the room between them halves each time, and running out of it must not rewrite the whole queue."""
    order = list(range(1000))
    current = reranked(order, {})
    most = 0
    for cycle in range(200):
        order[500], order[501] = order[501], order[500]
        changed = reranked(order, current)
        current.update(changed)
        most = max(most, len(changed))
        ranks = [current[j] for j in order]
        assert all(a < b for a, b in zip(ranks, ranks[1:], strict=False)), cycle
    assert most <= 8


@settings(max_examples=300, deadline=None)
@given(st.lists(st.integers(1, 40), unique=True, max_size=30), st.data())
def test_after_any_cycle_the_ranks_increase_along_its_order(order, data):
    current = {j: data.draw(st.one_of(st.none(), st.integers(-5 * GAP, 5 * GAP))) for j in
               data.draw(st.lists(st.integers(1, 40), unique=True, max_size=40))}
    changed, after = _apply(order, current)
    ranks = [after[j] for j in order]
    assert all(a < b for a, b in zip(ranks, ranks[1:], strict=False))
    assert set(changed) <= set(order)
    # the same order again changes nothing
    assert reranked(order, after) == {}
    # jobs already in order keep their ranks: only the new ones are written when there is room for them
    kept = [current.get(j) for j in order]
    known = [r for r in kept if r is not None]
    if known == sorted(set(known)) and len(known) == len(kept):
        assert changed == {}
