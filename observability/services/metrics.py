"""The GPU-use, idle and queue series of ``/metrics``, read from the database at scrape time (the collector
runs in Celery workers, which nothing scrapes). Names are listed in docs/operations.md and used by the alert
rules in deploy/monitoring."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta

from django.db.models import F, Min, Sum
from django.utils import timezone
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

from observability.models import AttemptUsage
from observability.services.collect import READ_FAILURES
from observability.services.idle import FLAGGED, STOPPED
from portal.metrics import ScrapeCollector, stored
from scheduling.models import ACTIVE_STATES, TOTAL_GPUS, Job, JobState, PreemptionVictim

WAIT_WINDOW = timedelta(hours=1)


class GpuUseCollector(ScrapeCollector):
    what = "GPU-use metrics"

    def _collect(self):
        now = timezone.now()
        util = GaugeMetricFamily("portal_gpu_utilization_percent", "Mean GPU utilisation of running jobs, "
                                 "weighted by their GPUs (dcgm-exporter through Prometheus, or the simulator).",
                                 labels=["department"])
        busy = GaugeMetricFamily("portal_gpu_busy_gpus", "GPUs' worth of work done by running jobs (sum of "
                                 "utilisation / 100).", labels=["department"])
        held = GaugeMetricFamily("portal_gpu_measured_gpus", "GPUs of running jobs whose use is measured.",
                                 labels=["department"])
        memory = GaugeMetricFamily("portal_gpu_memory_peak_mib", "Highest GPU memory used by one GPU of a running "
                                   "job.", labels=["department"])
        pressure = GaugeMetricFamily("portal_gpu_memory_pressure_ratio", "Highest share of one GPU's memory in "
                                     "use by a running job (1: full).", labels=["department"])
        idle_gpus = GaugeMetricFamily("portal_idle_gpus", "GPUs held by running jobs flagged idle.",
                                      labels=["department", "tier"])
        idle_jobs = GaugeMetricFamily("portal_idle_jobs", "Running jobs flagged idle.", labels=["department", "tier"])
        per_dept: dict[str, dict] = {}
        idle: dict[tuple[str, str], list[int]] = {}
        for slug, tier, gpus, mean, busy_gpus, peak, total, flagged in (
                AttemptUsage.objects.filter(final=False, job__state=JobState.RUNNING, attempt=F("job__attempt"),
                                            samples__gt=0)
                .values_list("job__department__slug", "job__tier", "gpus", "mean_util", "busy_gpus",
                             "peak_memory_mib", "memory_total_mib", "idle_flagged_at")):
            d = per_dept.setdefault(slug, {"gpus": 0, "util": 0.0, "busy": 0.0, "peak": 0.0, "ratio": 0.0})
            d["gpus"] += gpus
            d["util"] += (mean or 0) * gpus
            d["busy"] += busy_gpus or 0
            d["peak"] = max(d["peak"], peak or 0)
            if peak and total:
                d["ratio"] = max(d["ratio"], peak / total)
            if flagged:
                entry = idle.setdefault((slug, tier), [0, 0])
                entry[0] += gpus
                entry[1] += 1
        for slug, d in sorted(per_dept.items()):
            util.add_metric([slug], d["util"] / d["gpus"] if d["gpus"] else 0)
            busy.add_metric([slug], d["busy"])
            held.add_metric([slug], d["gpus"])
            memory.add_metric([slug], d["peak"])
            pressure.add_metric([slug], d["ratio"])
        for (slug, tier), (gpus, jobs) in sorted(idle.items()):
            idle_gpus.add_metric([slug, tier], gpus)
            idle_jobs.add_metric([slug, tier], jobs)
        yield from (util, busy, held, memory, pressure, idle_gpus, idle_jobs)

        for name, doc, label in ((READ_FAILURES, "GPU-use reads that failed (Prometheus unreachable or erring).",
                                  "source"),
                                 (FLAGGED, "Running jobs flagged idle.", "tier"),
                                 (STOPPED, "Idle jobs stopped by the per-tier idle policy.", "tier")):
            family = CounterMetricFamily(name.removesuffix("_total"), doc, labels=[label])
            for labels, value in stored(name):
                family.add_metric([labels.get(label, "")], value)
            yield family

        # The queue, as custom metrics for autoscalers (prometheus-adapter) and for the realtime-start alert (a
        # job still waiting is in no histogram yet: portal_queue_wait_seconds is observed at admission).
        pending = GaugeMetricFamily("portal_queue_pending_gpus", "GPUs asked for by queued jobs, per queue (flavor)"
                                    " and tier.", labels=["queue", "tier"])
        for flavor, tier, n in (Job.objects.filter(state=JobState.QUEUED).values_list("flavor__name", "tier")
                                .annotate(n=Sum(TOTAL_GPUS)).order_by("flavor__name", "tier")):
            pending.add_metric([flavor, tier], n or 0)
        yield pending
        oldest = GaugeMetricFamily("portal_queue_oldest_wait_seconds", "How long the longest-waiting queued job "
                                   "has waited, per tier.", labels=["tier"])
        firsts: dict[str, object] = {}
        for tier, queued_at, submitted_at in Job.objects.filter(state=JobState.QUEUED).values_list(
                "tier", "queued_at", "submitted_at"):
            since = queued_at or submitted_at
            if tier not in firsts or since < firsts[tier]:
                firsts[tier] = since
        for tier, since in sorted(firsts.items()):
            oldest.add_metric([tier], max(0.0, (now - since).total_seconds()))
        yield from (oldest, _not_started(now))
        victims = GaugeMetricFamily("portal_preemption_victims_recent", "Preemption victims decided in the last "
                                    "hour, by status (blocked: a PodDisruptionBudget refused the eviction).",
                                    labels=["status"])
        for status in PreemptionVictim.Status.values:
            victims.add_metric([status], PreemptionVictim.objects.filter(
                status=status, preemption__decided_at__gte=now - WAIT_WINDOW).count())
        yield victims
        yield from _shared_gpus()


def _shared_gpus() -> tuple[GaugeMetricFamily, GaugeMetricFamily, GaugeMetricFamily]:
    """GPUs shared by fractions (docs/fractions.md), per flavor: how many GPUs hold fractions, the share of
    them in use (GPUs' worth, from the fractions' shares) and how many fractional pods run on them."""
    shared = GaugeMetricFamily("portal_gpus_shared", "GPUs holding fractions of admitted and running jobs, per "
                               "flavor (not free to whole-GPU jobs).", labels=["flavor"])
    used = GaugeMetricFamily("portal_gpus_shared_used", "GPUs' worth of the shared GPUs in use by fractions, per "
                             "flavor (the fractions' shares added up).", labels=["flavor"])
    pods = GaugeMetricFamily("portal_fractional_pods", "Pods of admitted and running jobs holding a fraction of a "
                             "GPU, per flavor.", labels=["flavor"])
    gpus: dict[str, set] = defaultdict(set)
    use: dict[str, float] = defaultdict(float)
    count: dict[str, int] = defaultdict(int)
    for flavor, cluster, placement, devices, milli in Job.objects.filter(
            state__in=ACTIVE_STATES, share_milli__gt=0).values_list(
            "flavor__name", "cluster_id", "placement", "gpu_devices", "share_milli"):
        for node, device in zip(placement or (), devices or (), strict=False):
            gpus[flavor].add((cluster, node, device))
            use[flavor] += milli / 1000
            count[flavor] += 1
    for flavor in sorted(gpus):
        shared.add_metric([flavor], len(gpus[flavor]))
        used.add_metric([flavor], round(use[flavor], 3))
        pods.add_metric([flavor], count[flavor])
    return shared, used, pods


def _not_started(now) -> GaugeMetricFamily:
    """An admitted job holds its GPUs and quota until its pods start: the longest such wait, for the
    PortalAdmittedJobNotStarted alert (0 when every admitted job has started)."""
    admitted = Job.objects.filter(state=JobState.ADMITTED).aggregate(m=Min("admitted_at"))["m"]
    family = GaugeMetricFamily("portal_admitted_not_started_oldest_seconds", "How long the job admitted longest "
                               "ago whose pods have not started has waited since its admission.")
    family.add_metric([], max(0.0, (now - admitted).total_seconds()) if admitted else 0.0)
    return family
