"""A fraction of a GPU uses and pays its share (docs/fractions.md, "Prices"): a quarter of an A100 holds a quarter
of an A100-hour per hour, is settled a quarter of the GPU-seconds it ran, and counts a quarter in its
department's quota."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing import money as money_math
from quotas import budgets
from quotas.models import GpuSharing, LedgerEntry, Wallet
from scheduling.models import JobState, SimPod
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.quota_facts import SchedulingQuotaFacts

pytestmark = pytest.mark.django_db


@pytest.fixture
def shared_money(money):
    money.a100.sharing = GpuSharing.HAMI
    money.a100.save()
    return money


def test_a_fractions_gpu_seconds_are_its_share_rounded_up():
    assert money_math.attempt_gpu_seconds(total_gpus=0.25, ran_s=3600, max_runtime_s=None) == 900
    assert money_math.attempt_gpu_seconds(total_gpus=0.333, ran_s=10, max_runtime_s=None) == 4
    assert money_math.attempt_gpu_seconds(total_gpus=2, ran_s=10.2, max_runtime_s=None) == 22  # whole: as before


def test_a_quarter_gpu_is_held_settled_and_counted_as_a_quarter(shared_money, submit, go, consistent):
    lab = shared_money
    job = go(submit, lab.alice, gpus=1, gpu_memory_gib=20, max_runtime_s=7200)  # 20 of 80 GiB: a quarter
    assert job.share_milli == 250
    assert budgets.read_for_cycle().hold_for(job) == 1000 * 2 // 4  # elastic 1000 mcr/GPU-h x 0.25 x 2 h
    go(run_cycle, now=timezone.now() - timedelta(hours=1))
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED, job.reason_message
    assert Wallet.objects.get(department=lab.vision).held == 500
    hold = LedgerEntry.objects.get(job=job, kind="hold")
    assert hold.data["gpu_milli"] == 250 and "0.25 GPU(s)" in job.events.get(reason_code="hold").message
    facts = SchedulingQuotaFacts().gpus_in_use()
    assert facts[(lab.vision.pk, lab.a100.pk, lab.cluster.pk)] == 0.25
    SimPod.objects.filter(job_id=job.pk).update(runtime_s=0)  # its runtime is over: it ran from admission to now
    go(sync_cluster)
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    settle = LedgerEntry.objects.get(job=job, kind="settle")
    assert 240 <= -settle.amount <= 260  # an hour at a quarter of 1000 mcr
    assert 890 <= settle.gpu_seconds <= 910
    consistent()
