"""The shortcuts that keep jobs of any shape cheap in the cycle change no decision: CPU-only verdicts remembered
until a CPU admission, the CPU roles of a GPU job counted rather than placed and given back, no critical bid
sought for a CPU-only winner (its price is per GPU-hour, of which it has none), and no victim search tries
what cannot find a smaller set than the one it has."""

from __future__ import annotations

from dataclasses import replace
from unittest import mock

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_properties import snapshots
from test_shapes import cpu_job, cpu_node, cpu_role, snap

from benchmarks.engine import NOW, make_snapshot
from benchmarks.shapes import shaped
from engine import preemption, schedule
from engine.cycle import Cycle
from engine.policy import DEFAULT_POLICY
from engine.shapes import CpuPool
from engine.types import Node, Quota, Role, RunningJob, Snapshot


@pytest.mark.parametrize("pending,nodes,seed", [(200, 30, 1), (400, 60, 2), (600, 40, 3)])
def test_shaped_queues_decide_alike_with_and_without_the_remembered_verdicts(pending, nodes, seed):
    mixed = shaped(make_snapshot(pending, nodes, seed=seed), seed=seed)
    assert any(j.roles and j.pods == 0 for j in mixed.pending) and any(len(j.roles) > 1 for j in mixed.pending)
    assert Cycle(mixed).run() == Cycle(mixed, memo=False).run()


@pytest.mark.parametrize("pending,nodes,seed", [(300, 30, 1), (600, 40, 3)])
def test_cpu_only_verdicts_taken_across_departments_decide_alike_under_tight_cpu_quotas(pending, nodes, seed):
    # A CPU-only job takes the room verdict of a job of another department, its own quotas checked afresh: with
    # half the departments held to a few cores (no borrowing) and two CPU nodes, their jobs wait on quota
    # between the others' that wait for room.
    mixed = shaped(make_snapshot(pending, nodes, seed=seed), seed=seed)
    tight = tuple(replace(q, nominal=4000 * (i % 3), borrowing_limit=0) if q.flavor.endswith("#cpu") and i % 2
                  else q for i, q in enumerate(mixed.quotas))
    cpu_nodes = [n for n in mixed.nodes if n.kind == "cpu"]
    mixed = replace(mixed, quotas=tight, nodes=tuple(n for n in mixed.nodes if n not in cpu_nodes[2:]))
    fast = Cycle(mixed).run()
    codes = {p.code for p in fast.pending}
    assert {"quota_exhausted", "no_capacity"} <= codes  # (both kinds of wait, among CPU-only jobs too)
    assert fast == Cycle(mixed, memo=False).run()


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


def _searches(cycle: Cycle) -> list:
    """Every victim search the cycle's pools allow for gangs of 1-4 pods of 1-8 GPUs, any candidate eligible
    (the budgets the cycle has left): what each finds."""
    out = []
    for (cluster, flavor), cands in sorted(cycle.evictions.cands.items()):
        pool = cycle.pools[(cluster, flavor)]
        for g in (1, 2, 4, 8):
            for pods in (1, 2, 3, 4):
                found = preemption.search(cands, pool=pool, g=g, pods=pods, quota=cycle.quota, dept="A",
                                          flavor=flavor, k=g * pods * 1000, eligible=lambda v, removed: True,
                                          budget_left=cycle.evictions.budget_left)
                out.append(None if found is None else [c.job.id for c in found])
    return out


def _without_the_bound():
    """The search as it was: the single-victim walk and the seeds always tried."""
    return mock.patch.object(preemption, "_fewest", lambda *args: 0)


@st.composite
def packed_pools(draw):
    """One pool of 8-GPU nodes packed with running jobs of 1-8 GPUs per pod (a few of two pods, on two nodes),
    of any department and at-risk work: candidates whose first few free a node between them while a later one
    frees one alone, for the single-victim walk and the seeds to find a smaller set than the first one."""
    nodes = [Node(f"n{i}", "a100", 8) for i in range(draw(st.integers(1, 5)))]
    used = {n.name: 0 for n in nodes}
    running = []
    for i in range(draw(st.integers(1, 24))):
        g = draw(st.sampled_from([1, 1, 2, 2, 4, 8]))
        on = [draw(st.sampled_from(nodes)).name for _ in range(draw(st.sampled_from([1, 1, 1, 2])))]
        if any(used[n] + g * on.count(n) > 8 for n in on):
            continue
        for n in on:
            used[n] += g
        running.append(RunningJob(id=100 + i, department=draw(st.sampled_from("ABC")), flavor="a100", tier="elastic",
                                  placement=tuple(on), gpus_per_pod=g, started_at=NOW - draw(st.integers(0, 9)) * 600,
                                  borrowed=draw(st.booleans())))
    nodes = [replace(n, used_by_others=draw(st.integers(0, 8 - used[n.name]))) for n in nodes]
    quotas = tuple(Quota(d, "a100", 64, None, None) for d in "ABC")
    return Snapshot(now=NOW, nodes=tuple(nodes), running=tuple(running), pending=(), quotas=quotas,
                    policy=DEFAULT_POLICY)


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.one_of(packed_pools(), snapshots()))
def test_a_victim_search_finds_the_same_set_without_the_tries_that_cannot_find_a_smaller_one(snapshot):
    bounded = _searches(Cycle(snapshot))
    with _without_the_bound():
        assert _searches(Cycle(snapshot)) == bounded


@pytest.mark.parametrize("pending,nodes,seed,mix", [(1000, 100, 7, "gpu"), (1000, 100, 7, "shapes"),
                                                    (3000, 300, 3, "shapes"), (10000, 1000, 11, "shapes")])
def test_the_realtime_gangs_preempt_and_wait_alike_with_the_bound(pending, nodes, seed, mix):
    # Realtime gangs of whole nodes on half-busy nodes need a victim per node: the bound is reached, and the
    # cycle decides and explains everything as the search without it (the victims each rate-stopped gang needs
    # too).
    snapshot = make_snapshot(pending, nodes, seed=seed)
    if mix == "shapes":
        snapshot = shaped(snapshot, seed=seed)
    reached = []
    real = preemption._fewest
    with mock.patch.object(preemption, "_fewest", lambda *args: reached.append(real(*args)) or reached[-1]):
        bounded = Cycle(snapshot).run()
    assert max(reached) >= 2
    with _without_the_bound():
        assert Cycle(snapshot).run() == bounded
