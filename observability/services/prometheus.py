"""Prometheus's HTTP API (``/api/v1/query_range``) read for dcgm-exporter's series of one attempt's pods.

dcgm-exporter labels each GPU's series with the pod and namespace that hold it (its Kubernetes mapping); the
label names and metric names are configuration (Prometheus may rename them to ``exported_pod`` ...). An
attempt's pods are ``job-<id>-a<attempt>`` or ``job-<id>-a<attempt>-<index>`` in the department's namespace.

A fraction of a GPU shared through HAMi is read from HAMi's per-container series instead (``HAMI_METRICS``):
DCGM's figures are the whole GPU's, its neighbours' use included, so a busy neighbour would hide an idle
notebook and swell its recommended size. HAMi reports, per container and vGPU, the utilisation (of the whole
GPU, 0-100), the memory in use and the memory limit (bytes); the limit is the fraction's memory, so the job's
"memory total" is its own part of the GPU.
"""

from __future__ import annotations

import logging
import math
import re
from datetime import datetime

import requests
from django.conf import settings

from engine.fractions import HAMI
from observability.services.series import GpuSeries

log = logging.getLogger(__name__)


# What an attempt read from HAMi's series records as its source (AttemptUsage.source), apart from DCGM's.
HAMI_SOURCE = "hami"


class PrometheusUnavailable(Exception):
    """Prometheus did not answer, or answered with an error: the caller shows "no data"."""


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"')


def pod_regex(job_id: int, attempt: int) -> str:
    return f"job-{int(job_id)}-a{int(attempt)}(-[0-9]+)?"


def selector(*, namespace: str, job_id: int, attempt: int, pod_label: str | None = None,
             namespace_label: str | None = None) -> str:
    pod_label = pod_label or settings.DCGM_POD_LABEL
    namespace_label = namespace_label or settings.DCGM_NAMESPACE_LABEL
    return f'{{{namespace_label}="{_quote(namespace)}",{pod_label}=~"{pod_regex(job_id, attempt)}"}}'


class PrometheusClient:
    def __init__(self, url: str | None = None, timeout_s: float | None = None):
        self.url = (url if url is not None else settings.PROMETHEUS_URL).rstrip("/")
        self.timeout_s = timeout_s or settings.PROMETHEUS_TIMEOUT_S

    def query_range(self, query: str, *, start: float, end: float, step_s: int) -> list[dict]:
        """The ``result`` of a range query: [{"metric": {labels}, "values": [[t, "v"], ...]}, ...]."""
        return self._get("/api/v1/query_range", {"query": query, "start": f"{start:.3f}", "end": f"{end:.3f}",
                                                  "step": f"{step_s}s"})

    def query(self, query: str, *, at: float | None = None) -> list[dict]:
        params = {"query": query} | ({"time": f"{at:.3f}"} if at is not None else {})
        return self._get("/api/v1/query", params)

    def _get(self, path: str, params: dict) -> list[dict]:
        if not self.url:
            raise PrometheusUnavailable("PROMETHEUS_URL is not set")
        try:
            resp = requests.get(self.url + path, params=params, timeout=self.timeout_s)
            body = resp.json()
        except (requests.RequestException, ValueError) as exc:
            raise PrometheusUnavailable(f"{self.url}: {exc.__class__.__name__}: {exc}") from exc
        if resp.status_code != 200 or body.get("status") != "success":
            raise PrometheusUnavailable(f"{self.url}: HTTP {resp.status_code}: {body.get('error', '')[:200]}")
        return body["data"]["result"]


def step_for(duration_s: float) -> int:
    """The query's step: the configured resolution, coarser for long attempts (at most ~1000 samples)."""
    return max(int(settings.GPU_USAGE_STEP_S), math.ceil(duration_s / 1000))


def reads_hami(job) -> bool:
    """Whether ``job``'s own use is in HAMi's per-container series: a fraction on a flavor HAMi shares, with the
    series configured."""
    flavor = getattr(job, "flavor", None)
    return bool(job.share_milli) and getattr(flavor, "sharing", "") == HAMI and bool(settings.HAMI_METRICS["util"])


