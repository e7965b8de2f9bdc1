"""The simulated cluster's GPU series, and idle-GPU detection (flag, clear, stop by policy) on top of them."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from observability.models import AttemptUsage
from observability.services import collect as collect_service
from observability.services.series import GpuSeries, aggregate, downsample, percentile
from observability.services.simulated import SimulatedSource, profile_of
from portal.models import AuditEntry
from scheduling.models import Job, JobEvent, JobState

pytestmark = pytest.mark.django_db


def _running(lab, *, profile="busy", gpus=1, tier="elastic", minutes=60, name="resnet-50") -> Job:
    return Job.objects.create(owner=lab.alice, department=lab.vision, flavor=lab.a100, name=name, image="img",
                              command=["x"], gpus_per_pod=gpus, tier=tier, state=JobState.RUNNING,
                              env={"SIM_GPU_PROFILE": profile} if profile else {},
                              started_at=timezone.now() - timedelta(minutes=minutes))


@pytest.fixture(autouse=True)
def _sim(settings):
    settings.PROMETHEUS_URL = ""
    settings.SCHEDULING_BACKEND = "simulated"
    settings.SIM_SPEEDUP = 1  # real minutes are simulated minutes: easier to read
    settings.IDLE_GPU_THRESHOLD_PCT = {"realtime": 5.0, "elastic": 5.0, "backfill": 5.0}
    settings.IDLE_GPU_MINUTES = {"realtime": 30.0, "elastic": 30.0, "backfill": 20.0}
    settings.IDLE_STOP_GRACE_MINUTES = {}


def test_pure_arithmetic():
    assert percentile([], 95) is None
    assert percentile(list(range(1, 101)), 95) == 95
    s = GpuSeries(step_s=60, util={"a": {0: 0, 60: 2, 120: 50, 180: 1, 240: 3}, "b": {0: 0, 60: 0, 120: 0,
                                                                                    180: 0, 240: 0}})
    agg = aggregate(s, idle_below_pct=5)
    assert agg.samples == 5 and agg.gpus_seen == 2
    assert agg.idle_minutes == 4 and agg.idle_streak_minutes == 2  # the sample at 120 s worked
    assert agg.busy_gpus == pytest.approx(56 / 100 / 5, abs=0.005)  # stored to 2 decimals
    assert len(downsample([(i, 1.0, float(i)) for i in range(1000)], 120)) <= 120
    assert downsample([(0, 10.0, 1.0), (1, 30.0, 5.0)], 1) == [[0, 20.0, 5.0]]  # mean util, peak memory


@pytest.mark.parametrize(("profile", "low", "high"), [("busy", 85, 100), ("idle", 0, 3), ("sawtooth", 35, 70),
                                                       ("memory", 25, 45)])
def test_each_simulated_profile_looks_like_its_name(lab, profile, low, high):
    job = _running(lab, profile=profile)
    s = SimulatedSource().read(job=job, attempt=1, namespace="gpu-vision", start=job.started_at,
                               end=timezone.now())
    agg = aggregate(s, idle_below_pct=5)
    assert low <= agg.mean_util <= high, agg
    if profile == "sawtooth":
        assert agg.shape["swings"] >= 10
    if profile == "memory":
        assert agg.peak_memory_mib > 0.95 * agg.memory_total_mib
    again = SimulatedSource().read(job=job, attempt=1, namespace="gpu-vision", start=job.started_at,
                                   end=job.started_at + timedelta(minutes=60))
    assert again.util == SimulatedSource().read(job=job, attempt=1, namespace="gpu-vision", start=job.started_at,
                                                end=job.started_at + timedelta(minutes=60)).util  # deterministic


def test_the_profile_comes_from_env_then_name(lab):
    assert profile_of(_running(lab, profile="sawtooth")) == "sawtooth"
    assert profile_of(_running(lab, profile=None, name="jupyter-notebook")) == "idle"


def test_an_idle_job_is_flagged_once_on_its_timeline_page_api_and_metrics(lab):
    job = _running(lab, profile="idle", gpus=2, minutes=45)
    busy = _running(lab, profile="busy", minutes=45)
    out = collect_service.collect()
    assert out.read == 2 and out.flagged == 1
    usage = AttemptUsage.objects.get(job=job)
    assert usage.idle and usage.idle_streak_minutes >= 30
    assert not AttemptUsage.objects.get(job=busy).idle
    events = JobEvent.objects.filter(job=job, kind="idle")
    assert [e.reason_code for e in events] == ["gpu_idle"]
    collect_service.collect()  # still idle: not flagged twice
    assert JobEvent.objects.filter(job=job, kind="idle").count() == 1
    # the owner is told through the notifications outbox, once
    from notifications.models import Event

    [told] = Event.objects.filter(kind="job.idle")
    assert told.user_ids == [lab.alice.pk] and told.data["job_id"] == job.pk and told.data["gpus"] == 2

    c = Client()
    c.force_login(lab.alice)
    assert c.get(f"/api/v1/jobs/{job.pk}/gpu-usage").json()["idle"] is True
    assert 'id="gpu-idle"' in c.get(f"/jobs/{job.pk}/").content.decode()
    metrics = c.get("/metrics").content.decode()
    assert 'portal_idle_gpus{department="vision",tier="elastic"} 2.0' in metrics
    assert 'portal_idle_jobs_flagged_total{tier="elastic"} 1.0' in metrics
    assert 'portal_gpu_utilization_percent{department="vision"}' in metrics


def test_a_short_idle_spell_is_not_flagged_and_the_threshold_is_per_tier(lab, settings):
    job = _running(lab, profile="idle", minutes=25, tier="elastic")
    backfill = _running(lab, profile="idle", minutes=25, tier="backfill")
    collect_service.collect()
    assert not AttemptUsage.objects.get(job=job).idle
    assert AttemptUsage.objects.get(job=backfill).idle  # backfill: 20 minutes


def test_the_stop_policy_is_off_by_default_and_stops_idle_backfill_after_its_grace(lab, settings):
    job = _running(lab, profile="idle", minutes=45, tier="backfill")
    collect_service.collect()
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING  # off by default
    settings.IDLE_STOP_GRACE_MINUTES = {"backfill": 60.0}
    collect_service.collect()
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING  # 45 < 20 + 60
    settings.IDLE_STOP_GRACE_MINUTES = {"backfill": 15.0}
    out = collect_service.collect()
    job.refresh_from_db()
    assert out.stopped == 1 and job.state == JobState.CANCELLED
    entry = AuditEntry.objects.get(action="job.stop_idle")
    assert entry.object_id == str(job.pk) and "idle-GPU policy" in entry.comment
    assert job.events.filter(to_state=JobState.CANCELLED, actor__isnull=True).exists()


def test_a_job_that_works_again_is_cleared(lab):
    job = _running(lab, profile="idle", minutes=45)
    collect_service.collect()
    Job.objects.filter(pk=job.pk).update(env={"SIM_GPU_PROFILE": "busy"})
    collect_service.collect()
    assert not AttemptUsage.objects.get(job=job).idle
    assert list(JobEvent.objects.filter(job=job, kind="idle").values_list("reason_code", flat=True)) == [
        "gpu_idle", "gpu_busy_again"]


def test_no_source_means_no_data(lab, settings):
    settings.SCHEDULING_BACKEND = "kubernetes"
    _running(lab)
    assert collect_service.collect().read == 0
    assert not AttemptUsage.objects.exists()


def test_the_beat_runs_the_collector(settings):
    from portal.celery import app

    entry = settings.CELERY_BEAT_SCHEDULE["observability-collect"]
    assert entry["task"] == "observability.collect" and entry["task"] in app.tasks


def test_a_per_tier_setting_naming_no_tier_fails_the_start_up_check(settings):
    from observability.checks import per_tier_settings

    settings.IDLE_GPU_MINUTES = {"*": 30.0}
    assert per_tier_settings(None) == []
    settings.IDLE_GPU_MINUTES = {"realtim": 30.0, "*": 10.0}
    (error,) = per_tier_settings(None)
    assert error.id == "observability.E001" and "realtim" in error.msg and "IDLE_GPU_MINUTES" in error.msg


def test_the_star_value_applies_to_every_tier_not_named(settings):
    from observability.services import idle

    settings.IDLE_STOP_GRACE_MINUTES = {"backfill": 15.0}
    assert idle.stop_grace("backfill") == 15.0 and idle.stop_grace("elastic") is None
    settings.IDLE_GPU_MINUTES = {"realtime": 60.0, "*": 10.0}
    assert idle.minutes("realtime") == 60.0 and idle.minutes("backfill") == 10.0


def test_a_fractional_pod_reports_its_part_of_the_gpu_and_is_flagged_idle_as_a_whole_gpu(lab):
    """A notebook on 20 GiB and 30% of a shared A100: its series' memory is its 20 GiB (the sharing layer's
    per-container limit), its use never passes its compute share, and idle detection flags it as it would a
    whole GPU."""
    nb = _running(lab, profile="idle", minutes=45, name="notebook-1")
    nb.gpu_memory_mib, nb.gpu_cores, nb.share_milli = 20 * 1024, 30, 300
    nb.save()
    busy = _running(lab, profile="busy", minutes=45)
    busy.gpu_memory_mib, busy.gpu_cores, busy.share_milli = 20 * 1024, 30, 300
    busy.save()
    agg = aggregate(SimulatedSource().read(job=nb, attempt=1, namespace="gpu-vision", start=nb.started_at,
                                           end=timezone.now()), idle_below_pct=5)
    assert agg.memory_total_mib == 20 * 1024 and agg.peak_memory_mib == pytest.approx(0.08 * 20 * 1024, abs=1)
    capped = SimulatedSource().read(job=busy, attempt=1, namespace="gpu-vision", start=busy.started_at,
                                    end=timezone.now())
    assert max(v for series in capped.util.values() for v in series.values()) <= 30
    collect_service.collect()
    assert AttemptUsage.objects.get(job=nb).idle and not AttemptUsage.objects.get(job=busy).idle
