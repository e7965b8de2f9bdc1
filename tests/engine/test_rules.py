"""Table-driven tests of the engine's rules (docs/scheduling.md, one test group per rule), written with the fluent
builders."""

from __future__ import annotations

from dataclasses import replace

import pytest
from core_builders import NOW, Snap, job, run

from engine import reasons, schedule
from engine.types import TIERS

HOUR = 3600.0


# ---------------------------------------------------------------- rule 1: tiers


@pytest.mark.parametrize(
    ("tiers", "winner"),
    [
        (("backfill", "elastic", "realtime"), 3),
        (("realtime", "elastic", "backfill"), 1),
        (("backfill", "elastic", "backfill"), 2),
    ],
)
def test_tier_order_decides_who_gets_the_last_gpus(tiers, winner):
    snap = Snap().nodes(1, gpus=4).quota("A", 8)
    for i, tier in enumerate(tiers, start=1):
        snap.pending(job(i, gpus=4, tier=tier, urgency="critical" if tier == "backfill" else "low"))
    res = snap.decide()
    assert set(res.admitted) == {winner}


# ---------------------------------------------------------------- rule 2: score within a tier


@pytest.mark.parametrize(
    ("a", "b", "winner"),
    [
        ({"urgency": "critical"}, {"urgency": "low"}, 1),
        ({"urgency": "normal", "user_tier": "standard"}, {"urgency": "normal", "user_tier": "pi"}, 2),
        # aging: a low job ages at a tenth of a normal one's pace: it overtakes a fresh normal one after 15 h
        ({"urgency": "low", "submitted_at": NOW - 16 * HOUR}, {"urgency": "normal"}, 1),
        ({"urgency": "low", "submitted_at": NOW - 14 * HOUR}, {"urgency": "normal"}, 2),
        # shorter work first: the same job asking for a tenth of the time
        ({"max_runtime_s": 10 * HOUR}, {"max_runtime_s": HOUR}, 2),
        # deadline proximity
        ({"deadline": NOW + 600}, {"deadline": None}, 1),
        # bid
        ({"bid": 0}, {"bid": 5000}, 2),
        # equal everything: the smaller id
        ({}, {}, 1),
    ],
)
def test_score_orders_jobs_within_a_tier(a, b, winner):
    snap = Snap().nodes(1, gpus=1).quota("A", 8).policy(starvation_s=0.0)  # the score alone
    res = snap.pending(job(1, **a), job(2, **b)).decide()
    assert set(res.admitted) == {winner}


def test_fair_share_favours_the_department_that_used_less():
    res = (
        Snap().nodes(1, gpus=1).quota("A", 8).quota("B", 8).usage(A=1e6, B=1e3)
        .pending(job(1, dept="A"), job(2, dept="B")).decide()
    )  # fmt: skip
    assert set(res.admitted) == {2}


def test_policy_weights_matter():
    snap = Snap().nodes(1, gpus=1).quota("A", 8).pending(job(1, urgency="low"), job(2, urgency="high"))
    assert set(snap.decide().admitted) == {2}
    snap.policy(weights={("low", "standard"): 1000.0, ("high", "standard"): 1.0})
    assert set(snap.decide().admitted) == {1}


# ---------------------------------------------------------------- rule 3: quotas, borrowing, bids, budgets


@pytest.mark.parametrize(
    ("nominal", "borrow", "other_nominal", "other_lend", "gpus", "expect", "borrowed"),
    [
        (4, None, 4, None, 4, "admitted", False),  # within nominal
        (4, None, 4, None, 6, "admitted", True),  # borrows B's idle GPUs
        (4, 1, 4, None, 6, reasons.BORROW_LIMIT, None),  # limited to nominal + 1
        (4, 0, 4, None, 5, reasons.QUOTA_EXHAUSTED, None),  # may not borrow at all
        (4, None, 4, 1, 6, reasons.QUOTA_EXHAUSTED, None),  # B lends only 1 GPU
        (4, None, 4, 2, 6, "admitted", True),  # B lends exactly 2
        (0, None, 8, None, 2, "admitted", True),  # no nominal at all, borrows
    ],
)
def test_quota_borrowing_and_lending(nominal, borrow, other_nominal, other_lend, gpus, expect, borrowed):
    res = (
        Snap().nodes(2).quota("A", nominal, borrow=borrow).quota("B", other_nominal, lend=other_lend)
        .pending(job(1, gpus=gpus)).decide()
    )  # fmt: skip
    assert res.code(1) == expect
    if borrowed is not None:
        assert res.admitted[1].borrowed is borrowed


def test_department_without_quota_row_cannot_use_the_flavor():
    res = Snap().nodes(1).quota("B", 8, lend=0).pending(job(1, dept="A")).decide()
    assert res.code(1) == reasons.QUOTA_EXHAUSTED
    assert res.reason[1].detail["never"] is True


def test_higher_bid_wins_borrowed_capacity_and_the_losing_bid_sets_the_price():
    res = (
        Snap().nodes(1, gpus=4).quota("A", 0).quota("B", 0).quota("C", 4)
        .pending(job(1, dept="A", gpus=2, bid=100), job(2, dept="B", gpus=2, bid=300), job(3, dept="A", gpus=2, bid=200))
        .decide()
    )  # fmt: skip
    assert set(res.admitted) == {2, 3}
    # each winner pays the bid it needed to pass the loser's 100 (a tie goes to the smaller id), whatever it bid
    assert res.raw.clearing_prices == {"a100": 101}
    assert all(a.borrowed and a.price == 101 for a in res.raw.admissions)
    assert res.code(1) == reasons.QUOTA_EXHAUSTED


def test_uncontested_borrowing_pays_the_base_price():
    # A sole borrower is not charged its own bid: it would have won without bidding, so no price is set and
    # the adapter charges the base (reserve) price.
    res = Snap().nodes(1, gpus=8).quota("A", 4).quota("B", 4).pending(job(1, dept="A", gpus=8, bid=5000)).decide()
    assert set(res.admitted) == {1}
    assert res.raw.clearing_prices == {} and res.raw.admissions[0].borrowed and res.raw.admissions[0].price is None


@pytest.mark.parametrize(
    ("a_kw", "winner"),
    [
        ({}, 2),  # A has no share of its own: B, within its nominal quota, goes first
        ({"urgency": "critical", "bid": 200_000}, 1),  # one order: a high enough bid outweighs fair share
        ({"submitted_at": NOW - 25 * HOUR}, 1),  # a starving borrower goes ahead of everybody in its tier
    ],
)
def test_borrowers_and_nominal_jobs_share_one_order(a_kw, winner):
    res = (
        Snap().nodes(1, gpus=4).quota("A", 0).quota("B", 4)
        .pending(job(1, dept="A", gpus=4, **a_kw), job(2, dept="B", gpus=4, submitted_at=NOW - HOUR)).decide()
    )  # fmt: skip
    assert set(res.admitted) == {winner}


