"""Logs that outlive their pods: the tail of every attempt's log is kept when the attempt ends, read from
the cluster while it runs, and deleted after a retention period.

How much and how long: the last ``LOG_KEEP_KB`` KiB of the log of each pod of each attempt, for
``LOG_RETENTION_DAYS`` days after the attempt ended (docs/operations.md, "Job logs").
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from scheduling.backends import get_backend
from scheduling.backends.base import BackendError
from scheduling.models import AttemptLog, Job, JobState
from scheduling.services.jobs import attempt_cluster, namespace_for

log = logging.getLogger(__name__)

# Lines asked of the cluster when an attempt ends; the kept text is then cut to LOG_KEEP_KB.
FETCH_LINES = 100_000
LIVE_STATES = (JobState.QUEUED, JobState.ADMITTED, JobState.RUNNING)


def tail_bytes(lines: list[str], limit: int) -> tuple[str, bool]:
    """The last ``limit`` bytes (UTF-8) of ``lines`` joined by newlines, cut at a line start; and whether
    anything was cut."""
    text = "\n".join(line.rstrip("\n") for line in lines)
    data = text.encode("utf-8")
    if len(data) <= limit:
        return text, False
    kept = data[-limit:].decode("utf-8", errors="ignore")
    newline = kept.find("\n")
    return (kept[newline + 1:] if newline >= 0 else kept), True


def is_live(job: Job, attempt: int) -> bool:
    return job.attempt == attempt and job.state in LIVE_STATES


def _backend_lines(job: Job, attempt: int, *, tail: int, follow: bool = False, pod: int = 0) -> Iterator[str]:
    cluster = attempt_cluster(job, attempt)  # a requeued job's earlier attempt may have run elsewhere
    backend = get_backend(cluster if cluster is not None else "default")
    return backend.logs(job_id=job.pk, attempt=attempt, namespace=namespace_for(job.department.slug, cluster),
                        tail_lines=tail, follow=follow, pod=pod)


def keep_attempt_log(*, job_id: int, attempt: int) -> AttemptLog | None:
    """Store the tail of each pod's log of an ended attempt (idempotent: a kept log is not read again). Returns
    pod 0's; None when the attempt is still live, the job is gone, or the cluster has no log for pod 0 (never
    started, pods gone)."""
    job = Job.objects.select_related("department", "cluster").filter(pk=job_id).first()
    if job is None or is_live(job, attempt):
        return None
    kept = {row.pod: row for row in AttemptLog.objects.filter(job_id=job_id, attempt=attempt)}
    for pod in range(job.pods):
        if pod not in kept:
            row = _keep_pod_log(job, attempt, pod)
            if row is not None:
                kept[pod] = row
    return kept.get(0)


def _keep_pod_log(job: Job, attempt: int, pod: int) -> AttemptLog | None:
    try:
        lines = list(_backend_lines(job, attempt, tail=FETCH_LINES, pod=pod))
    except BackendError as exc:
        log.info("job %s attempt %s pod %s: no log to keep (%s)", job.pk, attempt, pod, exc)
        return None
    if not lines:
        return None
    text, truncated = tail_bytes(lines, settings.LOG_KEEP_KB * 1024)
    try:
        with transaction.atomic():
            return AttemptLog.objects.create(job=job, attempt=attempt, pod=pod, text=text, truncated=truncated)
    except IntegrityError:  # kept meanwhile by another task (the delete and the finish both keep it)
        return AttemptLog.objects.filter(job_id=job.pk, attempt=attempt, pod=pod).first()


def attempt_log_lines(*, job: Job, attempt: int, tail: int, follow: bool = False,
                      pod: int = 0) -> tuple[Iterator[str], str]:
    """The log lines of the attempt's pod ``pod`` and where they come from: ``live`` (the cluster, followed when
    asked), ``kept`` (stored when the attempt ended), ``cluster`` (ended, not kept yet, its pods still there) or
    ``none``. Raises BackendError only for a live attempt the cluster cannot answer for."""
    if is_live(job, attempt):
        return _backend_lines(job, attempt, tail=tail, follow=follow, pod=pod), "live"
    kept = AttemptLog.objects.filter(job=job, attempt=attempt, pod=pod).first()
    if kept is not None:
        return iter(kept.text.splitlines()[-tail:]), "kept"
    try:
        lines = list(_backend_lines(job, attempt, tail=tail, pod=pod))
    except BackendError:
        lines = []
    return iter(lines), ("cluster" if lines else "none")


def cleanup_logs(*, now: datetime | None = None) -> int:
    """Delete kept logs older than LOG_RETENTION_DAYS; returns how many."""
    horizon = (now or timezone.now()) - timedelta(days=settings.LOG_RETENTION_DAYS)
    deleted, _ = AttemptLog.objects.filter(kept_at__lt=horizon).delete()
    return deleted
