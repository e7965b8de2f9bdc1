"""Logs that outlive their pods: the tail of every attempt's log is kept when the attempt ends, read from
the cluster while it runs, and deleted after a retention period.

How much and how long: the last ``LOG_KEEP_KB`` KiB of the log of each pod of each attempt, for
``LOG_RETENTION_DAYS`` days after the attempt ended (docs/operations.md, "Job logs").
"""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator
from datetime import datetime, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from portal.timestamps import from_epoch, split_log_stamp
from scheduling.backends import get_backend
from scheduling.backends.base import BackendError, LogsUnavailable
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


def _backend_lines(job: Job, attempt: int, *, tail: int | None, follow: bool = False, pod: int = 0,
                   since: int | None = None) -> Iterator[str]:
    """The cluster's lines, each with its time stamp."""
    cluster = attempt_cluster(job, attempt)  # a requeued job's earlier attempt may have run elsewhere
    backend = get_backend(cluster if cluster is not None else "default")
    return backend.logs(job_id=job.pk, attempt=attempt, namespace=namespace_for(job.department.slug, cluster),
                        tail_lines=tail, follow=follow, pod=pod, timestamps=True,
                        since=None if since is None else from_epoch(since // 1_000_000_000))


def _cut(lines: Iterable[str], *, timestamps: bool, since: int | None) -> Iterator[str]:
    """Stamped ``lines`` from the stamp ``since`` (nanoseconds, inclusive) on, with their stamps or without. A line
    without a stamp (a log kept before stamps were) is never left out."""
    for line in lines:
        at, text = split_log_stamp(line)
        if since is not None and at is not None and at < since:
            continue
        yield line if timestamps or at is None else text


def keep_attempt_log(*, job_id: int, attempt: int) -> AttemptLog | None:
    """Store the tail of each pod's log of an ended attempt (idempotent: a kept log is not read again). Returns
    pod 0's; None when the attempt is still live, the job is gone, or the cluster has no log for pod 0 (never
    started, pods gone)."""
    job = Job.objects.select_related("department", "cluster").filter(pk=job_id).first()
    if job is None or is_live(job, attempt):
        return None
    kept = {row.pod: row for row in AttemptLog.objects.filter(job_id=job_id, attempt=attempt)}
    kept.update(_keep_missing(job, attempt, set(kept)))
    return kept.get(0)


def keep_attempt_logs(*, pairs: Iterable[tuple[int, int]]) -> list[tuple[int, int]]:
    """``keep_attempt_log`` for several (job id, attempt) pairs, a sync's finished jobs: the jobs and the logs
    kept already are read once for all of them, not twice per pair. Returns the pairs that raised, which the
    caller retries one by one (one bad pod must not keep the others' logs from being kept)."""
    pairs = [(int(job_id), int(attempt)) for job_id, attempt in pairs]
    ids = {job_id for job_id, _ in pairs}
    jobs = Job.objects.select_related("department", "cluster").in_bulk(ids)
    kept: dict[tuple[int, int], set[int]] = {}
    for job_id, attempt, pod in AttemptLog.objects.filter(job_id__in=ids).values_list("job_id", "attempt", "pod"):
        kept.setdefault((job_id, attempt), set()).add(pod)
    failed, rows, written = [], [], []
    for job_id, attempt in pairs:
        job = jobs.get(job_id)
        if job is None or is_live(job, attempt):
            continue
        try:
            made = [row for pod in range(job.pods) if pod not in kept.get((job_id, attempt), set())
                    and (row := _pod_log_row(job, attempt, pod)) is not None]
        except Exception:  # noqa: BLE001 - retried alone by the caller
            log.warning("keeping the log of job %s attempt %s failed", job_id, attempt, exc_info=True)
            failed.append((job_id, attempt))
            continue
        rows += made
        written += [(job_id, attempt)] if made else []
    try:  # one INSERT for them all; a log kept meanwhile by another task (a delete, a retry) stays as it is
        AttemptLog.objects.bulk_create(rows, ignore_conflicts=True)
    except Exception:  # noqa: BLE001 - retried alone by the caller
        log.warning("keeping the logs of %d attempts together failed", len(written), exc_info=True)
        failed += written
    return failed


def _keep_missing(job: Job, attempt: int, kept: set[int]) -> dict[int, AttemptLog]:
    """Keep the log of every pod of the ended attempt not in ``kept``; the rows made, by pod."""
    made = {}
    for pod in range(job.pods):
        if pod not in kept and (row := _keep_pod_log(job, attempt, pod)) is not None:
            made[pod] = row
    return made


def _pod_log_row(job: Job, attempt: int, pod: int) -> AttemptLog | None:
    """The row that keeps the tail of the pod's log, not saved yet; None when the cluster has no log for it."""
    try:
        lines = list(_backend_lines(job, attempt, tail=FETCH_LINES, pod=pod))  # stamped: a follower resumes by them
    except BackendError as exc:
        log.info("job %s attempt %s pod %s: no log to keep (%s)", job.pk, attempt, pod, exc)
        return None
    if not lines:
        return None
    text, truncated = tail_bytes(lines, settings.LOG_KEEP_KB * 1024)
    return AttemptLog(job=job, attempt=attempt, pod=pod, text=text, truncated=truncated, stamped=True)


def _keep_pod_log(job: Job, attempt: int, pod: int) -> AttemptLog | None:
    row = _pod_log_row(job, attempt, pod)
    if row is None:
        return None
    try:
        with transaction.atomic():
            row.save(force_insert=True)
            return row
    except IntegrityError:  # kept meanwhile by another task (the delete and the finish both keep it)
        return AttemptLog.objects.filter(job_id=job.pk, attempt=attempt, pod=pod).first()


def attempt_log_lines(*, job: Job, attempt: int, tail: int, follow: bool = False, pod: int = 0,
                      timestamps: bool = False, since: int | None = None) -> tuple[Iterator[str], str]:
    """The log lines of the attempt's pod ``pod`` and where they come from: ``live`` (the cluster, followed when
    asked), ``kept`` (stored when the attempt ended), ``cluster`` (ended, not kept yet, its pods still there) or
    ``none``. ``timestamps``: each line starts with the time it was written. ``since`` (nanoseconds since the
    epoch): every line written then or later (``tail`` is then not applied), so that a follower who reconnects
    from the stamp of the last line it has misses none and gets again only those of that very instant, which it
    counts. Raises BackendError for a live attempt the cluster cannot answer for, and LogsUnavailable for an
    attempt that has not started (awaiting approval or queued)."""
    last = tail if since is None else None
    if job.attempt == attempt and job.state in (JobState.PENDING_APPROVAL, JobState.QUEUED):
        # nothing has run yet: an empty log would read as a job that ran and printed nothing
        raise LogsUnavailable(f"job {job.pk} has not started (it is {job.get_state_display().lower()}): "
                              f"no log yet")
    if is_live(job, attempt):
        lines = _backend_lines(job, attempt, tail=last, follow=follow, pod=pod, since=since)
        return _cut(lines, timestamps=timestamps, since=since), "live"
    kept = AttemptLog.objects.filter(job=job, attempt=attempt, pod=pod).first()
    if kept is not None:
        rows = kept.text.splitlines()
        rows = rows if last is None else rows[-last:]
        return _cut(iter(rows), timestamps=timestamps and kept.stamped, since=since), "kept"
    try:
        found = list(_backend_lines(job, attempt, tail=last, pod=pod, since=since))
    except BackendError:
        found = []
    return _cut(iter(found), timestamps=timestamps, since=since), ("cluster" if found else "none")


def cleanup_logs(*, now: datetime | None = None) -> int:
    """Delete kept logs older than LOG_RETENTION_DAYS; returns how many."""
    horizon = (now or timezone.now()) - timedelta(days=settings.LOG_RETENTION_DAYS)
    deleted, _ = AttemptLog.objects.filter(kept_at__lt=horizon).delete()
    return deleted


def role_pods(job: Job, name: str) -> tuple[int, int] | None:
    """(index of its first pod, its pod count) of the job's role ``name`` (the pods are numbered role by role),
    or None when the job has no such role."""
    at = 0
    for role_name, pods in job.roles.order_by("index").values_list("name", "pods"):
        if role_name == name:
            return at, pods
        at += pods
    return None
