"""The GPU-use collector: read each running attempt's series (and once more each attempt that just ended),
store its aggregates, flag idle jobs, learn from finished attempts.

Each run recomputes an attempt from its whole series, so a lost or repeated run changes nothing. A source that
does not answer (Prometheus down, a bad URL) is logged and counted (``portal_gpu_usage_read_failures_total``);
the attempts keep what they had, and the pages show "no data" until it answers again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from observability.models import AttemptUsage
from observability.services import idle, rightsizing, tensorboard
from observability.services.prometheus import PrometheusSource, PrometheusUnavailable
from observability.services.series import aggregate
from observability.services.simulated import SimulatedSource, profile_of
from portal import metrics
from scheduling.models import Job, JobEvent, JobKind, JobState
from scheduling.services import sessions
from scheduling.services.jobs import attempt_cluster, namespace_for
from scheduling.services.workload import readable_checkpoint

log = logging.getLogger(__name__)

READ_FAILURES = "portal_gpu_usage_read_failures_total"
# An ended attempt whose series could not be read for this long is closed with what it has.
GIVE_UP_AFTER = timedelta(hours=6)


def source():
    """Prometheus when configured; else the simulated cluster's own series; else none (no data)."""
    if settings.PROMETHEUS_URL:
        return PrometheusSource()
    if settings.SCHEDULING_BACKEND == "simulated":
        return SimulatedSource()
    return None


@dataclass
class Outcome:
    read: int = 0
    finalized: int = 0
    failed: int = 0
    flagged: int = 0
    stopped: int = 0


def collect(*, now: datetime | None = None, src=None) -> Outcome:
    now = now or timezone.now()
    src = src or source()
    out = Outcome()
    if src is None:
        return out
    running = list(Job.objects.filter(state=JobState.RUNNING, started_at__isnull=False)
                   .select_related("department", "flavor", "owner"))
    running_keys = {(j.pk, j.attempt) for j in running}
    for job in running:
        usage = _read(src, job=job, attempt=job.attempt, start=job.started_at, end=now, final=False, out=out)
        if usage is not None and job.checkpoint and not usage.tensorboard_note:
            announce_tensorboard(usage, job=job)
        if usage is not None:
            change = idle.check(usage=usage, job=job, now=now)
            out.flagged += change == "flagged"
            out.stopped += change == "stopped"
            if change != "stopped" and job.kind == JobKind.SESSION and usage.samples:
                # idle GPUs and no client connected (the route's forward auth records clients)
                out.stopped += sessions.stop_if_idle(job=job, gpu_idle_minutes=usage.idle_streak_minutes, now=now)
    # Attempts that ended since the last run: read once more up to their end, then close them.
    for usage in (AttemptUsage.objects.filter(final=False).select_related("job__department", "job__flavor",
                                                                           "job__owner")):
        if (usage.job_id, usage.attempt) in running_keys:
            continue
        job = usage.job
        end = attempt_ended_at(job, usage.attempt) or now
        fresh = _read(src, job=job, attempt=usage.attempt, start=usage.started_at, end=end, final=True, out=out)
        if fresh is None and now - end > GIVE_UP_AFTER:
            fresh = usage
            AttemptUsage.objects.filter(pk=usage.pk).update(ended_at=end)
            usage.ended_at = end
        if fresh is not None and AttemptUsage.objects.filter(pk=usage.pk, final=False).update(final=True):
            fresh.final = True
            out.finalized += 1
            read_tensorboard(fresh, job=job)
            succeeded = job.state == JobState.SUCCEEDED and job.attempt == usage.attempt
            rightsizing.learn(fresh, succeeded=succeeded)
    return out


def announce_tensorboard(usage: AttemptUsage, *, job: Job) -> None:
    """While an attempt runs, say once whether its TensorBoard logs will be read at its end, so a directory the
    portal cannot read shows on the job page from the start, not only once the job is gone."""
    directory, why = readable_checkpoint(job)
    if directory is None and not why:
        return
    usage.tensorboard_note = f"not read: {why}" if directory is None else "read from the checkpoint directory " \
        "when the attempt ends"
    AttemptUsage.objects.filter(pk=usage.pk).update(tensorboard_note=usage.tensorboard_note)


def read_tensorboard(usage: AttemptUsage, *, job: Job) -> None:
    """The peak GPU memory the attempt logged as a TensorBoard scalar into its job's checkpoint directory, read
    once, when the attempt ends (the files are complete then, and a running job's are not read every minute),
    or why it could not be: the job page says either, so a missing source is never a silent gap. A job without
    a checkpoint directory has nothing to read and nothing to say."""
    directory, why = readable_checkpoint(job)
    if directory is None and not why:
        return
    if directory is None:
        usage.tensorboard_peak_mib, usage.tensorboard_note = None, f"not read: {why}"
    elif not directory.is_dir():
        usage.tensorboard_peak_mib, usage.tensorboard_note = None, "no event files (its checkpoint directory is empty)"
    else:
        peak = tensorboard.peak_memory(directory)
        usage.tensorboard_peak_mib, usage.tensorboard_note = peak.peak_memory_mib, tensorboard.describe(peak)
    AttemptUsage.objects.filter(pk=usage.pk).update(tensorboard_peak_mib=usage.tensorboard_peak_mib,
                                                    tensorboard_note=usage.tensorboard_note)


def attempt_ended_at(job: Job, attempt: int) -> datetime | None:
    """When the attempt left running: the job's finish, or the transition that ended the attempt."""
    if job.attempt == attempt and job.finished_at:
        return job.finished_at
    return (JobEvent.objects.filter(job=job, attempt=attempt, kind="transition")
            .filter(Q(from_state=JobState.RUNNING) | Q(from_state=JobState.ADMITTED))
            .exclude(to_state=JobState.RUNNING).order_by("-at").values_list("at", flat=True).first())


def _read(src, *, job: Job, attempt: int, start: datetime, end: datetime, final: bool, out: Outcome):
    try:
        series = src.read(job=job, attempt=attempt, namespace=namespace_for(job.department.slug, attempt_cluster(job, attempt)),
                          start=start, end=end)
    except PrometheusUnavailable as exc:
        out.failed += 1
        log.warning("GPU use of job %s attempt %s not read: %s", job.pk, attempt, exc)
        metrics.add(READ_FAILURES, 1, source=src.name)
        return None
    agg = aggregate(series, idle_below_pct=idle.threshold_pct(job.tier), chart_points=AttemptUsage.SERIES_POINTS)
    out.read += 1
    fields = {
        "source": series.source or src.name, "profile": profile_of(job) if src.name == "simulated" else "",
        "gpus": job.total_gpus, "gpus_seen": agg.gpus_seen, "started_at": start,
        "ended_at": end if final else None, "step_s": series.step_s, "samples": agg.samples,
        "mean_util": agg.mean_util, "p95_util": agg.p95_util, "busy_gpus": agg.busy_gpus,
        "engine_active": agg.engine_active, "peak_memory_mib": agg.peak_memory_mib,
        "memory_total_mib": agg.memory_total_mib, "host_memory_peak_mib": series.host_memory_peak_mib,
        "shape": agg.shape, "idle_minutes": agg.idle_minutes, "idle_streak_minutes": agg.idle_streak_minutes,
        "series": agg.series, "collected_at": timezone.now(),
    }
    with transaction.atomic():
        usage, _ = AttemptUsage.objects.update_or_create(job=job, attempt=attempt, defaults=fields)
    return usage