def test_a_starving_job_larger_than_its_quota_is_reserved_for():
    # Department A's 8-GPU job can only run on borrowed GPUs; once it starves it is the pool's head, and the
    # small jobs of B that would run past the reservation may no longer take the GPUs it waits for.
    res = (
        Snap().nodes(1, gpus=8).quota("A", 4).quota("B", 4)
        .running(run(10, dept="B", gpus=4, ran=60, max_runtime_s=2 * HOUR))
        .pending(job(1, dept="A", gpus=8, submitted_at=NOW - 30 * HOUR), job(2, dept="B", gpus=2, max_runtime_s=5 * HOUR))
        .decide()
    )  # fmt: skip
    assert res.code(1) == reasons.QUOTA_EXHAUSTED and res.reason[1].detail["reserved_from"] == NOW - 60 + 2 * HOUR
    assert res.code(2) == reasons.RESERVED_FOR_HEAD


@pytest.mark.parametrize(
    ("queue_factor", "starves"),
    [
        (2.0, False),  # the median pending job has waited 11 h: nobody starves before 22 h
        (0.0, True),  # the fixed 12 h limit alone
    ],
)
def test_the_starvation_limit_grows_with_the_queue(queue_factor, starves):
    # On an overloaded cluster most of the queue waits longer than the fixed limit; starving all of it at once
    # would order the queue by age alone. A's 13-hour-old job only starves when it waits unusually long;
    # otherwise B's jobs, which bid for the GPUs, score higher. (A's job is larger than A's quota: the earlier
    # limit for such jobs is off here, this is about the starvation limit itself.)
    waiting = [job(i, dept="B", gpus=4, submitted_at=NOW - 11 * HOUR, bid=100_000) for i in range(2, 5)]
    res = (
        Snap().nodes(1, gpus=4).quota("A", 0).quota("B", 4)
        .policy(starvation_queue_factor=queue_factor, fair_share_weight=0.0, quota_reservation_age_s=0.0)
        .pending(job(1, dept="A", gpus=4, submitted_at=NOW - 13 * HOUR), *waiting).decide()
    )  # fmt: skip
    assert (set(res.admitted) == {1}) is starves


@pytest.mark.parametrize(
    ("band_weight", "urgency", "user_tier", "winner"),
    [
        (0.0, "high", "standard", 1),  # one band: the starving job goes first, whatever the other's urgency
        (2.0, "high", "standard", 2),  # high work (weight 2) is in the priority band, ahead of starving work
        (2.0, "normal", "pi", 1),  # a PI's normal job (weight 1.3) is not
        (4.0, "high", "pi", 1),  # a band of critical work only: high (2.6) stays behind the starving job
        (4.0, "critical", "standard", 2),
    ],
)
def test_the_priority_band_goes_ahead_of_starving_work(band_weight, urgency, user_tier, winner):
    # One 4-GPU node and two 4-GPU jobs: a normal job starving for 30 h and one of the given weight that has
    # waited 4 h, past a quarter of the 12 h starvation limit, so it has joined the band if it is in it.
    res = (
        Snap().nodes(1, gpus=4).quota("A", 4).policy(priority_band_weight=band_weight)
        .pending(job(1, dept="A", gpus=4, submitted_at=NOW - 30 * HOUR),
                 job(2, dept="A", gpus=4, urgency=urgency, user_tier=user_tier, submitted_at=NOW - 4 * HOUR))
        .decide()
    )  # fmt: skip
    assert set(res.admitted) == {winner}
    loser = 3 - winner
    assert res.reason[loser].detail.get("reserved_from") is not None  # the other is the reserved head


@pytest.mark.parametrize(
    ("waited_h", "queue_waits_h", "joins"),
    [
        (2.9, None, False),  # the limit is the fixed 12 h: a critical job joins the band after 3 h
        (3.1, None, True),
        (3.1, 10.0, False),  # the median pending job has waited 10 h: the limit is 20 h, so it joins after 5 h
        (5.1, 10.0, True),
    ],
)
def test_a_job_joins_the_priority_band_after_a_quarter_of_the_starvation_limit(waited_h, queue_waits_h, joins):
    # Until then it is ordered by its score like everyone else, so an urgent arrival does not at once take the
    # GPUs being drained for a starving head. Job 1 (normal, starving for 30 h) and job 2 (critical) want the
    # only node; jobs 3-5 (8 GPUs, never fit) set the queue's median wait when given.
    extra = [] if queue_waits_h is None else [
        job(i, dept="B", gpus=8, urgency="low", submitted_at=NOW - queue_waits_h * HOUR) for i in (3, 4, 5)]
    res = (
        Snap().nodes(1, gpus=4).quota("A", 4).quota("B", 0).policy(priority_band_weight=2.0, fair_share_weight=0.0)
        .pending(job(1, dept="A", gpus=4, submitted_at=NOW - 30 * HOUR),
                 job(2, dept="A", gpus=4, urgency="critical", submitted_at=NOW - waited_h * HOUR), *extra)
        .decide()
    )  # fmt: skip
    assert set(res.admitted) == ({2} if joins else {1})


def test_the_priority_band_keeps_the_tiers_and_the_starvation_guard_within_it():
    # Realtime work stays ahead of an elastic job in the band; inside the band a starving job goes first.
    snap = Snap().nodes(1, gpus=4).quota("A", 4).policy(priority_band_weight=2.0)
    rt = snap.pending(job(1, dept="A", gpus=4, tier="realtime", submitted_at=NOW - 60),
                      job(2, dept="A", gpus=4, urgency="critical", submitted_at=NOW - 4 * HOUR)).decide()
    assert set(rt.admitted) == {1}
    old = Snap().nodes(1, gpus=4).quota("A", 4).policy(priority_band_weight=2.0).pending(
        job(1, dept="A", gpus=4, urgency="high", submitted_at=NOW - 30 * HOUR),
        job(2, dept="A", gpus=4, urgency="critical", submitted_at=NOW - 4 * HOUR)).decide()
    assert set(old.admitted) == {1}


@pytest.mark.parametrize(
    ("credits", "holds", "admitted", "missing"),
    [
        (1000, (400, 400), {1, 2}, None),
        (1000, (600, 600), {1}, 200),  # the first hold reduces what is left in the cycle
        (100, (600, 50), {2}, 500),
        (None, (10**9, 10**9), {1, 2}, None),  # credits not enforced
    ],
)
def test_budget_holds(credits, holds, admitted, missing):
    snap = Snap().nodes(1).quota("A", 8).pending(job(1, hold=holds[0]), job(2, hold=holds[1]))
    if credits is not None:
        snap.credits(A=credits)
    res = snap.decide()
    assert set(res.admitted) == admitted
    if missing is not None:
        (blocked,) = set(res.reason)
        r = res.reason[blocked]
        assert r.code == reasons.BUDGET_INSUFFICIENT
        assert r.detail["missing"] == missing and str(missing) in r.message
        assert r.estimated_start is None


