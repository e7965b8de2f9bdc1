"""The shortcuts that keep jobs of any shape cheap in the cycle change no decision: CPU-only verdicts remembered
until a CPU admission, the CPU roles of a GPU job counted rather than placed and given back, and no critical bid
sought for a CPU-only winner (its price is per GPU-hour, of which it has none)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from test_shapes import cpu_job, cpu_node, cpu_role, snap

from benchmarks.engine import make_snapshot
from benchmarks.shapes import shaped
from engine import schedule
from engine.cycle import Cycle
from engine.shapes import CpuPool
from engine.types import Node, Role


@pytest.mark.parametrize("pending,nodes,seed", [(200, 30, 1), (400, 60, 2), (600, 40, 3)])
def test_shaped_queues_decide_alike_with_and_without_the_remembered_verdicts(pending, nodes, seed):
    mixed = shaped(make_snapshot(pending, nodes, seed=seed), seed=seed)
    assert any(j.roles and j.pods == 0 for j in mixed.pending) and any(len(j.roles) > 1 for j in mixed.pending)
    assert Cycle(mixed).run() == Cycle(mixed, memo=False).run()


@pytest.mark.parametrize("seed", [4, 5])
def test_shaped_queues_price_alike_from_forks_and_from_full_replays(seed):
    mixed = shaped(make_snapshot(250, 60, seed=seed), seed=seed)
    fast = Cycle(mixed).run()
    assert fast == Cycle(mixed, fork_prices=False).run()
    assert any(a.price for a in fast.admissions)  # (GPU winners are still priced)


def test_a_cpu_only_winner_pays_no_critical_bid_whatever_it_bid():
    # Two CPU-only jobs for one node's room: the bidder goes first and wins, but a price per GPU-hour of a job
    # without GPUs is never charged, so none is set (and no replay is made to find it).
    nodes = [cpu_node("c0", cores=4)]
    bidder = cpu_job(2, cpu_role(cores=4, gib=8), bid=900)
    other = cpu_job(1, cpu_role(cores=4, gib=8))
    (adm,) = schedule(snap(nodes, [other, bidder])).admissions
    assert (adm.job_id, adm.price) == (2, None)


sizes = st.sampled_from([0, 500, 1000, 3000, 8000])
mems = st.sampled_from([0, 512, 2048, 8192])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 32_000), st.integers(0, 64 * 1024)), min_size=1, max_size=8),
       st.lists(st.tuples(sizes, mems), max_size=10), sizes, mems, st.integers(1, 12))
def test_counting_a_roles_slots_agrees_with_placing_its_pods(nodes, running, cpu, mem, pods):
    pool = CpuPool("default", "cpu", [Node(f"c{i}", "cpu", 0, kind="cpu", cpu_m=c, memory_mib=m)
                                      for i, (c, m) in enumerate(nodes)])
    for k, (c, m) in enumerate(running):  # pods already there, some past what the node has
        pool.hold(f"c{k % len(nodes)}", c, m)
    role = Role("data", pods, 0, cpu, mem, "cpu")
    before = (list(pool.cpu), list(pool.mem), list(pool.order), pool.free())
    counted = pool.fits_role(role)
    assert (list(pool.cpu), list(pool.mem), list(pool.order), pool.free()) == before  # nothing taken
    assert counted == (pool.place_role(role) is not None)