class PrometheusSource:
    name = "prometheus"

    def __init__(self, client: PrometheusClient | None = None):
        self.client = client or PrometheusClient()

    def read(self, *, job, attempt: int, namespace: str, start: datetime, end: datetime) -> GpuSeries:
        t0, t1 = start.timestamp(), end.timestamp()
        step = step_for(t1 - t0)
        t1 = max(t1, t0 + step)
        if reads_hami(job):
            out = self._read_hami(job=job, attempt=attempt, namespace=namespace, t0=t0, t1=t1, step=step)
        else:
            out = self._read_dcgm(job=job, attempt=attempt, namespace=namespace, t0=t0, t1=t1, step=step)
        if settings.CONTAINER_MEMORY_METRIC:
            sel = selector(namespace=namespace, job_id=job.pk, attempt=attempt)
            peaks = [float(v) for series in self.client.query_range(
                f'max({settings.CONTAINER_MEMORY_METRIC}{sel})', start=t0, end=t1, step_s=step)
                for _, v in series["values"] if _finite(v)]
            out.host_memory_peak_mib = round(max(peaks) / 2**20, 1) if peaks else None
        return out

    def _read_hami(self, *, job, attempt: int, namespace: str, t0: float, t1: float, step: int) -> GpuSeries:
        sel = selector(namespace=namespace, job_id=job.pk, attempt=attempt, pod_label=settings.HAMI_POD_LABEL,
                       namespace_label=settings.HAMI_NAMESPACE_LABEL)
        out = GpuSeries(step_s=step, source=HAMI_SOURCE)
        metrics = settings.HAMI_METRICS

        def series_of(metric: str, scale: float = 1.0) -> dict[str, dict[int, float]]:
            found: dict[str, dict[int, float]] = {}
            if not metric:
                return found
            for series in self.client.query_range(metric + sel, start=t0, end=t1, step_s=step):
                found[_hami_key(series["metric"])] = {
                    int(round(float(t) - t0)): float(v) * scale for t, v in series["values"] if _finite(v)}
            return found

        out.util = series_of(metrics["util"])
        out.fb_used = series_of(metrics["memory_used"], 1 / 2**20)
        limits = series_of(metrics["memory_limit"], 1 / 2**20)
        out.fb_free = {key: {t: max(0.0, limit[t] - used[t]) for t in used if t in limit}
                       for key, used in out.fb_used.items() if (limit := limits.get(key))}
        return out

    def _read_dcgm(self, *, job, attempt: int, namespace: str, t0: float, t1: float, step: int) -> GpuSeries:
        sel = selector(namespace=namespace, job_id=job.pk, attempt=attempt)
        out = GpuSeries(step_s=step)
        metrics = settings.DCGM_METRICS
        for field, metric in (("util", metrics["util"]), ("fb_used", metrics["fb_used"]),
                              ("fb_free", metrics["fb_free"]), ("engine_active", metrics["engine_active"])):
            if not metric:
                continue
            for series in self.client.query_range(metric + sel, start=t0, end=t1, step_s=step):
                getattr(out, field)[_gpu_key(series["metric"])] = {
                    int(round(float(t) - t0)): float(v) for t, v in series["values"] if _finite(v)}
        return out


def _finite(v) -> bool:
    try:
        return math.isfinite(float(v))
    except ValueError:
        return False


_SAFE = re.compile(r"[^\w.:/-]")


def _gpu_key(labels: dict) -> str:
    pod = labels.get(settings.DCGM_POD_LABEL, "?")
    gpu = labels.get("gpu") or labels.get("UUID") or labels.get("device") or labels.get("instance", "?")
    return _SAFE.sub("_", f"{pod}/{gpu}")


def _hami_key(labels: dict) -> str:
    """pod/container/vGPU of one HAMi series (the long-standing label names, then the hami_* ones)."""
    pod = labels.get(settings.HAMI_POD_LABEL, "?")
    container = labels.get("ctrname") or labels.get("container") or "?"
    gpu = labels.get("vdeviceid") or labels.get("vdevice_index") or labels.get("deviceuuid") \
        or labels.get("device_uuid") or "?"
    return _SAFE.sub("_", f"{pod}/{container}/{gpu}")
