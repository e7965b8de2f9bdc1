"""Topology-aware placement (``engine.domains``): gangs in the smallest domain, required levels never spread,
preferred ones spread only when no domain fits and say so, single pods in used domains, and reasons,
reservations and estimates that know the domains."""

from __future__ import annotations

from dataclasses import replace

from core_builders import BLOCK, HOST, LEVELS, NOW, RACK, Snap, job, run
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from engine import reasons, schedule
from engine.ordering import Scorer
from engine.types import DEFAULT_CLUSTER


def rack_of(name: str) -> str:
    return name.split("n")[0]


def test_a_gang_that_fits_one_node_goes_on_one_node():
    # r0n0 has 4 free, r0n1 8: best fit pod by pod would split 2 x 4 over both; compact puts both on r0n1.
    snap = Snap().quota("A", 256).racks(2).topology(DEFAULT_CLUSTER, *LEVELS).running(run(90, on="r0n0", gpus=4))
    r = snap.pending(job(1, gpus=4, pods=2)).decide()
    assert r.placement(1) == ("r0n1", "r0n1")
    assert r.admitted[1].spread == ""


def test_without_levels_the_same_gang_is_placed_as_before():
    r = Snap().quota("A", 256).racks(2).running(run(90, on="r0n0", gpus=4)).pending(job(1, gpus=4, pods=2)).decide()
    assert r.placement(1) == ("r0n0", "r0n1")
    assert r.admitted[1].spread == ""


def test_a_gang_goes_to_the_fullest_rack_that_holds_it_so_whole_racks_stay_free():
    # r0 is whole (32 free), r1 has one node busy (24 free): by name best fit would break r0.
    snap = Snap().quota("A", 256).racks(4, 4).topology(DEFAULT_CLUSTER, *LEVELS).running(run(90, on="r1n0", gpus=8))
    r = snap.pending(job(1, gpus=8, pods=2)).decide()
    assert {rack_of(n) for n in r.placement(1)} == {"r1"}
    plain = Snap().quota("A", 256).racks(4, 4).running(run(90, on="r1n0", gpus=8)).pending(job(1, gpus=8, pods=2)).decide()
    assert {rack_of(n) for n in plain.placement(1)} == {"r0"}


def test_a_gang_no_rack_holds_goes_into_one_block():
    snap = (Snap().quota("A", 256).racks(2, 2, block="b0", prefix="r").racks(2, 2, block="b1", prefix="s")
            .topology(DEFAULT_CLUSTER, *LEVELS).running(run(90, on="r0n0", gpus=8)))
    r = snap.pending(job(1, gpus=8, pods=4)).decide()
    # b0 has 24 free GPUs in 8-GPU nodes (too few); b1 has 32
    assert {n[0] for n in r.placement(1)} == {"s"}
    assert r.admitted[1].spread == RACK  # within one block, over its racks


def spread_snap(**kw):
    """Two racks with one free 8-GPU node each: 16 GPUs free in the pool, 8 in the largest rack."""
    return (Snap().quota("A", 256).racks(2, 2).topology(DEFAULT_CLUSTER, *LEVELS)
            .running(run(90, on="r0n0", gpus=8, max_runtime_s=7200.0), run(91, on="r1n0", gpus=8, max_runtime_s=3 * 3600.0))
            .pending(job(1, gpus=8, pods=2, **kw)))


def test_a_gang_that_requires_a_rack_waits_rather_than_spread():
    r = spread_snap(topology_level=RACK, topology_required=True).decide()
    reason = r.reason[1]
    assert reason.code == reasons.NO_FITTING_NODE
    assert "needs one rack with 16 free GPUs; the largest has 8" in reason.message
    assert reason.detail["largest_domain_free"] == 8


def test_a_required_gang_reserves_the_first_rack_that_frees_and_its_estimate_says_when():
    # r0 frees at +2h (its running job's max runtime), r1 at +3h: the gang's start is r0's
    r = spread_snap(topology_level=RACK, topology_required=True).decide()
    reason = r.reason[1]
    assert reason.detail["reserved_from"] == NOW + 3600.0  # run() started 1 h ago, 2 h max runtime
    assert reason.estimated_start == NOW + 3600.0