# ---------------------------------------------------------------- rule 4: reclaim


@pytest.mark.parametrize(
    ("preemptor", "borrower", "borrower_kw", "waited", "reclaims"),
    [
        ("elastic", "elastic", {}, HOUR, True),
        ("elastic", "backfill", {}, HOUR, True),
        ("backfill", "backfill", {}, HOUR, True),
        ("backfill", "elastic", {}, HOUR, False),  # dev/test work never evicts training
        ("elastic", "elastic", {}, 600, False),  # not before the job waited reclaim_delay_s
        ("elastic", "elastic", {"max_runtime_s": 2 * HOUR + 600}, HOUR, False),  # the borrower ends soon
        ("elastic", "elastic", {"submitted_at": NOW - 40 * HOUR}, HOUR, False),  # it starved before it ran
    ],
)
def test_department_below_nominal_reclaims_boundedly(preemptor, borrower, borrower_kw, waited, reclaims):
    borrower_kw = {"max_runtime_s": 20 * HOUR, **borrower_kw}
    res = (
        Snap().nodes(1, gpus=8).quota("A", 4).quota("B", 4)
        .running(run(10, dept="B", gpus=8, tier=borrower, borrowed=True, ran=2 * HOUR, **borrower_kw))
        .pending(job(1, dept="A", gpus=4, tier=preemptor, submitted_at=NOW - waited)).decide()
    )  # fmt: skip
    if reclaims:
        assert res.code(1) == reasons.PREEMPTION_IN_PROGRESS
        (p,) = res.raw.preemptions
        assert p.preemptor_id == 1 and p.victim_ids == (10,) and p.reason == "reclaim"
    else:
        assert not [p for p in res.raw.preemptions if p.reason == "reclaim"]


def test_reclaim_frees_at_most_twice_what_the_job_needs():
    res = (
        Snap().nodes(1, gpus=8).quota("A", 4).quota("B", 4)
        .running(run(10, dept="B", gpus=8, borrowed=True, ran=2 * HOUR, max_runtime_s=20 * HOUR))
        .pending(job(1, dept="A", gpus=1, submitted_at=NOW - HOUR)).decide()
    )  # fmt: skip
    assert not [p for p in res.raw.preemptions if p.reason == "reclaim"]


def test_no_reclaim_from_a_department_within_its_nominal():
    res = (
        Snap().nodes(1, gpus=8).quota("A", 4).quota("B", 8)
        .running(run(10, dept="B", gpus=8, borrowed=True))  # flagged borrowed long ago, now within nominal
        .pending(job(1, dept="A", gpus=4)).decide()
    )  # fmt: skip
    assert not res.raw.preemptions
    assert res.code(1) != reasons.PREEMPTION_IN_PROGRESS


# ---------------------------------------------------------------- rule 5: gang


@pytest.mark.parametrize(
    ("pods", "per_pod", "admitted"),
    [(2, 4, True), (3, 4, False), (4, 2, True), (5, 2, False), (1, 8, False)],
)
def test_gang_is_all_or_nothing(pods, per_pod, admitted):
    # two nodes with 4 free each (8 free in total, no node fully free)
    res = (
        Snap().nodes(2).quota("A", 32)
        .running(run(10, on="n0", gpus=4), run(11, on="n1", gpus=4))
        .pending(job(1, pods=pods, gpus=per_pod)).decide()
    )  # fmt: skip
    assert (1 in res.admitted) is admitted
    if admitted:
        assert len(res.placement(1)) == pods
    else:
        assert res.code(1) in (reasons.NO_FITTING_NODE, reasons.NO_CAPACITY)


# ---------------------------------------------------------------- rule 6: placement


def test_best_fit_keeps_whole_nodes_free():
    res = (
        Snap().nodes(3).quota("A", 32)
        .running(run(10, on="n1", gpus=6), run(11, on="n2", gpus=3))
        .pending(job(1, gpus=2), job(2, gpus=8)).decide()
    )  # fmt: skip
    assert res.placement(1) == ("n1",)  # exactly 2 free there
    assert res.placement(2) == ("n0",)  # the whole node stayed free for the big job


def test_mig_profiles_are_their_own_flavors():
    res = (
        Snap().node("n0", "a100", 8).node("n0", "mig-3g", 2).quota("A", 8).quota("A", 2, flavor="mig-3g")
        .pending(job(1, flavor="mig-3g", gpus=2, submitted_at=NOW - HOUR), job(2, flavor="mig-3g"), job(3, flavor="h100"))
        .decide()
    )  # fmt: skip
    assert res.placement(1) == ("n0",)
    assert res.code(2) in (reasons.BORROW_LIMIT, reasons.QUOTA_EXHAUSTED, reasons.NO_CAPACITY)
    assert res.code(3) == reasons.UNKNOWN_FLAVOR


@pytest.mark.parametrize(
    ("node_kw", "job_kw", "expect"),
    [
        ({"schedulable": False}, {}, reasons.NO_CAPACITY),
        ({"taints": ("maintenance",)}, {}, reasons.EXCEEDS_CAPACITY),
        ({"labels": (("zone", "a"),)}, {}, "admitted"),  # labels beyond the flavor's do not matter
    ],
)
def test_labels_taints_and_cordon(node_kw, job_kw, expect):
    res = Snap().node("n0", "a100", 8, **node_kw).quota("A", 8).pending(job(1, **job_kw)).decide()
    assert res.code(1) == expect


# ---------------------------------------------------------------- rule 7: EASY backfill


def _head_blocked(extra_job):
    # n0: 4 busy until NOW+1h; n1: 8 busy until NOW+2h. The head wants 8 on one node -> n0 at NOW+1h.
    return (
        Snap().nodes(2).quota("A", 64)
        .running(run(10, on="n0", gpus=4, ran=0, max_runtime_s=HOUR), run(11, on="n1", gpus=8, ran=0,
                 max_runtime_s=2 * HOUR))
        .pending(job(1, gpus=8, urgency="critical"), extra_job).decide()
    )  # fmt: skip


@pytest.mark.parametrize(
    ("runtime", "expect"),
    [(HOUR / 2, "admitted"), (HOUR, "admitted"), (3 * HOUR, reasons.RESERVED_FOR_HEAD)],
)
def test_backfill_only_jobs_that_do_not_delay_the_head(runtime, expect):
    res = _head_blocked(job(2, gpus=2, max_runtime_s=runtime))
    assert res.code(2) == expect
    head = res.reason[1]
    assert head.estimated_start == NOW + HOUR
    assert head.detail["reserved_from"] == NOW + HOUR


