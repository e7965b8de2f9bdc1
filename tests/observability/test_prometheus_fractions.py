"""A fraction of a GPU shared through HAMi is measured from HAMi's per-container series, never from DCGM's
per-GPU figures (which count its neighbours): a real Prometheus scraping a stand-in exporter that serves both."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from observability.models import AttemptUsage
from observability.services import collect as collect_service
from observability.services.prometheus import PrometheusSource
from observability.services.rightsizing import fraction_fit
from quotas.models import GpuSharing
from scheduling.models import Job, JobState

pytestmark = pytest.mark.django_db

GIB = 2**30


@pytest.fixture
def hami(lab, settings, prometheus):
    lab.a100.sharing = GpuSharing.HAMI
    lab.a100.save()
    settings.PROMETHEUS_URL = prometheus.url
    settings.GPU_USAGE_STEP_S = 1
    settings.CONTAINER_MEMORY_METRIC = ""
    return lab


def _running(lab, pk: int, *, fraction_gib: int | None, name="notebook-1") -> Job:
    """A running job on the HAMi flavor, a fraction of ``fraction_gib`` GiB (None: one whole GPU); ``pk`` differs
    per test, since one Prometheus keeps every test's series of the module."""
    share = {"share_milli": fraction_gib * 1000 // 80, "gpu_memory_mib": fraction_gib * 1024} if fraction_gib else {}
    return Job.objects.create(pk=pk, owner=lab.alice, department=lab.vision, flavor=lab.a100, name=name,
                              kind="session", image="jupyter:1", command=["x"], gpus_per_pod=1,
                              state=JobState.RUNNING, started_at=timezone.now() - timedelta(seconds=30), **share)


def _serve(exporter, prometheus, job: Job, *, gpu: dict, vgpu: dict | None, metric: str, label: str = "podname"):
    """The GPU's DCGM series under the job's pod (dcgm-exporter names one pod of a shared GPU), and the job's
    container's HAMi series; wait until five samples of ``metric`` for the pod landed."""
    pod = f"job-{job.pk}-a1"
    with exporter.lock:
        exporter.gpus = [{"pod": pod, "namespace": "gpu-vision", "gpu": 0, **gpu}]
        exporter.vgpus = [] if vgpu is None else [
            {"pod": pod, "namespace": "gpu-vision", "container": "main", "vdevice": 0, "uuid": "GPU-7f3a", **vgpu}]
    prometheus.wait_for(f'count_over_time({metric}{{{label}="{pod}"}}[1m]) >= 5')
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(seconds=6))


# The GPU the fraction shares: a neighbour keeps it 95% busy and holds 70 GB of it.
BUSY_GPU = {"util": 95, "fb_used": 70 * 1024, "fb_free": 10 * 1024}
IDLE_NOTEBOOK = {"util": 1, "used_bytes": 6 * GIB, "limit_bytes": 20 * GIB}


def test_a_fraction_is_measured_by_its_own_container_not_by_its_busy_gpu(hami, exporter, prometheus, client):
    job = _running(hami, 401, fraction_gib=20)
    _serve(exporter, prometheus, job, gpu=BUSY_GPU, vgpu=IDLE_NOTEBOOK, metric="Device_utilization_desc_of_container")
    out = collect_service.collect(src=PrometheusSource())
    assert out.failed == 0
    usage = AttemptUsage.objects.get(job=job, attempt=1)
    assert usage.source == "hami" and usage.gpus_seen == 1 and usage.samples >= 5
    assert usage.mean_util == pytest.approx(1, abs=0.01) and usage.busy_gpus == pytest.approx(0.01, abs=0.001)
    assert usage.peak_memory_mib == 6 * 1024  # its own 6 GiB, not the GPU's 70
    assert usage.memory_total_mib == 20 * 1024  # its fraction's memory, HAMi's limit
    assert usage.idle_minutes > 0  # idle while its GPU is busy: DCGM's 95% would never have shown it
    # the right-sizer sizes it from its own use: 6 GiB x1.2 -> 8 GiB, a tenth of the GPU
    fit = fraction_fit(peak_memory_mib=usage.peak_memory_mib, busy_gpus=usage.busy_gpus, gpus_held=1,
                       flavor=hami.a100)
    assert (fit.gpu_memory_gib, fit.share) == (8, 0.1)
    client.force_login(hami.alice)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert "(hami;" in page  # the job page says where its figures came from
    assert "(it holds 0.25 GPU (20 GiB)" in page


def test_a_whole_gpu_on_the_same_flavor_is_still_read_from_dcgm(hami, exporter, prometheus):
    job = _running(hami, 402, fraction_gib=None, name="train-1")
    _serve(exporter, prometheus, job, gpu=BUSY_GPU, vgpu=None, metric="DCGM_FI_DEV_GPU_UTIL", label="pod")
    collect_service.collect(src=PrometheusSource())
    usage = AttemptUsage.objects.get(job=job, attempt=1)
    assert usage.source == "prometheus"
    assert usage.mean_util == pytest.approx(95, abs=0.5) and usage.peak_memory_mib == 70 * 1024


def test_hamis_newer_metric_names_are_a_setting(hami, exporter, prometheus, settings):
    settings.HAMI_METRICS = {"util": "hami_container_device_utilization_ratio",
                             "memory_used": "hami_vgpu_memory_used_bytes",
                             "memory_limit": "hami_vgpu_memory_limit_bytes"}
    settings.HAMI_POD_LABEL, settings.HAMI_NAMESPACE_LABEL = "pod", "namespace"
    job = _running(hami, 403, fraction_gib=20)
    _serve(exporter, prometheus, job, gpu=BUSY_GPU, vgpu={**IDLE_NOTEBOOK, "util": 30},
           metric="hami_container_device_utilization_ratio", label="pod")
    collect_service.collect(src=PrometheusSource())
    usage = AttemptUsage.objects.get(job=job, attempt=1)
    assert usage.source == "hami" and usage.mean_util == pytest.approx(30, abs=0.5)
    assert (usage.peak_memory_mib, usage.memory_total_mib) == (6 * 1024, 20 * 1024)


def test_a_fraction_whose_container_reported_nothing_has_no_data_not_its_gpus_figures(hami, exporter, prometheus):
    # HAMi writes a container's series only once it has touched CUDA: until then the job has no data
    job = _running(hami, 404, fraction_gib=20)
    _serve(exporter, prometheus, job, gpu=BUSY_GPU, vgpu=None, metric="DCGM_FI_DEV_GPU_UTIL", label="pod")
    collect_service.collect(src=PrometheusSource())
    usage = AttemptUsage.objects.get(job=job, attempt=1)
    assert usage.source == "hami" and usage.samples == 0 and usage.mean_util is None
    assert usage.idle_flagged_at is None
    c = Client()
    c.force_login(hami.alice)
    assert c.get(f"/api/v1/jobs/{job.pk}/gpu-usage").json()["has_data"] is False
