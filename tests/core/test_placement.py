"""Property tests of the placement pool: the indexes it keeps up to date as jobs are placed and heads reserve
must answer exactly as indexes built afresh from the same free GPUs would."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from scheduling.core.placement import BucketIndex, Pool
from scheduling.core.types import Node

NOW = 1_000.0
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# One step of a cycle: place pods (g, pods, runtime) or reserve for a head (g, pods).
steps = st.lists(
    st.one_of(
        st.tuples(st.just("place"), st.sampled_from([1, 2, 4, 8]), st.integers(1, 3), st.integers(1, 50)),
        st.tuples(st.just("reserve"), st.sampled_from([1, 2, 4, 8]), st.integers(1, 3), st.just(0)),
    ),
    max_size=25,
)


@st.composite
def pools(draw) -> Pool:
    nodes = [
        Node(
            name=f"n{i:02d}",
            flavor="a100",
            gpus=draw(st.sampled_from([2, 4, 8])),
            used_by_others=draw(st.integers(0, 1)),
            taints=("maint",) if draw(st.integers(0, 7)) == 0 else (),
        )
        for i in range(draw(st.integers(1, 8)))
    ]
    pool = Pool("default", "a100", nodes)
    # running pods ending at various times
    for i in range(len(nodes)):
        for _ in range(draw(st.integers(0, 2))):
            g = draw(st.integers(1, 2))
            pool.free[i] -= g
            pool.events.append((NOW + draw(st.integers(1, 40)) * 60.0, i, g))
    pool.build()
    return pool


def fresh_earliest_fit(pool: Pool, g: int, pods: int):
    """``earliest_fit`` on all of the pool's events sorted afresh instead of the order it keeps."""
    kept = pool._events_sorted
    pool._events_sorted = sorted(pool.events)
    try:
        return pool.earliest_fit(g, pods, NOW)
    finally:
        pool._events_sorted = kept


@SETTINGS
@given(pool=pools(), ops=steps)
def test_kept_indexes_answer_as_fresh_ones(pool, ops):
    for op, g, pods, minutes in ops:
        if op == "place":
            placed = pool.place(g, pods, NOW + minutes * 60.0)
            for i in placed or ():
                pool.events.append((NOW + minutes * 60.0, i, g))
        else:
            kept = pool.earliest_fit(g, pods, NOW)
            assert kept == fresh_earliest_fit(pool, g, pods)
            if kept is not None and kept[0] > NOW:
                pool.reserve(len(pool.reservations) + 1, kept[0], kept[1], g * pods)
        if pool.long is not None:
            fresh = BucketIndex([pool.eff(i) for i in range(len(pool.free))], pool.indexed, pool.top)
            assert fresh.free_total() == pool.long.free_total()
            for gg in range(1, pool.top + 1):
                assert fresh.capacity(gg) == pool.long.capacity(gg)
                assert fresh.best(gg) == pool.long.best(gg)