def test_backfill_on_nodes_the_head_does_not_need():
    res = (
        Snap().nodes(3).quota("A", 64)
        .running(run(10, on="n0", gpus=4, ran=0, max_runtime_s=HOUR), run(11, on="n1", gpus=8, ran=0),
                 run(12, on="n2", gpus=6, ran=0))
        .pending(job(1, gpus=8, urgency="critical"), job(2, gpus=2, max_runtime_s=10 * HOUR)).decide()
    )  # fmt: skip
    assert res.placement(2) == ("n2",)


def _two_heads(depth: int, *extra):
    # n0: 8 busy until NOW+1h, n1: 6 busy until NOW+2h (2 free), n2: 8 busy until NOW+3h, n3: 4 busy for long
    # (4 free). Head 1 (8 GPUs) fits on n0 at NOW+1h; head 2 (8 GPUs), placed on what head 1 leaves, on n1 at
    # NOW+2h. Their 16 GPUs are half of the pool's 32: the third blocked job reserves nothing.
    return (
        Snap().nodes(4).quota("A", 64).policy(reservation_depth=depth)
        .running(run(10, on="n0", gpus=8, ran=0, max_runtime_s=HOUR),
                 run(11, on="n1", gpus=6, ran=0, max_runtime_s=2 * HOUR),
                 run(12, on="n2", gpus=8, ran=0, max_runtime_s=3 * HOUR),
                 run(13, on="n3", gpus=4, ran=0, max_runtime_s=40 * HOUR))
        .pending(job(1, gpus=8, urgency="critical"), job(2, gpus=8, urgency="high"), job(3, gpus=8), *extra)
        .decide()
    )  # fmt: skip


def test_the_jobs_behind_the_head_reserve_too_up_to_half_the_pool():
    res = _two_heads(16)
    assert res.reason[1].detail["reserved_from"] == NOW + HOUR
    assert res.reason[2].detail["reserved_from"] == NOW + 2 * HOUR
    assert res.reason[2].estimated_start == NOW + 2 * HOUR
    assert "reserved_from" not in res.reason[3].detail
    assert res.raw.figures["reservations"] == 2


@pytest.mark.parametrize(("depth", "where", "second_reserved"), [(16, ("n3",), True), (1, ("n1",), False)])
def test_long_backfill_keeps_off_the_gpus_of_every_head_it_would_delay(depth, where, second_reserved):
    """A 10-hour job would delay head 2 on n1's free GPUs: with one reservation (plain EASY) nothing stops it
    there (best fit prefers the fuller n1), with two it goes to n3, which no head needs."""
    res = _two_heads(depth, job(4, gpus=2, urgency="low", max_runtime_s=10 * HOUR))
    assert res.placement(4) == where
    assert ("reserved_from" in res.reason[2].detail) is second_reserved


def test_a_job_ending_between_two_reserved_starts_may_use_the_later_heads_gpus():
    """Ending at NOW+1.5h it runs past head 1's start (n0, full until then anyway) but not head 2's (n1 at
    NOW+2h): n1's free GPUs are open to it."""
    res = _two_heads(16, job(5, gpus=2, urgency="low", max_runtime_s=1.5 * HOUR))
    assert res.placement(5) == ("n1",)
    assert res.reason[2].detail["reserved_from"] == NOW + 2 * HOUR


def test_on_a_small_pool_only_the_head_reserves():
    # Two 4-GPU nodes, n0 busy for an hour and n1 for two: head 1 takes n0 at NOW+1h, half the pool. Head 2
    # would fit on n1 at NOW+2h, but a second reservation would close the pool's last GPUs to backfill.
    snap = (
        Snap().nodes(2, gpus=4).quota("A", 8)
        .running(run(10, on="n0", gpus=4, ran=0, max_runtime_s=HOUR), run(11, on="n1", gpus=4, ran=0,
                 max_runtime_s=2 * HOUR))
        .pending(job(1, gpus=4, urgency="critical"), job(2, gpus=4, urgency="high"))
    )  # fmt: skip
    res = snap.decide()
    assert res.reason[1].detail["reserved_from"] == NOW + HOUR
    assert "reserved_from" not in res.reason[2].detail
    # the cap is what stops it: with two more nodes, busy for longer, head 2 reserves n1
    res = (
        snap.node("n2", "a100", 4).node("n3", "a100", 4)
        .running(run(12, on="n2", gpus=4, ran=0, max_runtime_s=40 * HOUR),
                 run(13, on="n3", gpus=4, ran=0, max_runtime_s=40 * HOUR)).decide()
    )  # fmt: skip
    assert res.reason[2].detail["reserved_from"] == NOW + 2 * HOUR


def test_a_job_held_by_quota_alone_does_not_reserve_behind_the_head():
    """Job 2 fits physically now (n3 has 4 free) and waits only for its department's quota: it must not hold
    GPUs as a second head. Job 3, which needs a whole node, still reserves behind head 1."""
    res = (
        Snap().nodes(4).quota("A", 16).quota("B", 16, lend=0)
        .running(run(10, on="n0", gpus=8, ran=0, max_runtime_s=HOUR),
                 run(11, on="n1", gpus=8, ran=0, max_runtime_s=2 * HOUR),
                 run(12, dept="B", on="n2", gpus=6, ran=0, max_runtime_s=40 * HOUR),
                 run(13, dept="B", on="n3", gpus=4, ran=0, max_runtime_s=40 * HOUR))
        .pending(job(1, dept="B", gpus=8, urgency="critical"), job(2, gpus=4, urgency="high"),
                 job(3, dept="B", gpus=8, urgency="low"))
        .decide()
    )  # fmt: skip
    assert res.reason[1].detail["reserved_from"] == NOW + HOUR
    assert res.code(2) == reasons.QUOTA_EXHAUSTED and "reserved_from" not in res.reason[2].detail
    assert res.reason[3].detail["reserved_from"] == NOW + 2 * HOUR


def test_reservation_depth_zero_reserves_nothing():
    res = _two_heads(0, job(4, gpus=2, urgency="low", max_runtime_s=10 * HOUR))
    assert not any("reserved_from" in r.detail for r in res.raw.pending)
    assert res.raw.figures["reservations"] == 0
    assert res.placement(4) == ("n1",)


# ---------------------------------------------------------------- rule 8: preemption


def _full(*running, **snap_kw):
    snap = Snap().nodes(1).quota("A", 8).quota("B", 8)
    return snap.running(*running)


