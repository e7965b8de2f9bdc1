"""One clock for everything a job does: on a cluster whose time runs faster than the wall (the demo's simulated
cluster, ``SIM_SPEEDUP``), a batch job's run time, GPU minutes, settlement and the wallet's burn are measured in
the job's time, the wall's times the speed-up; a session's (people work in it) are the wall's, so its GPU idle
minutes and the idle-session cull's no-client clause read the same clock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from observability.services.simulated import SimulatedSource
from quotas.models import LedgerEntry, Wallet
from quotas.services import reports, settlement
from scheduling.models import JobState
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.snapshot import build_snapshot
from tests.scheduling.test_sessions import jupyter, running, session_body  # noqa: F401 - fixture

pytestmark = pytest.mark.django_db


@pytest.fixture
def fast(settings):
    """A simulated cluster 60 times faster than the wall, as in the demo."""
    settings.SIM_SPEEDUP = 60
    return 60


@pytest.fixture
def money(lab):
    from quotas.models import Price
    from quotas.services import wallets

    for tier, p in (("realtime", 3000), ("elastic", 1000), ("backfill", 500)):
        Price.objects.create(flavor=lab.a100, tier=tier, per_gpu_hour=p)
    lab.vwallet = wallets.wallet_create(department=lab.vision, actor=lab.root, balance=100_000)
    return lab


def test_an_attempt_is_charged_the_time_it_ran_on_its_clusters_clock(money, fast, submit, go):
    job = go(submit, money.alice, gpus=2, max_runtime_s=4 * 3600)
    admitted = timezone.now() - timedelta(minutes=5)
    go(run_cycle, now=admitted)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    hold = LedgerEntry.objects.get(job=job, kind="hold")
    assert hold.data["speedup"] == 60
    # one wall minute on a cluster 60 times faster: one hour of the job on 2 GPUs, at 1000 mcr per GPU-hour
    done = settlement.settle_attempt(job=job, attempt=1, outcome="succeeded", end=admitted + timedelta(minutes=1))
    assert (done.gpu_seconds, done.charged) == (2 * 3600, 2000)


def test_a_job_that_ran_its_whole_runtime_is_charged_its_quote(money, fast, submit, go, sim_clock):
    job = go(submit, money.alice, gpus=2, max_runtime_s=7200)
    go(run_cycle, now=sim_clock.now())
    go(sync_cluster)
    sim_clock.advance(600)  # its 2 hours are 2 minutes of the cluster's clock; the sync comes 8 minutes late
    go(sync_cluster)
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    settle = LedgerEntry.objects.get(job=job, kind="settle")
    # 2 hours of the job's time, as quoted (4 credits), not the 2 wall minutes that passed for them, nor the 10
    # minutes until a sync saw it end
    assert (settle.gpu_seconds, -settle.amount) == (2 * 7200, 4000)


def test_a_job_is_charged_until_its_pods_ended_not_until_a_sync_saw_it(money, fast, submit, go, sim_clock):
    job = go(submit, money.alice, gpus=2, max_runtime_s=7200, env={"SIM_DURATION_S": "3600"})
    go(run_cycle, now=sim_clock.now())
    sim_clock.advance(600)  # it ran one hour of its own time (a minute of the clock); no sync saw it run
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    assert (job.started_at, job.finished_at) == (job.admitted_at, job.admitted_at + timedelta(minutes=1))
    settle = LedgerEntry.objects.get(job=job, kind="settle")
    assert (settle.gpu_seconds, -settle.amount) == (2 * 3600, 2000)


def test_a_sessions_gpu_minutes_are_the_walls_as_its_cull_reads_them(lab, fast, client_for, go, jupyter):  # noqa: F811
    job = running(go, client_for(lab.alice), session_body(name="notebook"))
    series = SimulatedSource().read(job=job, attempt=1, namespace="x", start=job.started_at,
                                    end=job.started_at + timedelta(minutes=1))
    # one real minute of a notebook is one minute of samples (it was 60: "idle for 54 minutes" after one)
    assert max(next(iter(series.util.values()))) <= 60


def test_a_batch_jobs_gpu_minutes_are_its_clusters(lab, fast, submit, go):
    job = go(submit, lab.alice, gpus=1, max_runtime_s=7200)
    series = SimulatedSource().read(job=job, attempt=1, namespace="x", start=timezone.now(),
                                    end=timezone.now() + timedelta(minutes=1))
    assert max(next(iter(series.util.values()))) == 3600


def test_a_session_is_charged_and_planned_on_the_walls_clock(money, fast, client_for, go, jupyter):  # noqa: F811
    job = running(go, client_for(money.alice), session_body(max_runtime_s=3600))
    hold = LedgerEntry.objects.get(job=job, kind="hold")
    assert hold.data["speedup"] == 1
    done = settlement.settle_attempt(job=job, attempt=1, outcome="cancelled",
                                     end=job.admitted_at + timedelta(minutes=10))
    assert done.gpu_seconds == 600
    snapshot, _ = build_snapshot(now=timezone.now())
    assert [r.max_runtime_s for r in snapshot.running if r.id == job.pk] == [3600]


def test_days_left_reads_the_current_burn_as_well_as_the_average(money, fast, submit, go):
    wallet = Wallet.objects.get(department=money.vision)
    burn = reports.burn_rate(wallet=wallet)
    assert (burn["days_left"], burn["days_left_now"], burn["days_left_average"]) == (None, None, None)
    job = go(submit, money.alice, gpus=2, max_runtime_s=3600)
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    wallet.refresh_from_db()
    burn = reports.burn_rate(wallet=wallet)
    # 2 GPUs at 1000 mcr per GPU-hour of the job, 60 job-hours per wall hour: 120 credits per wall hour
    assert burn["running_per_hour"] == 120_000
    assert burn["days_left_now"] == wallet.available // (120_000 * 24) == 0
    assert burn["days_left_average"] is None  # nothing settled in the last 7 days
    assert burn["days_left"] == 0  # the sooner of the two, though the week was quiet


def test_days_left_at_real_speed_is_the_sooner_of_the_two_paces(money, settings, submit, go):
    settings.SIM_SPEEDUP = 1
    wallet = Wallet.objects.get(department=money.vision)
    go(submit, money.alice, gpus=1, max_runtime_s=3600)
    go(run_cycle)
    wallet.refresh_from_db()
    burn = reports.burn_rate(wallet=wallet)
    assert burn["running_per_hour"] == 1000
    assert burn["days_left_now"] == wallet.available // 24_000 == 4
    assert burn["days_left"] == 4


def test_the_home_and_wallet_pages_show_both_paces(money, fast, submit, go, client):
    go(submit, money.alice, gpus=1, max_runtime_s=3600)
    go(run_cycle)
    client.force_login(money.alice)
    for url in ("/", f"/budgets/{money.vision.slug}/"):
        body = client.get(url).content.decode()
        assert "at the current burn" in body and "at the 7-day average" in body, url