def test_the_estimate_of_a_required_gang_without_a_reservation_waits_for_one_rack():
    # no reservations: the estimate is the replay's, which must look for one rack (the pool fits the gang now)
    r = spread_snap(topology_level=RACK, topology_required=True).policy(reservation_depth=0).decide()
    assert "reserved_from" not in r.reason[1].detail
    assert r.reason[1].estimated_start == NOW + 3600.0


def test_a_reserved_required_gang_keeps_later_work_off_its_rack():
    # The gang reserves r0 (free at +1h); a long single job must not take r0n1, only r1n1.
    snap = spread_snap(topology_level=RACK, topology_required=True).pending(
        job(2, gpus=8, max_runtime_s=10 * 3600.0, submitted_at=NOW + 1))
    r = snap.decide()
    assert r.code(1) == reasons.NO_FITTING_NODE
    assert r.placement(2) == ("r1n1",)


def test_a_gang_that_prefers_a_rack_spreads_when_none_fits_and_says_so():
    r = spread_snap(topology_level=RACK).decide()
    assert sorted(r.placement(1)) == ["r0n1", "r1n1"]
    assert r.admitted[1].spread == RACK


def test_a_gang_with_no_topology_spreads_too_when_no_domain_fits():
    r = spread_snap().decide()
    assert r.code(1) == "admitted"
    assert r.admitted[1].spread == RACK


def test_requiring_a_level_the_cluster_lacks_is_no_matching_cluster():
    r = Snap().quota("A", 256).racks(2).pending(job(1, gpus=8, pods=2, topology_level=RACK, topology_required=True)).decide()
    assert r.code(1) == reasons.NO_MATCHING_CLUSTER
    assert "declares the rack level" in r.reason[1].message


def test_a_required_gang_larger_than_any_domain_exceeds_capacity():
    r = Snap().quota("A", 256).racks(2, 2).topology(DEFAULT_CLUSTER, *LEVELS).pending(
        job(1, gpus=8, pods=3, topology_level=RACK, topology_required=True)).decide()
    assert r.code(1) == reasons.EXCEEDS_CAPACITY
    assert "no rack ever has 24 GPUs; the largest has 16" in r.reason[1].message
    assert r.reason[1].estimated_start is None


def test_a_required_host_level_keeps_the_gang_on_one_node():
    snap = Snap().quota("A", 256).racks(2).topology(DEFAULT_CLUSTER, *LEVELS).running(run(90, on="r0n0", gpus=4),
                                                                     run(91, on="r0n1", gpus=4))
    r = snap.pending(job(1, gpus=4, pods=2, topology_level=HOST, topology_required=True)).decide()
    assert r.code(1) == reasons.NO_FITTING_NODE
    assert "needs one node with 8 free GPUs; the largest has 4" in r.reason[1].message


def test_a_single_pod_breaking_a_whole_node_takes_one_in_a_used_rack():
    # Every node is whole except r1n1: the 8-GPU pod goes to r1n0 (rack r1 already used), not r0n0 (by name).
    snap = Snap().quota("A", 256).racks(2, 2).topology(DEFAULT_CLUSTER, *LEVELS).running(run(90, on="r1n1", gpus=2))
    r = snap.pending(job(1, gpus=8)).decide()
    assert r.placement(1) == ("r1n0",)
    plain = Snap().quota("A", 256).racks(2, 2).running(run(90, on="r1n1", gpus=2)).pending(job(1, gpus=8)).decide()
    assert plain.placement(1) == ("r0n0",)


def test_a_single_pod_that_fits_a_used_node_still_takes_the_best_fit():
    snap = Snap().quota("A", 256).racks(2, 2).topology(DEFAULT_CLUSTER, *LEVELS).running(run(90, on="r0n1", gpus=2))
    r = snap.pending(job(1, gpus=4)).decide()
    assert r.placement(1) == ("r0n1",)


