"""Property tests of the placement pool: the indexes it keeps up to date as jobs are placed and heads reserve
must answer exactly as indexes built afresh from the same free GPUs would."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine.placement import BucketIndex, Pool
from engine.types import Node

NOW = 1_000.0
SETTINGS = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])

# One step of a cycle: place pods (g, pods, runtime) or reserve for a head (g, pods).
steps = st.lists(
    st.one_of(
        st.tuples(st.just("place"), st.sampled_from([1, 2, 4, 8]), st.integers(1, 3), st.integers(1, 50)),
        st.tuples(st.just("reserve"), st.sampled_from([1, 2, 4, 8]), st.integers(1, 3), st.just(0)),
        st.tuples(st.just("fork"), st.just(0), st.just(0), st.just(0)),
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
    # running pods ending at various times, some at the cycle's start (past their end: due now)
    for i in range(len(nodes)):
        for _ in range(draw(st.integers(0, 3))):
            g = draw(st.integers(1, 2))
            pool.free[i] -= g
            pool.events.append((NOW + draw(st.integers(0, 40)) * 60.0, i, g))
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


def reference_earliest_fit(pool: Pool, g: int, pods: int):
    """What ``earliest_fit`` must answer, node by node from the pool's free GPUs and pod ends: nothing released
    when the pods fit now, else every pod ending by the first instant at which they fit; then best fit (fewest
    GPUs left that still fit, the lowest index) pod by pod, with what each chosen node has left after all."""

    def usable(i: int, v: int) -> int:
        spare = pool.spare.get(i)
        return max(0, v if spare is None else min(v, spare))

    instants = [None] + sorted({end for end, _, _ in pool.events})
    for t in instants:
        free = list(pool.free)
        for end, i, gpus in pool.events:
            if t is not None and end <= t:
                free[i] += gpus
        value = {i: usable(i, free[i]) for i in pool.indexed}
        if sum(v // g for v in value.values()) >= pods:
            break
    else:
        return None
    chosen = []
    for _ in range(pods):
        i = min((i for i, v in value.items() if v >= g), key=lambda i: (value[i], i))
        chosen.append(i)
        value[i] -= g
    return (NOW if t is None else max(NOW, t)), [(i, value[i]) for i in chosen]


@SETTINGS
@given(pool=pools(), ops=steps)
def test_kept_indexes_answer_as_fresh_ones(pool, ops):
    for op, g, pods, minutes in ops:
        if op == "fork":
            pool = pool.fork()
        elif op == "place":
            placed = pool.place(g, pods, NOW + minutes * 60.0)
            for i in placed or ():
                pool.events.append((NOW + minutes * 60.0, i, g))
        else:
            kept = pool.earliest_fit(g, pods, NOW)
            assert kept == fresh_earliest_fit(pool, g, pods)
            assert kept == reference_earliest_fit(pool, g, pods)
            if kept is not None and kept[0] > NOW:
                pool.reserve(len(pool.reservations) + 1, kept[0], kept[1], g * pods)
        if pool.long is not None:
            fresh = BucketIndex([pool.eff(i) for i in range(len(pool.free))], pool.indexed, pool.top)
            assert fresh.free_total() == pool.long.free_total()
            for gg in range(1, pool.top + 1):
                assert fresh.capacity(gg) == pool.long.capacity(gg)
                assert fresh.best(gg) == pool.long.best(gg)
