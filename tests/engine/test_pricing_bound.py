"""The bound that spares a price's replay (``pricing.surely_wins``) is sound: whenever it says a winner would
still be admitted after the jobs its lower bid lets ahead, the replay admits it too."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.engine import DEPTS, make_snapshot
from engine import pricing
from engine.cycle import Cycle
from engine.types import UserLimit
from tests.engine.core_builders import Snap, job, run
from tests.engine.test_properties import snapshots
from tests.engine.test_truthful_pricing import contested


@pytest.fixture
def checked(monkeypatch):
    """Every answer of the bound, each True one held to a replay from the same state: (answers, replayed)."""
    bound = pricing.surely_wins
    answers: list[bool] = []

    def surely_wins(before, job, start, stop):
        sure = bound(before, job, start, stop)
        answers.append(sure)
        if sure:
            replay = pricing.fork(before, job.id)
            for other in before.order[start:stop]:
                replay.consider(other)
            replay.consider(job)
            assert job.id in replay.admissions, (job.id, [other.id for other in before.order[start:stop]])
        return sure

    monkeypatch.setattr(pricing, "surely_wins", surely_wins)
    return answers


def test_the_bound_spares_replays_on_a_busy_cluster_and_is_right_each_time(checked):
    # 1,000 pending jobs on 300 half-busy nodes: some winners are priced late in the cycle, when the GPUs run
    # short and only a replay can tell.
    snap = make_snapshot(1000, 300)
    fast = Cycle(snap).run()
    assert any(checked) and not all(checked)  # it both spares replays and leaves some to them
    assert fast == Cycle(snap, fork_prices=False).run()


@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much,
                                                                  HealthCheck.function_scoped_fixture])
@given(contested(), st.booleans())
def test_the_bound_never_admits_a_job_the_replay_leaves_waiting(checked, snap, memo):
    Cycle(snap, memo=memo).run()


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(snapshots(federated=True), st.data())
def test_the_bound_never_admits_a_job_the_replay_leaves_waiting_across_clusters(checked, snap, data):
    snap = replace(snap, pending=tuple(replace(j, bid=data.draw(st.integers(0, 5_000))) for j in snap.pending))
    Cycle(snap).run()


@pytest.mark.parametrize("seed", range(6))
def test_the_bound_is_right_on_benchmark_snapshots(checked, seed):
    snap = make_snapshot(400, 60 + 40 * seed, seed=seed)
    assert Cycle(snap).run() == Cycle(snap, fork_prices=False).run()


@st.composite
def busy(draw):
    """Benchmark snapshots of a few hundred jobs, varied where the bound reads the cycle: tight credits, members
    with GPU limits, the realtime headroom, the reservation depth, arrays with a throttle."""
    snap = make_snapshot(draw(st.integers(100, 500)), draw(st.integers(10, 150)), seed=draw(st.integers(0, 10**6)))
    policy = replace(snap.policy, reservation_depth=draw(st.sampled_from((0, 1, 4, 16))),
                     realtime_headroom_gpus=draw(st.sampled_from((0, 1, 8, 40))))
    users = draw(st.sampled_from(("", "ab", "abc")))
    pending = []
    for j in snap.pending:
        changes = {"hold": j.hold * draw(st.integers(0, 3)), "user": users[j.id % len(users)] if users else ""}
        if j.id % 7 == 0 and draw(st.booleans()):
            changes.update(array_id=1 + j.id % 3, array_throttle=draw(st.integers(1, 4)))
        pending.append(replace(j, **changes))
    limits = tuple(UserLimit(d, u, draw(st.integers(4, 200))) for d in DEPTS[:3] for u in users)
    credits = {d: draw(st.integers(0, 200_000)) for d in DEPTS} if draw(st.booleans()) else snap.credits
    return replace(snap, policy=policy, pending=tuple(pending), user_limits=limits, credits=credits)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                 HealthCheck.function_scoped_fixture])
@given(busy())
def test_the_bound_never_admits_a_job_the_replay_leaves_waiting_on_busy_clusters(checked, snap):
    assert Cycle(snap).run() == Cycle(snap, fork_prices=False).run()


def test_a_fraction_that_fits_only_on_a_shared_gpu_still_counts_against_a_winners_quota():
    # A's nominal GPU, no borrowing. The whole-GPU job 3 bids and goes first: it takes the GPU on "east", and A's
    # quarter (no bid) then waits on A's quota. Had job 3 bid nothing, the quarter would have gone first (the
    # tie goes to the smaller id) onto the GPU that B's running quarter shares on "west" (no whole GPU free
    # there), and job 3 would have waited on the quota: its bid decided, so it pays for it. A bound that counted
    # the quarter as unable to start (no whole GPU free for it) priced job 3 at the base price.
    from engine.fractions import HAMI, Share

    quarter = Share(HAMI, 40 * 1024, memory_mib=10 * 1024)
    snap = (Snap().node("e0", gpus=1, cluster="east").node("w0", gpus=1, cluster="west")
            .quota("A", 1, borrow=0).quota("B", 1).policy(realtime_headroom_gpus=0, reservation_depth=0)
            .running(run(1, dept="B", on="w0", cluster="west", share=quarter, devices=(0,)))
            .pending(job(2, share=quarter, cluster_selector=(("region", "west"),)), job(3, bid=5000))
            .cluster("east", region="east").cluster("west", region="west").build())
    replayed = Cycle(snap, fork_prices=False).run()
    admitted = {a.job_id: a for a in replayed.admissions}
    assert 3 in admitted and 2 not in admitted and admitted[3].price  # (the replays' price: its bid decided)
    assert Cycle(snap).run() == replayed