@pytest.mark.parametrize(
    ("running", "victims"),
    [
        # lower tier first
        ((run(10, dept="B", gpus=4, tier="elastic"), run(11, dept="B", gpus=4, tier="backfill")), (11,)),
        # borrowers first
        ((run(10, dept="B", gpus=4, borrowed=True), run(11, dept="B", gpus=4, tier="backfill")), (10,)),
        # lower score first
        ((run(10, dept="B", gpus=4, urgency="high"), run(11, dept="B", gpus=4, urgency="low")), (11,)),
        # least work lost
        ((run(10, dept="B", gpus=4, ran=5 * HOUR), run(11, dept="B", gpus=4, ran=HOUR)), (11,)),
        # id tie-break
        ((run(11, dept="B", gpus=4), run(10, dept="B", gpus=4)), (10,)),
        # smallest set first: one 4-GPU elastic job rather than four 1-GPU backfill ones
        ((run(10, dept="B", gpus=4), *(run(20 + i, dept="B", gpus=1, tier="backfill") for i in range(4))),
         (10,)),
        # among equally small sets, the preference order (backfill first)
        ((run(10, dept="B", gpus=4), run(11, dept="B", gpus=4, tier="backfill")), (11,)),
    ],
)
def test_realtime_preemption_victim_order(running, victims):
    res = Snap().nodes(1).quota("A", 8).quota("B", 8).running(*running).pending(
        job(1, gpus=4, tier="realtime")
    ).decide()
    (p,) = res.raw.preemptions
    assert p.victim_ids == victims and p.reason == "priority"
    assert res.code(1) == reasons.PREEMPTION_IN_PROGRESS


def test_single_victim_frees_the_fewest_gpus():
    # a 1-GPU realtime job: the 1-GPU elastic job goes, not the 4-GPU borrowed gang that comes first in the
    # preference order (evicting it would leave 3 GPUs idle until a job of that size arrives)
    res = (
        Snap().nodes(1).quota("A", 8).quota("B", 8)
        .running(run(10, dept="B", gpus=4, borrowed=True), run(11, dept="B", gpus=1), run(12, dept="B", gpus=3))
        .pending(job(1, gpus=1, tier="realtime")).decide()
    )  # fmt: skip
    (p,) = res.raw.preemptions
    assert p.victim_ids == (11,)


def test_borrowing_realtime_job_does_not_evict_its_departments_work_within_nominal():
    # A holds 4 of its nominal 4 with an elastic job; its 8-GPU realtime job would borrow. Evicting the elastic
    # job would not help: it is back first in the next cycle's nominal pass, and the eviction repeats forever.
    res = (
        Snap().nodes(2, gpus=4).quota("A", 4).quota("B", 4)
        .running(run(10, gpus=4, ran=HOUR))
        .pending(job(1, gpus=4, pods=2, tier="realtime")).decide()
    )  # fmt: skip
    assert not res.raw.preemptions
    assert res.code(1) == reasons.QUOTA_EXHAUSTED
    # when the realtime job fits inside nominal once the victim is gone, it comes first next cycle: allowed
    res = (
        Snap().nodes(1, gpus=4).quota("A", 4).quota("B", 4)
        .running(run(10, gpus=4, ran=HOUR))
        .pending(job(1, gpus=2, tier="realtime")).decide()
    )  # fmt: skip
    assert res.victims == {10}
    # above its nominal quota, the department's own lower-tier work is fair game again
    res = (
        Snap().nodes(2, gpus=4).quota("A", 2).quota("B", 6)
        .running(run(10, gpus=4, ran=HOUR, borrowed=True))
        .pending(job(1, gpus=4, pods=2, tier="realtime")).decide()
    )  # fmt: skip
    assert res.victims == {10}


def test_victim_set_is_minimal():
    # 2 GPUs needed, 8 busy in 1-GPU backfill jobs: exactly two victims, the first two in order
    res = (
        Snap().nodes(1).quota("A", 8).quota("B", 8)
        .running(*(run(20 + i, dept="B", gpus=1, tier="backfill") for i in range(8)))
        .pending(job(1, gpus=2, tier="realtime")).decide()
    )  # fmt: skip
    (p,) = res.raw.preemptions
    assert p.victim_ids == (20, 21)


@pytest.mark.parametrize(
    ("victim_kw", "snap_kw", "code"),
    [
        ({"ran": 300}, {}, reasons.PREEMPTION_COOLDOWN),
        ({"ran": 300}, {"min_runtime_s": 60}, reasons.PREEMPTION_IN_PROGRESS),
        ({"tier": "realtime", "preemptible": False}, {}, reasons.NO_CAPACITY),
        ({"preemptible": False}, {}, reasons.NO_CAPACITY),
        ({"tier": "realtime", "borrowed": True}, {}, reasons.NO_CAPACITY),
        ({"disruption_budgets": ("pdb",)}, {}, reasons.DISRUPTION_BUDGET),
        ({}, {"preemption_rate_limit": 0}, reasons.PREEMPTION_RATE_LIMIT),
    ],
)
def test_preemption_guards(victim_kw, snap_kw, code):
    snap = (
        Snap().nodes(1).quota("A", 8).quota("B", 8).budget("pdb", 0)
        .running(run(10, dept="B", gpus=8, **victim_kw)).pending(job(1, gpus=8, tier="realtime"))
    )  # fmt: skip
    if snap_kw:
        snap.policy(**snap_kw)
    res = snap.decide()
    assert res.code(1) == code
    if code != reasons.PREEMPTION_IN_PROGRESS:
        assert not res.raw.preemptions


@pytest.mark.parametrize(
    ("own_kw", "code"),
    [
        ({"ran": 300}, reasons.PREEMPTION_COOLDOWN),  # its own training job may be evicted in 5 minutes
        ({"ran": 3600}, reasons.PREEMPTION_IN_PROGRESS),
        ({"ran": 3600, "evicting_for": 1}, reasons.PREEMPTION_IN_PROGRESS),  # already leaving for it
        ({"ran": 3600, "tier": "realtime"}, reasons.BORROW_LIMIT),  # nothing it may evict: the limit it is at
    ],
)
def test_a_realtime_job_at_its_borrowing_limit_says_what_it_waits_for(own_kw, code):
    # A holds its nominal 2 + borrowing limit 2 on a node of 8; its realtime job may evict only A's own lower
    # tiers, so the honest reason is whatever keeps that eviction from happening now.
    res = (
        Snap().nodes(1).quota("A", 2, borrow=2).quota("B", 6)
        .running(run(10, dept="A", gpus=4, borrowed=True, **own_kw)).pending(job(1, dept="A", gpus=1, tier="realtime"))
        .decide()
    )  # fmt: skip
    assert res.code(1) == code
    if code == reasons.PREEMPTION_COOLDOWN:
        assert res.reason[1].detail["preemptible_at"] == NOW + 300
    if own_kw.get("evicting_for"):
        assert res.reason[1].detail == {"victims": [10], "reason": "in_flight", "start_target": NOW + 300}
        assert not res.raw.preemptions