def test_nodes_without_the_level_label_are_in_no_domain():
    # two unlabelled nodes hold a 2 x 8 gang by GPUs, but in no rack
    snap = Snap().quota("A", 256).nodes(2, prefix="x").topology(DEFAULT_CLUSTER, *LEVELS)
    r = snap.pending(job(1, gpus=8, pods=2, topology_level=RACK, topology_required=True)).decide()
    assert r.code(1) == reasons.EXCEEDS_CAPACITY
    preferred = Snap().quota("A", 256).nodes(2, prefix="x").topology(DEFAULT_CLUSTER, *LEVELS).pending(job(1, gpus=8, pods=2)).decide()
    assert preferred.admitted[1].spread == BLOCK


# ------------------------------------------------------------ properties

racks_st = st.lists(st.integers(1, 4), min_size=1, max_size=4)
busy_st = st.lists(st.tuples(st.integers(0, 15), st.sampled_from([1, 2, 4, 8])), max_size=10)
gangs_st = st.lists(st.tuples(st.integers(2, 4), st.sampled_from([2, 4, 8]), st.booleans()), min_size=1, max_size=6)


def _random_snap(racks, busy, gangs):
    snap = Snap().quota("A", 256).racks(*racks).topology(DEFAULT_CLUSTER, *LEVELS)
    names = [n.name for n in snap._nodes]
    used: dict[str, int] = {}
    for k, (pos, g) in enumerate(busy):
        name = names[pos % len(names)]
        if used.get(name, 0) + g <= 8:
            used[name] = used.get(name, 0) + g
            snap.running(run(1000 + k, on=name, gpus=g, max_runtime_s=3600.0 * (1 + k % 3)))
    for k, (pods, g, required) in enumerate(gangs):
        snap.pending(job(k + 1, gpus=g, pods=pods, topology_level=RACK, topology_required=required,
                         submitted_at=NOW - k))
    return snap


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(racks_st, busy_st, gangs_st)
def test_a_gang_required_in_one_rack_is_never_spread(racks, busy, gangs):
    snap = _random_snap(racks, busy, gangs)
    result = snap.decide()
    required = {j.id for j in snap._pending if j.topology_required}
    for job_id, admission in result.admitted.items():
        if job_id in required:
            assert len({rack_of(n) for n in admission.placement}) == 1
            assert admission.spread in ("", HOST)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(racks_st, busy_st, gangs_st)
def test_preferring_a_level_admits_exactly_what_ignoring_it_admits(racks, busy, gangs):
    """A preference changes where a gang goes, never whether it starts in this cycle's first pass: the same
    gangs are admitted with the levels declared as without, when none requires one (single-cycle, no
    reservation in between)."""
    snap = _random_snap(racks, busy, [(p, g, False) for p, g, _ in gangs]).build()
    flat = replace(snap, clusters=())
    with_levels = {a.job_id for a in schedule(snap).admissions}
    without = {a.job_id for a in schedule(flat).admissions}
    # a preferred gang placed compactly can leave room that a spread one would not, and the reverse, so only
    # the first gang in the engine's order (the oldest here, not the lowest id) is certain to be decided alike
    first = min(snap.pending, key=Scorer(snap).order_key).id
    assert (first in with_levels) == (first in without)


def test_rack_labels_without_declared_levels_change_no_decision():
    """The engine benchmark's snapshot with its nodes labelled in racks and blocks but no cluster declaring levels
    decides exactly as the unlabelled one: labels alone are not topology."""
    from benchmarks.engine import make_snapshot
    from benchmarks.topology import racked

    flat = make_snapshot(300, 40)
    labelled = replace(racked(flat), clusters=())
    assert schedule(labelled) == schedule(flat)
    assert schedule(racked(flat)) != schedule(flat)  # (with the levels declared, gangs go elsewhere)


def _busy_racks() -> Snap:
    """Two racks of two 8-GPU nodes: B's backfill fills r0n0, r1n0 and half of r1n1; r0n1 is free."""
    return (Snap().quota("A", 32).quota("B", 32).racks(2, 2).topology(DEFAULT_CLUSTER, *LEVELS)
            .running(run(90, "B", on="r0n0", gpus=8, tier="backfill"),
                     run(91, "B", on="r1n0", gpus=8, tier="backfill"),
                     run(92, "B", on="r1n1", gpus=4, tier="backfill")))


