"""The tier table and the money arithmetic: the one home of each word, and the sites that must agree with it."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from billing import money
from engine import tiers
from engine.types import TIER_RANK, TIERS, Policy

ROOT = Path(__file__).resolve().parents[2]


def test_the_table_is_in_rank_order_and_feeds_the_public_lists():
    assert [t.rank for t in tiers.TABLE] == list(range(len(tiers.TABLE)))
    assert TIERS == ("realtime", "elastic", "backfill")
    assert dict(TIER_RANK) == {"realtime": 0, "elastic": 1, "backfill": 2}
    assert dict(Policy().priority_classes) == {t.name: t.priority_class for t in tiers.TABLE}


@pytest.mark.parametrize(("name", "preemptible"), [("realtime", False), ("elastic", True), ("backfill", True),
                                                   ("unknown", True)])
def test_only_realtime_is_never_preempted(name, preemptible):
    assert tiers.preemptible(name) is preemptible


def test_unknown_tiers_rank_last():
    assert tiers.rank("unknown") == tiers.LOWEST_RANK > max(t.rank for t in tiers.TABLE)


def test_the_shipped_priority_classes_match_the_table():
    docs = [d for d in yaml.safe_load_all((ROOT / "deploy/base/priorityclasses.yaml").read_text()) if d]
    assert {d["metadata"]["name"]: d["value"] for d in docs} == {
        t.priority_class: t.priority_value for t in tiers.TABLE
    }
    rbac = (ROOT / "deploy/base/rbac.yaml").read_text()
    assert all(f'"{t.priority_class}"' in rbac for t in tiers.TABLE)


def test_the_orm_and_the_price_choices_come_from_the_table():
    from quotas.models import TIERS as PRICE_TIERS
    from scheduling.models import Tier

    assert [(c.value, c.label) for c in Tier] == [(t.name, t.label) for t in tiers.TABLE]
    assert [v for v, _ in PRICE_TIERS] == list(tiers.NAMES)


# ------------------------------------------------------------------------------------------- money


@pytest.mark.parametrize(("rate", "gpu_seconds", "cost"), [
    (1000, 3600, 1000), (1000, 1, 1), (1000, 0.2, 1), (0, 3600, 0), (1000, 0, 0), (-5, 10, 0), (3600, 1.5, 2),
])
def test_cost_rounds_up_whole_gpu_seconds_to_the_next_mcr(rate, gpu_seconds, cost):
    assert money.cost_of(rate, gpu_seconds) == cost


def test_rates():
    assert money.worst_case_rate(2000, None) == 2000
    assert money.worst_case_rate(2000, 5000) == 5000
    assert money.admission_rate(2000, borrowed=True, price=3000) == (3000, "clearing")
    assert money.admission_rate(2000, borrowed=True, price=1000) == (2000, "base")  # the base is the reserve
    # inside the quota a winner whose bid decided pays its critical bid too (docs/budgets.md)
    assert money.admission_rate(2000, borrowed=False, price=3000) == (3000, "bid")
    assert money.admission_rate(2000, borrowed=False, price=1000) == (2000, "base")
    assert money.admission_rate(2000, borrowed=False, price=None) == (2000, "base")
    assert money.hold_of(3600, total_gpus=2, max_runtime_s=1800) == 3600


def test_a_charge_counts_whole_seconds_caps_at_max_runtime_and_at_the_hold():
    assert money.attempt_gpu_seconds(total_gpus=2, ran_s=10.2, max_runtime_s=3600) == 22
    assert money.attempt_gpu_seconds(total_gpus=2, ran_s=-5, max_runtime_s=3600) == 0
    assert money.attempt_gpu_seconds(total_gpus=1, ran_s=7200, max_runtime_s=3600) == 3600
    assert money.attempt_gpu_seconds(total_gpus=1, ran_s=7200, max_runtime_s=None) == 7200
    assert money.attempt_charge(3600, gpu_seconds=100) == 100
    assert money.attempt_charge(3600, gpu_seconds=100, hold=40) == 40


@pytest.mark.parametrize(("outcome", "decided", "borrowed", "share"), [
    ("platform_failure", True, True, 1.0),
    ("preempted", False, True, 1.0),  # the cluster evicted it, not the portal
    ("preempted", True, False, 1.0),
    ("preempted", True, True, 0.0),
    ("succeeded", True, False, 0.0),
    ("failed", True, False, 0.0),
    ("cancelled", True, False, 0.0),
])
def test_refund_policy(outcome, decided, borrowed, share):
    got, why = money.refund_share(outcome, decided_by_portal=decided, borrowed=borrowed)
    assert got == share
    assert bool(why) == (outcome in ("platform_failure", "preempted"))


def test_a_refund_never_exceeds_the_charge():
    assert money.refund_of(999, 1.0) == 999
    assert money.refund_of(999, 0.5) == 499
    assert money.refund_of(0, 1.0) == 0 and money.refund_of(999, 0.0) == 0


@pytest.mark.parametrize(("tier", "rate", "others", "conflict"), [
    ("realtime", 3000, {"elastic": 2000, "backfill": 800}, None),
    ("realtime", 2000, {"elastic": 2000, "backfill": 800}, ("above", 2000)),
    ("realtime", 100, {}, None),
    ("elastic", 2999, {"realtime": 3000}, None),
    ("elastic", 3000, {"realtime": 3000, "backfill": 100}, ("below", 3000)),
    ("backfill", 5000, {"elastic": 100}, None),  # only the premium tier is ordered
])
def test_price_order(tier, rate, others, conflict):
    assert money.price_order_conflict(tier, rate, others) == conflict


# ------------------------------------------------------------------------------------- cycle outcomes


def test_every_pending_job_gets_one_explicit_outcome_that_agrees_with_the_result():
    """Admitted exactly when admitted; Waiting with the reason code it reports; Evicting with the victims its
    preemption names (or the ones already leaving for it)."""
    from engine import Node, PendingJob, Quota, RunningJob, Snapshot
    from engine.cycle import Cycle
    from engine.outcomes import Admitted, Evicting, Waiting
    from engine.reasons import PREEMPTION_IN_PROGRESS

    now = 100_000.0
    snap = Snapshot(
        now=now,
        nodes=(Node("n1", "a100", 4), Node("n2", "a100", 4)),
        running=(
            RunningJob(1, "b", "a100", "backfill", ("n1",), 4, started_at=now - 7200, max_runtime_s=36000,
                       borrowed=True),
            RunningJob(2, "b", "a100", "elastic", ("n2",), 2, started_at=now - 7200, max_runtime_s=36000,
                       borrowed=True),
        ),
        pending=(
            PendingJob(10, "a", "a100", tier="elastic", gpus_per_pod=2),  # fits now
            PendingJob(11, "a", "a100", tier="realtime", gpus_per_pod=4, submitted_at=now - 60),  # preempts
            PendingJob(12, "a", "a100", tier="elastic", gpus_per_pod=8, submitted_at=now - 30),  # waits
            PendingJob(13, "a", "h100", tier="elastic"),  # unknown flavor
            PendingJob(14, "a", "a100", pods=0),  # invalid
        ),
        quotas=(Quota("a", "a100", 8), Quota("b", "a100", 0, borrowing_limit=8)),
    )
    cycle = Cycle(snap)
    result = cycle.run()
    outcomes = cycle.outcomes
    assert set(outcomes) == {j.id for j in snap.pending}
    admitted = {a.job_id for a in result.admissions}
    reasons = {p.job_id: p for p in result.pending}
    victims = {p.preemptor_id: p.victim_ids for p in result.preemptions}
    assert admitted == {10}
    assert isinstance(outcomes[11], Evicting) and outcomes[11].victims == victims[11]
    for job_id, outcome in outcomes.items():
        assert isinstance(outcome, Admitted) == (job_id in admitted)
        if isinstance(outcome, Waiting):
            assert reasons[job_id].code == outcome.code != PREEMPTION_IN_PROGRESS
        if isinstance(outcome, Evicting):
            assert reasons[job_id].code == PREEMPTION_IN_PROGRESS
    assert outcomes[13] == Waiting("unknown_flavor") and outcomes[14] == Waiting("invalid_request")


def test_a_resizable_attempts_lots_grow_borrowed_shrink_newest_first_and_settle_on_their_own_terms():
    from billing.money import lot_settlement, lot_usage, resized_lots

    lots = [[3, 1000, 0]]
    lots = resized_lots(lots, gpus=8, rate=2500)
    assert lots == [[3, 1000, 0], [5, 2500, 1]]  # the grown GPUs: borrowed, at the grow's rate
    assert resized_lots(lots, gpus=4, rate=0) == [[3, 1000, 0], [1, 2500, 1]]  # the newest lot first
    assert resized_lots(lots, gpus=2, rate=0) == [[2, 1000, 0]]
    assert resized_lots(lots, gpus=8, rate=0) == lots
    # 3 GPUs from 0, 5 more from 3600 s, preempted at 5400 s: each lot its own time at its own rate
    gpu_s, cost, done = lot_usage([(0.0, [[3, 1000, 0]]), (3600.0, lots)], start=0.0, end=5400.0,
                                  max_runtime_s=7200)
    assert (gpu_s, cost) == (3 * 5400 + 5 * 1800, 4500 + 6250)
    assert [(lot.gpus, lot.since, lot.gpu_seconds, lot.cost) for lot in done] == [(3, 0.0, 16200, 4500),
                                                                                  (5, 3600.0, 9000, 6250)]
    assert lot_settlement(done, outcome="preempted", decided_by_portal=True, charged=cost) == [
        (4500, 4500, "preempted inside the nominal quota: refunded in full"),
        (6250, 0, "preempted on borrowed capacity: charged up to the eviction")]
    # capped at the hold: each lot pays its share of the charge
    assert [c for c, _, _ in lot_settlement(done, outcome="succeeded", decided_by_portal=True, charged=5375)] == [
        2250, 3125]
    # the max runtime caps the whole attempt from its admission
    assert lot_usage([(0.0, [[2, 1000, 1]])], start=0.0, end=9000.0, max_runtime_s=3600)[:2] == (7200, 2000)