# A pod may be covered by several budgets (the job's own PDB, a team's PDB by label, a namespace-wide one): the
# Eviction API refuses if any of them has no room, so a victim needs room in every one of its budgets, and its
# pods are charged to each of them for the rest of the cycle.
@pytest.mark.parametrize(
    ("budgets", "covers", "preemptors", "victims", "codes"),
    [
        # the team's budget has no room: the other job goes, though the job's own budget has room
        ({"team": 0, "job-10": 1}, {10: ("team", "job-10")}, (4,), {11}, ("preemption_in_progress",)),
        # the job's own budget has no room, the team's has: still not that job
        ({"team": 1, "job-10": 0}, {10: ("team", "job-10")}, (4,), {11}, ("preemption_in_progress",)),
        # room in both: the preference order decides as without budgets
        ({"team": 1, "job-10": 1}, {10: ("team", "job-10")}, (4,), {10}, ("preemption_in_progress",)),
        # a name without a DisruptionBudget in the snapshot limits nothing
        ({}, {10: ("gone",)}, (4,), {10}, ("preemption_in_progress",)),
        # one shared disruption left: one victim of the two a whole-node preemptor needs
        ({"ns": 1}, {10: ("ns",), 11: ("ns",)}, (8,), set(), ("disruption_budget",)),
        # a budget shared by both victims is used up by the first preemption of the cycle
        ({"team": 1, "ns": 1}, {10: ("team", "ns"), 11: ("ns",)}, (4, 4), {10},
         ("preemption_in_progress", "disruption_budget")),
        # ... and the second victim's other budget does not matter then
        ({"ns": 2, "team": 1}, {10: ("ns",), 11: ("ns", "team")}, (4, 4), {10, 11},
         ("preemption_in_progress", "preemption_in_progress")),
    ],
)
def test_victims_need_room_in_every_budget(budgets, covers, preemptors, victims, codes):
    snap = Snap().nodes(1).quota("A", 8).quota("B", 8).running(
        *(run(i, dept="B", gpus=4, disruption_budgets=covers.get(i, ())) for i in (10, 11))
    )
    for name, allowed in budgets.items():
        snap.budget(name, allowed)
    snap.pending(*(job(i, gpus=g, tier="realtime") for i, g in enumerate(preemptors, start=1)))
    res = snap.decide()
    assert res.victims == victims
    assert tuple(res.code(i) for i in range(1, len(preemptors) + 1)) == codes


@pytest.mark.parametrize(
    ("budgets", "covers", "named"),
    [
        # only the budgets that are short for a candidate, not every budget of the snapshot
        ({"a": 0, "b": 5, "c": 0, "elsewhere": 0}, {10: ("a", "b"), 11: ("c",)}, ["a", "c"]),
        # none is short for one victim alone, together they are: the candidates' budgets
        ({"ns": 1, "elsewhere": 0}, {10: ("ns",), 11: ("ns",)}, ["ns"]),
    ],
)
def test_disruption_budget_reason_names_the_blocking_budgets(budgets, covers, named):
    snap = Snap().nodes(1).quota("A", 8).quota("B", 8).running(
        *(run(i, dept="B", gpus=4, disruption_budgets=covers.get(i, ())) for i in (10, 11))
    )
    for name, allowed in budgets.items():
        snap.budget(name, allowed)
    res = snap.pending(job(1, gpus=8, tier="realtime")).decide()
    assert res.code(1) == reasons.DISRUPTION_BUDGET and not res.raw.preemptions
    assert res.reason[1].detail["budgets"] == named


def test_rate_limit_counts_recent_preemptions():
    snap = (
        Snap().nodes(1).quota("A", 8).quota("B", 8).policy(preemption_rate_limit=3).recent_preemptions(2)
        .running(run(10, dept="B", gpus=4), run(11, dept="B", gpus=4))
    )  # fmt: skip
    assert snap.pending(job(1, gpus=4, tier="realtime")).decide().code(1) == reasons.PREEMPTION_IN_PROGRESS
    assert snap.pending(job(2, gpus=4, tier="realtime")).decide().code(2) == reasons.PREEMPTION_RATE_LIMIT


def test_elastic_jobs_do_not_preempt_for_priority():
    res = (
        Snap().nodes(1).quota("A", 8).quota("B", 8).running(run(10, dept="B", gpus=8, tier="backfill"))
        .pending(job(1, gpus=8, tier="elastic", urgency="critical")).decide()
    )  # fmt: skip
    assert not res.raw.preemptions


def test_realtime_job_does_not_evict_for_gpus_a_reserved_head_holds():
    """A realtime head that cannot start (other realtime work holds its GPUs) reserves them; a later realtime
    job that would run past that reservation could not start on a victim's GPUs that the head's plan already
    counts on, so it evicts nothing: the victim would lose its work and a shorter job would take the GPUs."""

    def decide(victim_ends_in):  # (every running job started an hour ago)
        return (
            Snap().nodes(2).quota("A", 16).quota("B", 16)
            .running(run(20, on="n0", gpus=6, tier="realtime", max_runtime_s=3 * HOUR),
                     run(10, dept="B", on="n0", gpus=2, tier="backfill", max_runtime_s=HOUR + victim_ends_in),
                     run(21, on="n1", gpus=8, tier="realtime", max_runtime_s=4 * HOUR))
            .pending(job(1, gpus=8, tier="realtime", submitted_at=NOW - HOUR),
                     job(2, gpus=2, tier="realtime", max_runtime_s=8 * HOUR))
            .decide()
        )  # fmt: skip

    # the backfill job ends (in 1 h) before the head's start on n0 (in 2 h): the head counts on its GPUs
    res = decide(HOUR)
    assert res.reason[1].detail.get("reserved_from") is not None
    assert not res.raw.preemptions and res.code(2) != reasons.PREEMPTION_IN_PROGRESS
    # it would hold n0 for 10 h: the head reserves n1 instead (in 3 h), and the realtime job takes n0's GPUs
    res = decide(10 * HOUR)
    assert [(p.preemptor_id, p.victim_ids) for p in res.raw.preemptions] == [(2, (10,))]


