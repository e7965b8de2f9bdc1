"""Holds on admission, settlement by actual use, refunds on preemption and platform failure, through the
real cycle on the simulated cluster."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from quotas import budgets
from quotas.models import LedgerEntry, Wallet
from quotas.services import hooks, periodic, reports, settlement
from scheduling.models import Job, JobState, SimPod
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.jobs import job_cancel
from scheduling.services.lifecycle import requeue

pytestmark = pytest.mark.django_db


def _kinds(job):
    return [(e.kind, e.amount, e.held_change) for e in LedgerEntry.objects.filter(job=job).order_by("id")]


def test_no_wallets_means_budgets_are_not_enforced(lab, submit, go):
    job = go(submit, lab.alice, gpus=2)
    view = budgets.read_for_cycle()
    assert view.available_credits() is None
    assert view.hold_for(job) == 0
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    assert not LedgerEntry.objects.exists()


def test_hold_on_admission_settle_on_success(money, submit, go, consistent):
    lab = money
    job = go(submit, lab.alice, gpus=2, max_runtime_s=7200)
    assert budgets.read_for_cycle().hold_for(job) == 1000 * 2 * 2
    _admit(go, 30)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and not job.borrowed
    w = Wallet.objects.get(department=lab.vision)
    assert (w.balance, w.held) == (100_000, 4000)
    assert budgets.read_for_cycle().available_credits()["vision"] == 96_000
    assert job.events.filter(kind="budget", reason_code="hold").exists()

    # the job ran 30 minutes on 2 GPUs: 1 GPU-hour at 1000 mcr
    SimPod.objects.filter(job_id=job.pk).update(runtime_s=0)  # its runtime is over: it ended as it started, now
    go(sync_cluster)
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    w.refresh_from_db()
    assert w.held == 0
    settle = LedgerEntry.objects.get(job=job, kind="settle")
    assert settle.gpu_seconds >= 3600 and -settle.amount >= 1000
    assert w.balance == 100_000 + settle.amount
    cost = reports.job_cost(job=job)
    assert cost["final"] == -settle.amount and cost["hold"] == 0
    consistent()


def _admit(go, minutes_ago: int):
    """Run a cycle as if it happened ``minutes_ago``: admitted_at (the start of billing) is then."""
    return go(run_cycle, now=settings.SIM_CLOCK.now() - timedelta(minutes=minutes_ago))


def test_budget_insufficient_keeps_job_pending_with_missing_amount(money, submit, go):
    lab = money
    job = go(submit, lab.bob, gpus=4, max_runtime_s=36000)  # 4 x 10 h x 1000 = 40 credits > 10
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED
    assert job.reason_code == "budget_insufficient"
    assert "missing 30.000 cr" in job.reason_message


def test_cancel_running_job_settles_use_and_releases_rest(money, submit, go, consistent):
    lab = money
    job = go(submit, lab.alice, gpus=1, max_runtime_s=3600)
    _admit(go, 6)
    go(sync_cluster)
    job.refresh_from_db()
    go(job_cancel, user=lab.alice, job=job)
    kinds = [k for k, *_ in _kinds(job)]
    assert kinds == ["hold", "settle", "release"]
    settle = LedgerEntry.objects.get(job=job, kind="settle")
    assert 99 <= -settle.amount <= 102  # 6 minutes of 1 GPU at 1000/h
    assert Wallet.objects.get(department=lab.vision).held == 0
    consistent()


def test_platform_failure_is_refunded_in_full(money, submit, go, consistent):
    lab = money
    job = go(submit, lab.alice, gpus=2)
    _admit(go, 20)
    go(sync_cluster)
    job.refresh_from_db()
    assert go(requeue, job=job, outcome="platform_failure", reason="NodeLost", message="node lost")
    settle = LedgerEntry.objects.get(job=job, attempt=1, kind="settle")
    refund = LedgerEntry.objects.get(job=job, attempt=1, kind="refund")
    assert settle.amount < 0 and refund.amount == -settle.amount
    w = Wallet.objects.get(department=lab.vision)
    assert (w.balance, w.held) == (100_000, 0)
    consistent()


def test_preempted_borrowed_victim_pays_up_to_eviction_nominal_victim_is_refunded(money, submit, go, consistent):
    from scheduling.models import Preemption, PreemptionVictim

    lab = money
    job = go(submit, lab.alice, gpus=1)
    _admit(go, 30)
    go(sync_cluster)
    job.refresh_from_db()
    pre = Preemption.objects.create(preemptor=None, reason="priority")
    PreemptionVictim.objects.create(preemption=pre, job=job, attempt=1)
    assert go(requeue, job=job, outcome="preempted", reason="Evicted", message="evicted")
    settle = LedgerEntry.objects.get(job=job, attempt=1, kind="settle")
    assert 499 <= -settle.amount <= 505  # 30 minutes, not the whole hour that was held
    assert LedgerEntry.objects.get(job=job, attempt=1, kind="refund").amount == -settle.amount  # in nominal

    # second attempt on borrowed capacity (as the engine would admit it), preempted by a reclaim
    job.refresh_from_db()
    assert job.attempt == 2 and job.state == JobState.QUEUED
    Job.objects.filter(pk=job.pk).update(state=JobState.ADMITTED, borrowed=True, price=1400,
                                         admitted_at=timezone.now() - timedelta(minutes=30))
    job.refresh_from_db()
    hooks.on_job_admitted(job=job)
    assert LedgerEntry.objects.get(job=job, attempt=2, kind="hold").data["borrowed"] is True
    PreemptionVictim.objects.create(preemption=Preemption.objects.create(reason="reclaim"), job=job, attempt=2)
    job.refresh_from_db()
    assert go(requeue, job=job, outcome="preempted", reason="Evicted", message="evicted")
    assert 699 <= -LedgerEntry.objects.get(job=job, attempt=2, kind="settle").amount <= 704  # 30 min at 1400
    assert not LedgerEntry.objects.filter(job=job, attempt=2, kind="refund").exists()
    consistent()


@pytest.mark.parametrize(
    ("bid", "price", "rate", "basis"),
    [
        (1500, 1200, 1200, "clearing"),  # contested, above the base price: the clearing price
        (800, 600, 1000, "base"),  # a clearing price below the base price: the base price is the reserve
        (800, None, 1000, "base"),  # uncontested borrowing: the base price, not the bid
    ],
)
def test_borrowed_admission_holds_at_clearing_price_or_reserve(money, submit, go, bid, price, rate, basis):
    lab = money
    job = go(submit, lab.alice, gpus=1, bid=bid)
    assert budgets.read_for_cycle().hold_for(job) == max(1000, bid)  # worst case: max(base, bid)
    Job.objects.filter(pk=job.pk).update(borrowed=True, price=price, state=JobState.ADMITTED,
                                         admitted_at=timezone.now())
    job.refresh_from_db()
    hooks.on_job_admitted(job=job)
    hold = LedgerEntry.objects.get(job=job, kind="hold")
    assert (hold.rate, hold.held_change, hold.data["basis"]) == (rate, rate, basis)


def test_duplicated_settle_applies_once(money, submit, go, consistent):
    lab = money
    job = go(submit, lab.alice, gpus=1)
    go(run_cycle)
    job.refresh_from_db()
    for _ in range(3):
        settlement.settle_attempt(job=job, attempt=1, outcome="succeeded")
    assert LedgerEntry.objects.filter(job=job, kind="settle").count() == 1
    assert LedgerEntry.objects.filter(job=job, kind="release").count() == 1
    hooks.on_attempt_ended(job=job, attempt=1, outcome="succeeded")
    assert LedgerEntry.objects.filter(job=job).count() == 3
    consistent()


def test_reconciler_releases_orphaned_holds(money, submit, go, consistent):
    lab = money
    job = go(submit, lab.alice, gpus=1)
    go(run_cycle)
    Job.objects.filter(pk=job.pk).update(state=JobState.FAILED, finished_at=timezone.now())
    assert periodic.reconcile_holds() == 1
    assert periodic.reconcile_holds() == 0
    assert Wallet.objects.get(department=lab.vision).held == 0
    consistent()


def test_snapshot_queries_stay_bounded_with_budgets(money, submit, go, django_assert_max_num_queries):
    from scheduling.services.snapshot import build_snapshot

    lab = money
    for i in range(20):
        go(submit, lab.alice if i % 2 else lab.bob, name=f"j{i}")
    # + the clusters (states, labels, cost ranks), the quota refusals, members' GPU limits, predicted run times,
    # the teams' quota splits, the teams' shares of the budget, the bookings and the maintenance windows
    with django_assert_max_num_queries(18):
        snapshot, _ = build_snapshot(now=timezone.now())
    assert snapshot.credits == {"vision": 100_000, "nlp": 10_000}
    assert all(p.hold == 1000 for p in snapshot.pending)


def test_eviction_not_decided_by_the_portal_is_refunded(money, submit, go, consistent):
    """Node pressure or a drain evicted the pod: no PreemptionVictim exists, so the platform pays."""
    lab = money
    job = go(submit, lab.alice, gpus=1)
    _admit(go, 15)
    go(sync_cluster)
    job.refresh_from_db()
    assert go(requeue, job=job, outcome="preempted", reason="Evicted", message="node pressure")
    settle = LedgerEntry.objects.get(job=job, attempt=1, kind="settle")
    assert settle.outcome == "preempted" and settle.amount < 0
    assert LedgerEntry.objects.get(job=job, attempt=1, kind="refund").amount == -settle.amount
    assert "refunded" in job.events.filter(kind="budget", reason_code="settle").get().message
    consistent()