def test_a_realtime_gang_required_in_one_rack_preempts_within_one_rack():
    r = _busy_racks().pending(job(1, gpus=8, pods=2, tier="realtime", topology_level=RACK,
                                  topology_required=True)).decide()
    assert r.code(1) == reasons.PREEMPTION_IN_PROGRESS
    assert r.victims == {90}  # r0 is then whole; r1 would need two victims


def test_victims_are_never_chosen_where_their_gpus_are_of_no_use_to_the_domain():
    # 16 GPUs required in one rack: r0 holds 16, but the only evictable work is in r1 beside a realtime job
    snap = (Snap().quota("A", 32).quota("B", 32).racks(2, 2).topology(DEFAULT_CLUSTER, *LEVELS)
            .running(run(90, "B", on="r0n0", gpus=8, tier="realtime"),
                     run(91, "B", on="r1n0", gpus=8, tier="backfill"),
                     run(92, "B", on="r1n1", gpus=8, tier="realtime"))
            .pending(job(1, gpus=8, pods=2, tier="realtime", topology_level=RACK, topology_required=True)))
    r = snap.decide()
    assert r.code(1) != "admitted" and not r.victims  # evicting 91 would leave no rack with 16 free


def test_a_head_within_its_quota_reclaims_within_its_domain():
    # A lends its nominal of 16 (and C its 8) to B, which runs on every node, r0n1 within its own nominal. A's
    # gang, required in one rack and waiting past the reclaim delay, takes back a whole rack: r1's two
    # borrowers, never r0n0's and r1n0's (16 GPUs too, but no rack whole).
    snap = (Snap().quota("A", 16).quota("B", 8, borrow=32).quota("C", 8).racks(2, 2)
            .topology(DEFAULT_CLUSTER, *LEVELS)
            .running(run(90, "B", on="r0n0", gpus=8, borrowed=True, ran=7200, max_runtime_s=86400),
                     run(91, "B", on="r0n1", gpus=8, ran=7200, max_runtime_s=86400),
                     run(92, "B", on="r1n0", gpus=8, borrowed=True, ran=7200, max_runtime_s=86400),
                     run(93, "B", on="r1n1", gpus=8, borrowed=True, ran=7200, max_runtime_s=86400))
            .pending(job(1, gpus=8, pods=2, topology_level=RACK, topology_required=True,
                         submitted_at=NOW - 3 * 3600)))
    r = snap.decide()
    assert r.code(1) == reasons.PREEMPTION_IN_PROGRESS, r.reason[1].message
    assert r.victims == {92, 93}


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(racks_st, busy_st, st.tuples(st.integers(2, 4), st.sampled_from([2, 4, 8])))
def test_a_required_realtime_gangs_victims_make_room_in_one_rack(racks, busy, gang):
    """Whatever the running backfill work, the victims a realtime gang required in one rack chooses all run in one
    rack, and once they are gone that rack holds the whole gang."""
    snap = Snap().quota("A", 256).quota("B", 256).racks(*racks).topology(DEFAULT_CLUSTER, *LEVELS)
    names = [n.name for n in snap._nodes]
    used: dict[str, int] = {}
    running = {}
    for k, (pos, g) in enumerate(busy):
        name = names[pos % len(names)]
        if used.get(name, 0) + g <= 8:
            used[name] = used.get(name, 0) + g
            running[1000 + k] = (name, g)
            snap.running(run(1000 + k, "B", on=name, gpus=g, tier="backfill", max_runtime_s=86400.0))
    pods, g = gang
    snap.pending(job(1, gpus=g, pods=pods, tier="realtime", topology_level=RACK, topology_required=True))
    r = snap.decide()
    if not r.victims:
        return
    assert len({rack_of(running[v][0]) for v in r.victims}) == 1
    rack = rack_of(running[next(iter(r.victims))][0])
    free = {n: 8 - used.get(n, 0) for n in names if rack_of(n) == rack}
    for v in r.victims:
        free[running[v][0]] += running[v][1]
    assert sum(f // g for f in free.values()) >= pods