def test_borrowing_realtime_job_preempts_within_another_departments_lending_limit_only():
    def decide(lend):
        return (
            Snap().nodes(1).quota("A", 1).quota("B", 7, lend=lend)
            .running(run(10, dept="B", gpus=4, tier="backfill"), run(11, dept="B", gpus=4, tier="elastic"))
            .pending(job(1, gpus=4, tier="realtime")).decide()
        )  # fmt: skip

    # B runs within its nominal quota; A needs 3 GPUs more than its own. Its realtime job takes B's cheapest lower-tier work ...
    res = decide(None)
    assert [(p.victim_ids, p.reason) for p in res.raw.preemptions] == [((10,), "priority")]
    # ... but never more than B lends (A could reach 3 GPUs at most: the job waits, saying so)
    res = decide(2)
    assert not res.raw.preemptions
    assert res.reason[1].code == reasons.QUOTA_EXHAUSTED and res.reason[1].detail["never"]


# ---------------------------------------------------------------- rule 9: reasons


def test_every_pending_job_has_a_documented_reason_with_one_line_message():
    snap = (
        Snap().nodes(2).quota("A", 8, borrow=2).quota("B", 4).credits(A=10, B=0)
        .running(run(10, dept="B", on="n1", gpus=8, ran=60))
    )  # fmt: skip
    for i in range(1, 30):
        snap.pending(
            job(i, dept="AB"[i % 2], gpus=1 + i % 8, pods=1 + i % 3, tier=TIERS[i % 3], hold=i % 5,
                flavor="a100" if i % 7 else "h100")
        )  # fmt: skip
    res = snap.decide()
    assert len(res.admitted) + len(res.reason) == 29
    for r in res.raw.pending:
        assert r.code in reasons.CODES
        assert r.message and "\n" not in r.message
        assert isinstance(dict(r.detail), dict)


def test_waiting_for_higher_priority_when_capacity_went_to_others_this_cycle():
    res = Snap().nodes(1, gpus=4).quota("A", 8).pending(job(1, gpus=4), job(2, gpus=4)).decide()
    assert res.code(2) == reasons.WAITING_FOR_HIGHER_PRIORITY


@pytest.mark.parametrize(
    ("gpus", "pods", "code"),
    [(9, 1, reasons.EXCEEDS_CAPACITY), (4, 5, reasons.EXCEEDS_CAPACITY), (0, 1, reasons.INVALID_REQUEST)],
)
def test_impossible_requests(gpus, pods, code):
    res = Snap().nodes(2).quota("A", 64).pending(job(1, gpus=gpus, pods=pods)).decide()
    assert res.code(1) == code
    assert res.reason[1].estimated_start is None


# ---------------------------------------------------------------- rule 10: estimated start


def test_estimates_follow_running_jobs_ending_at_max_runtime():
    res = (
        Snap().nodes(1).quota("A", 8)
        .running(run(10, gpus=8, ran=600, max_runtime_s=HOUR))
        .pending(job(1, gpus=8, max_runtime_s=2 * HOUR, submitted_at=NOW - HOUR), job(2, gpus=4, urgency="low"), job(3, gpus=8, pods=2))
        .decide()
    )  # fmt: skip
    assert res.reason[1].estimated_start == NOW - 600 + HOUR
    assert res.reason[2].estimated_start == NOW - 600 + 3 * HOUR  # after job 1 (in queue order)
    assert res.reason[3].estimated_start is None  # 16 GPUs on an 8-GPU flavor: never


def test_overdue_running_jobs_are_treated_as_ending_now():
    res = Snap().nodes(1).quota("A", 8).running(run(10, gpus=8, ran=2 * HOUR, max_runtime_s=HOUR)).pending(
        job(1, gpus=8)
    ).decide()
    assert res.reason[1].estimated_start == NOW


def test_estimate_accounts_for_quota():
    res = (
        Snap().nodes(2).quota("A", 4, borrow=0).quota("B", 12)
        .running(run(10, gpus=4, ran=0, max_runtime_s=HOUR))
        .pending(job(1, gpus=4)).decide()
    )  # fmt: skip
    assert res.code(1) == reasons.QUOTA_EXHAUSTED
    assert res.reason[1].estimated_start == NOW + HOUR


def test_cycle_figures():
    res = Snap().nodes(2).quota("A", 8).pending(job(1, gpus=8), job(2, gpus=8)).decide()
    f = res.raw.figures
    assert f["admitted"] == 1 and f["admitted_gpus"] == 8 and f["capacity_gpus"] == 16
    assert f["still_pending"] == 1 and f["reason.quota_exhausted"] == 1


def test_realtime_jobs_carry_their_start_target():
    res = (
        Snap().nodes(1).quota("A", 8).running(run(10, gpus=8, tier="realtime", preemptible=False))
        .pending(job(1, tier="realtime", submitted_at=NOW - 600), job(2, tier="realtime")).decide()
    )  # fmt: skip
    assert res.reason[1].detail["start_target"] == NOW - 300
    assert res.reason[2].detail["start_target"] == NOW + 300
    assert res.raw.figures["realtime_past_target"] == 1


def test_a_preemptor_holds_its_credits_for_the_cycle():
    res = (
        Snap().nodes(2).quota("A", 16).quota("B", 8).credits(A=1000)
        .running(run(10, dept="B", on="n0", gpus=8, tier="backfill"), run(11, dept="B", on="n1", gpus=4))
        .pending(job(1, gpus=8, tier="realtime", hold=800), job(2, gpus=4, hold=500)).decide()
    )  # fmt: skip
    assert res.code(1) == reasons.PREEMPTION_IN_PROGRESS
    assert res.code(2) == reasons.BUDGET_INSUFFICIENT


def test_estimates_off_changes_no_decision_and_keeps_only_reservation_times():
    """The simulator asks for no estimates: decisions, codes and a reserved head's start stay the same."""
    built = (
        Snap().nodes(1).quota("A", 16)
        .running(run(10, gpus=8, ran=600, max_runtime_s=HOUR))
        .pending(job(1, gpus=8, max_runtime_s=2 * HOUR, submitted_at=NOW - 2 * HOUR), job(2, gpus=4, urgency="low"), job(3, gpus=2, urgency="low"))
        .build()
    )  # fmt: skip
    on, off = schedule(built), schedule(replace(built, estimates=False))
    assert on.admissions == off.admissions and on.preemptions == off.preemptions
    assert [(r.job_id, r.code) for r in on.pending] == [(r.job_id, r.code) for r in off.pending]
    est_off = {r.job_id: r.estimated_start for r in off.pending}
    assert est_off[1] == NOW - 600 + HOUR  # the EASY head keeps its reservation time
    assert est_off[2] is None and est_off[3] is None
    assert {r.job_id: r.estimated_start for r in on.pending}[2] is not None


# ---------------------------------------------------------------- drain, headroom, evictions in flight


