"""GPU use per job, read from a real Prometheus that scrapes a stand-in dcgm-exporter."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from observability.models import AttemptUsage
from observability.services import collect as collect_service
from observability.services.prometheus import PrometheusClient, PrometheusSource, PrometheusUnavailable
from portal.models import MetricValue
from scheduling.models import Job, JobState
from tests.conftest import job_payload

pytestmark = pytest.mark.django_db


def _running(lab, pk: int, *, gpus=2, name="resnet-50", started=None) -> Job:
    """A running job; ``pk`` differs per test, since one Prometheus keeps every test's series of the module."""
    body = job_payload(name=name, gpus=gpus)
    body.pop("flavor")
    body["gpus_per_pod"] = body.pop("gpus")
    return Job.objects.create(pk=pk, owner=lab.alice, department=lab.vision, flavor=lab.a100, state=JobState.RUNNING,
                              started_at=started or timezone.now() - timedelta(seconds=30), **body)


@pytest.fixture
def prom_settings(settings, prometheus):
    settings.PROMETHEUS_URL = prometheus.url
    settings.GPU_USAGE_STEP_S = 1
    settings.CONTAINER_MEMORY_METRIC = ""
    return settings


def test_a_job_holding_two_gpus_and_using_one_is_measured(lab, exporter, prometheus, prom_settings):
    job = _running(lab, 101, gpus=2)
    other = _running(lab, 102, gpus=1, name="other")  # a series of another pod must not be counted
    pod = f"job-{job.pk}-a1"
    with exporter.lock:
        exporter.gpus = [
            {"pod": pod, "namespace": "gpu-vision", "gpu": 0, "util": 90, "fb_used": 31744, "fb_free": 50176,
             "engine_active": 0.8},
            {"pod": pod, "namespace": "gpu-vision", "gpu": 1, "util": 0, "fb_used": 512, "fb_free": 81408,
             "engine_active": 0.0},
            {"pod": f"job-{other.pk}-a1", "namespace": "gpu-nlp", "gpu": 0, "util": 77, "fb_used": 1,
             "fb_free": 1},
        ]
    prometheus.wait_for(f'count_over_time(DCGM_FI_DEV_GPU_UTIL{{pod="{pod}"}}[1m]) >= 5', count=2)
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(seconds=6))
    out = collect_service.collect(src=PrometheusSource())
    assert out.failed == 0
    usage = AttemptUsage.objects.get(job=job, attempt=1)
    assert usage.source == "prometheus" and usage.gpus == 2 and usage.gpus_seen == 2
    assert usage.samples >= 5
    assert usage.mean_util == pytest.approx(45, abs=1)
    assert usage.busy_gpus == pytest.approx(0.9, abs=0.02)
    assert usage.peak_memory_mib == 31744
    assert usage.memory_total_mib == 81920
    assert usage.engine_active == pytest.approx(0.4, abs=0.01)
    assert 0 < len(usage.series) <= AttemptUsage.SERIES_POINTS
    assert usage.idle_minutes == 0 and usage.idle_flagged_at is None  # one GPU works: not idle
    # The other job's namespace differs from its department's: nothing of it is read as this job's.
    assert AttemptUsage.objects.get(job=other).samples == 0

    c = Client()
    c.force_login(lab.alice)
    body = c.get(f"/api/v1/jobs/{job.pk}/gpu-usage").json()
    assert body["has_data"] is True and body["attempts"][0]["busy_gpus"] == usage.busy_gpus
    page = c.get(f"/jobs/{job.pk}/").content.decode()
    assert 'id="gpu-usage"' in page and "0.9 of 2" in page and "<polyline" in page
    c.force_login(lab.bob)  # another department: the job does not exist for him
    assert c.get(f"/api/v1/jobs/{job.pk}/gpu-usage").status_code == 404


def test_an_attempt_that_ended_is_read_up_to_its_end_and_closed(lab, exporter, prometheus, prom_settings):
    job = _running(lab, 201, gpus=1, name="bert-base-3")
    pod = f"job-{job.pk}-a1"
    with exporter.lock:
        exporter.gpus = [{"pod": pod, "namespace": "gpu-vision", "gpu": 0, "util": 60, "fb_used": 1000,
                          "fb_free": 80920}]
    prometheus.wait_for(f'count_over_time(DCGM_FI_DEV_GPU_UTIL{{pod="{pod}"}}[1m]) >= 4')
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(seconds=4))
    collect_service.collect(src=PrometheusSource())
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, finished_at=timezone.now())
    out = collect_service.collect(src=PrometheusSource())
    usage = AttemptUsage.objects.get(job=job)
    assert out.finalized == 1 and usage.final and usage.ended_at is not None
    assert usage.mean_util == pytest.approx(60, abs=0.5)


def test_an_unreachable_prometheus_is_no_data_never_an_error(lab, settings, client):
    settings.PROMETHEUS_URL = "http://127.0.0.1:9"  # discard port: nothing listens
    settings.PROMETHEUS_TIMEOUT_S = 1
    job = _running(lab, 301)
    with pytest.raises(PrometheusUnavailable):
        PrometheusClient().query("up")
    out = collect_service.collect()
    assert out.failed == 1 and out.read == 0
    assert not AttemptUsage.objects.filter(job=job).exists()
    assert MetricValue.objects.get(name=collect_service.READ_FAILURES).value == 1
    client.force_login(lab.alice)
    page = client.get(f"/jobs/{job.pk}/")
    assert page.status_code == 200 and 'id="gpu-no-data"' in page.content.decode()
    assert client.get(f"/api/v1/jobs/{job.pk}/gpu-usage").json()["has_data"] is False
    assert "portal_gpu_usage_read_failures_total" in client.get("/metrics").content.decode()


def test_a_prometheus_error_answer_is_no_data(lab, prometheus, settings):
    settings.PROMETHEUS_URL = prometheus.url
    with pytest.raises(PrometheusUnavailable, match="HTTP 400"):
        PrometheusClient().query("this is not promql(")
