"""A resizable job's money follows its size: held for the size it was admitted at, a grow's GPUs held at the
rate of borrowed capacity (the cycle's clearing price, at least the base price) for the rest of its max runtime,
a shrink taking the newest GPUs off first, and settlement charging each size from its resize on; the ledger
stays consistent with the wallets all along."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.db import transaction

from quotas import budgets
from quotas.models import LedgerEntry, Wallet
from quotas.services import reports, settlement
from quotas.services.wallets import hold_key
from scheduling.models import Job, JobState
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.jobs import job_cancel

pytestmark = pytest.mark.django_db


@pytest.fixture
def running(money, submit, go):
    """Bob's 4-GPU job on one node; Alice's job of 2 to 8 one-GPU pods (2 hours at most) admitted at 3."""
    lab = money
    blocker = submit(lab.bob, gpus=4, max_runtime_s=1800)
    go(run_cycle)
    job = submit(lab.alice, gpus=1, pods=8, min_pods=2, checkpoint_interval_s=600, max_runtime_s=7200)
    go(run_cycle)
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.size == 3
    return lab, blocker, job


def resize(job, *, to, price=None, at, resize_id):
    with transaction.atomic():
        budgets.lock_department_wallets([job.department_id])
        return budgets.on_job_resized(job=job, attempt=job.attempt, resize_id=resize_id, pods_before=job.size,
                                      pods_after=to, price=price, at=at)


def test_the_hold_is_for_the_size_admitted_at(running, consistent):
    lab, _, job = running
    hold = LedgerEntry.objects.get(idempotency_key=hold_key(job.pk, job.attempt))
    assert (hold.gpus, hold.rate, hold.held_change) == (3, 1000, 3 * 1000 * 2)
    assert hold.data["resizable"] is True
    consistent()


def test_a_grow_applied_by_the_cycle_holds_its_gpus_and_the_wallet_stays_consistent(running, go, consistent):
    lab, blocker, job = running
    go(job_cancel, user=lab.bob, job=blocker)
    go(run_cycle)
    job.refresh_from_db()
    due = datetime.fromisoformat(job.resize["due_at"])
    held = Wallet.objects.get(department=lab.vision).held
    go(run_cycle, now=due + timedelta(seconds=1))
    job.refresh_from_db()
    assert job.size == 8
    entry = LedgerEntry.objects.get(job=job, kind="resize")
    hold = LedgerEntry.objects.get(idempotency_key=hold_key(job.pk, job.attempt))
    left_h = (7200 - (due - datetime.fromisoformat(hold.data["admitted_at"])).total_seconds()) / 3600
    assert entry.data["lots"] == [[3, 1000], [5, 1000]] and entry.gpus == 8
    assert entry.held_change == pytest.approx(5 * 1000 * left_h, abs=2)
    assert Wallet.objects.get(department=lab.vision).held == held + entry.held_change
    note = job.events.get(kind="budget", reason_code="resize")
    assert "size 3 -> 8 pods" in note.message
    assert reports.job_cost(job=job)["hold"] == hold.held_change + entry.held_change
    consistent()

    go(job_cancel, user=lab.alice, job=job)  # settled size by size, the rest released
    settle = LedgerEntry.objects.get(job=job, kind="settle")
    gpu_seconds, cost = settlement.attempt_usage(hold=hold, end=Job.objects.get(pk=job.pk).finished_at)
    assert (settle.gpu_seconds, -settle.amount) == (gpu_seconds, cost)
    assert Wallet.objects.get(department=lab.vision).held == 0
    consistent()


def test_grown_gpus_cost_their_own_rate_and_a_shrink_takes_the_newest_off_first(running, consistent):
    lab, _, job = running
    hold = LedgerEntry.objects.get(idempotency_key=hold_key(job.pk, job.attempt))
    t0 = datetime.fromisoformat(hold.data["admitted_at"])
    resize(job, to=8, price=2500, at=t0 + timedelta(hours=1), resize_id=1)
    grown = LedgerEntry.objects.get(job=job, kind="resize")
    assert grown.data["lots"] == [[3, 1000], [5, 2500]]
    assert grown.held_change == 5 * 2500 * 1  # one hour of the two left
    job.current_pods = 8
    resize(job, to=4, at=t0 + timedelta(minutes=90), resize_id=2)
    job.current_pods = 4
    resize(job, to=2, at=t0 + timedelta(minutes=105), resize_id=3)
    lots = [e.data["lots"] for e in LedgerEntry.objects.filter(job=job, kind="resize").order_by("id")]
    assert lots == [[[3, 1000], [5, 2500]], [[3, 1000], [1, 2500]], [[2, 1000]]]
    # 3 GPUs for 1 h at 1000, 8 for 30 min (3 at 1000, 5 at 2500), 4 for 15 min, 2 for the last 15 min (capped
    # at the 2-hour max runtime however late it ends)
    gpu_seconds, cost = settlement.attempt_usage(hold=hold, end=t0 + timedelta(hours=5))
    assert gpu_seconds == 3 * 3600 + 8 * 1800 + 4 * 900 + 2 * 900
    assert cost == 3000 + (1500 + 6250) + (750 + 625) + 500
    # the same resize twice is recorded once
    job.current_pods = 2
    resize(job, to=4, at=t0 + timedelta(minutes=110), resize_id=3)
    assert LedgerEntry.objects.filter(job=job, kind="resize").count() == 3
    consistent()


def test_a_job_cancelled_while_its_resize_is_applied_is_settled_at_its_size_and_the_resize_goes_stale(
        running, go, consistent):
    from scheduling.services import pods, resizes

    lab, blocker, job = running
    go(job_cancel, user=lab.bob, job=blocker)
    go(run_cycle)
    job.refresh_from_db()
    resizes.start_due(now=datetime.fromisoformat(job.resize["due_at"]) + timedelta(seconds=1))  # (not sent yet)
    job.refresh_from_db()
    assert job.resize["state"] == resizes.APPLYING
    go(job_cancel, user=lab.alice, job=job)
    assert pods.resize_pods(job_id=job.pk, attempt=job.attempt, resize_id=job.resize["id"]) == "stale"
    assert not LedgerEntry.objects.filter(job=job, kind="resize").exists()
    settle = LedgerEntry.objects.get(job=job, kind="settle")
    assert settle.gpus == 3  # charged at the size it ran at
    assert Wallet.objects.get(department=lab.vision).held == 0
    consistent()