@pytest.mark.parametrize(
    ("victim_kw", "drains"),
    [
        # 1 GPU of dev/test work at a checkpoint blocks an 8-GPU head for 5 hours: evict it
        ({"tier": "backfill", "checkpoint_interval_s": 1800.0, "ran": 2 * HOUR}, True),
        # ... but not 20 minutes after its last checkpoint: wait for the next one
        ({"tier": "backfill", "checkpoint_interval_s": 1800.0, "ran": 2 * HOUR + 1200}, False),
        # no checkpoint declared: all of its run would be lost
        ({"tier": "backfill", "ran": 2 * HOUR}, False),
        # another department's training within its nominal quota is safe from a head that does not starve
        ({"tier": "elastic", "dept": "B", "checkpoint_interval_s": 1800.0, "ran": 2 * HOUR}, False),
        # inside its cooldown
        ({"tier": "backfill", "checkpoint_interval_s": 60.0, "ran": 300.0}, False),
    ],
)
def test_the_head_drains_cheap_work_instead_of_idling_gpus(victim_kw, drains):
    victim_kw = {"dept": "A", "max_runtime_s": 7 * HOUR, **victim_kw}
    res = (
        Snap().nodes(1, gpus=8).quota("A", 4).quota("B", 4)
        .running(run(10, gpus=1, **victim_kw))
        .pending(job(1, gpus=8, max_runtime_s=2 * HOUR)).decide()
    )  # fmt: skip
    if drains:
        assert res.code(1) == reasons.PREEMPTION_IN_PROGRESS
        (p,) = res.raw.preemptions
        assert (p.victim_ids, p.reason) == ((10,), "drain")
    else:
        assert not res.raw.preemptions and "reserved_from" in res.reason[1].detail


def test_drain_only_when_the_idle_time_saved_outweighs_the_work_lost():
    # 4 GPUs x 20 minutes at risk against 4 idle GPUs x 30 minutes: too dear at drain_ratio 0.25
    snap = (
        Snap().nodes(1, gpus=8).quota("A", 8)
        .running(run(10, gpus=4, tier="backfill", ran=1200, max_runtime_s=1200 + 1800, checkpoint_interval_s=3600))
        .pending(job(1, gpus=8))
    )  # fmt: skip
    assert not snap.decide().raw.preemptions
    assert snap.policy(drain_ratio=1.0, drain_max_loss_s=3600).decide().raw.preemptions


def test_a_starving_head_drains_other_departments_training():
    res = (
        Snap().nodes(1, gpus=8).quota("A", 4).quota("B", 4)
        .running(run(10, dept="B", gpus=1, ran=2 * HOUR, max_runtime_s=7 * HOUR, checkpoint_interval_s=1800.0))
        .pending(job(1, gpus=8, submitted_at=NOW - 13 * HOUR)).decide()
    )  # fmt: skip
    assert [(p.victim_ids, p.reason) for p in res.raw.preemptions] == [((10,), "drain")]


@pytest.mark.parametrize(
    ("running_kw", "admitted"),
    [
        ({"ran": 120.0}, False),  # every running job is inside its cooldown: keep the last GPU for realtime work
        ({"ran": 600.0}, True),  # a running job can be preempted soon enough: no need
        ({"ran": 120.0, "tier": "realtime", "preemptible": False}, True),  # nothing preemptible at all
    ],
)
def test_the_last_gpu_is_kept_for_realtime_work(running_kw, admitted):
    res = Snap().nodes(1, gpus=4).quota("A", 4).running(run(10, gpus=3, **running_kw)).pending(job(1)).decide()
    assert (res.code(1) == "admitted") is admitted
    if not admitted:
        assert res.code(1) == reasons.REALTIME_HEADROOM
    realtime = Snap().nodes(1, gpus=4).quota("A", 4).running(run(10, gpus=3, **running_kw))
    assert realtime.pending(job(1, tier="realtime")).decide().code(1) == "admitted"


def test_a_preemptor_waits_for_its_victims_in_flight_instead_of_choosing_more():
    res = (
        Snap().nodes(1, gpus=2).quota("A", 2)
        .running(run(10, gpus=1, preemptible=False, evicting_for=1), run(11, gpus=1, tier="backfill"))
        .pending(job(1, gpus=2, tier="realtime")).decide()
    )  # fmt: skip
    assert not res.raw.preemptions
    assert res.code(1) == reasons.PREEMPTION_IN_PROGRESS and res.reason[1].detail["victims"] == [10]


def test_victims_lose_the_least_work_since_their_checkpoint():
    res = (
        Snap().nodes(1, gpus=2).quota("A", 2)
        .running(
            run(10, gpus=1, ran=5 * HOUR, checkpoint_interval_s=1800.0),  # checkpointed 0 s ago
            run(11, gpus=1, ran=HOUR + 1500, checkpoint_interval_s=1800.0),  # 25 minutes at risk
        )
        .pending(job(1, tier="realtime")).decide()
    )  # fmt: skip
    assert res.victims == {10}


def test_fair_share_weight_moves_the_order():
    snap = (
        Snap().nodes(1, gpus=1).quota("A", 4).quota("B", 4)
        .running(run(10, dept="A", on="n9", gpus=4))  # A already uses its share elsewhere
        .pending(job(1, dept="A", urgency="high"), job(2, dept="B"))
    )  # fmt: skip
    assert set(snap.decide().admitted) == {2}
    assert set(snap.policy(fair_share_weight=0.0).decide().admitted) == {1}


@pytest.mark.parametrize(("ahead_s", "text"), [(90.0, "in 90 s"), (1778.0, "in 30 min"), (3 * HOUR, "in 3.0 h")])
def test_the_reserved_head_is_told_when_in_words_a_person_reads(ahead_s, text):
    res = (
        Snap().nodes(1, gpus=4).quota("A", 4)
        .running(run(10, gpus=4, tier="realtime", preemptible=False, ran=HOUR, max_runtime_s=HOUR + ahead_s))
        .pending(job(1, gpus=4)).decide()
    )  # fmt: skip
    assert f"GPUs are reserved for it {text}." in res.reason[1].message


def test_realtime_gang_victims_spared_by_the_prune():
    # An 8-GPU realtime pod needs a whole node. In the preference order (least work lost first) the walk takes
    # victims from both nodes, alternately, until n0 is empty, then spares the ones on n1 (they free no node)
    # and keeps the four on n0: the set is the prune's, last taken first spared.
    on_n0 = [run(10 + i, dept="B", gpus=2, on="n0", ran=700 + 200 * i) for i in range(4)]
    on_n1 = [run(20 + i, dept="B", gpus=2, on="n1", ran=800 + 200 * i) for i in range(4)]
    res = Snap().nodes(2).quota("A", 8).quota("B", 8).running(*on_n0, *on_n1).pending(
        job(1, gpus=8, tier="realtime")
    ).decide()
    (p,) = res.raw.preemptions
    assert sorted(p.victim_ids) == [10, 11, 12, 13] and p.reason == "priority"
