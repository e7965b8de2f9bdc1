"""Celery tasks: thin, idempotent, stable names, declared queues (see CELERY_TASK_ROUTES), time limits.

Each takes ids, re-reads the database and does nothing when the job moved on (a stale attempt, a cancelled
job), so running any task twice is harmless. Cluster outages back off exponentially instead of hot-looping.
"""

from __future__ import annotations

import logging

from celery import shared_task
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from scheduling.backends import get_backend
from scheduling.backends.base import BackendError, ClusterUnavailable
from scheduling.core import reasons
from scheduling.models import Job, JobState, PreemptionVictim

log = logging.getLogger(__name__)

RETRY = {
    # A database connection the server ended (restart, failover) fails a task once; the retry gets a new one.
    "autoretry_for": (ClusterUnavailable, BackendError, OperationalError, InterfaceError),
    "retry_backoff": 2,
    "retry_backoff_max": 300,
    "retry_jitter": True,
    "max_retries": 12,
}


def _job(job_id: int, attempt: int, states) -> Job | None:
    job = Job.objects.select_related("department", "flavor", "owner", "cluster").filter(pk=job_id).first()
    if job is None or job.attempt != attempt or job.state not in states:
        return None
    return job


def _mark_unreachable(job: Job, exc: Exception) -> None:
    if job.state == JobState.QUEUED and job.reason_code != reasons.CLUSTER_UNREACHABLE:
        Job.objects.filter(pk=job.pk, state=JobState.QUEUED, attempt=job.attempt).update(
            reason_code=reasons.CLUSTER_UNREACHABLE, reason_message=f"{reasons.CODES[reasons.CLUSTER_UNREACHABLE]} "
            f"({str(exc)[:120]})"
        )


def _cluster_name(job: Job) -> str:
    from scheduling.services.clusters import default_cluster

    return job.cluster.name if job.cluster_id else default_cluster().name


@shared_task(name="scheduling.pods.create", time_limit=60, soft_time_limit=50, **RETRY)
def create_pods(job_id: int, attempt: int) -> str:
    from scheduling.services.clusters import podset_for

    job = _job(job_id, attempt, (JobState.QUEUED, JobState.ADMITTED))
    if job is None:
        return "stale"
    try:
        get_backend(_cluster_name(job)).ensure_pods(podset_for(job))
    except ClusterUnavailable as exc:
        _mark_unreachable(job, exc)
        raise
    if job.reason_code == reasons.CLUSTER_UNREACHABLE:
        Job.objects.filter(pk=job.pk, reason_code=reasons.CLUSTER_UNREACHABLE).update(
            reason_code=reasons.QUEUED, reason_message=reasons.CODES[reasons.QUEUED]
        )
    return "created"


@shared_task(name="scheduling.pods.admit", time_limit=60, soft_time_limit=50, **RETRY)
def admit_pods(job_id: int, attempt: int) -> str:
    return _admit(job_id, attempt)


def _admit(job_id: int, attempt: int) -> str:
    from scheduling.services.clusters import podset_for

    job = _job(job_id, attempt, (JobState.ADMITTED,))
    if job is None:
        return "stale"
    backend = get_backend(_cluster_name(job))
    podset = podset_for(job)
    backend.ensure_pods(podset)  # a lost create task must not block the admission
    backend.admit(podset, tuple(job.placement))
    return "admitted"


@shared_task(name="scheduling.pods.admit_many", time_limit=120, soft_time_limit=110)
def admit_pods_many(pairs: list[list[int]]) -> dict[str, int]:
    """Ungate the pods of several admitted (job id, attempt) pairs: one message for a cycle's admissions
    instead of one broker round trip each. A pair that fails is handed to ``admit_pods`` on its own, with that
    task's retries and back-off, so one unreachable cluster or bad pod never holds up the others."""
    counts: dict[str, int] = {}
    for job_id, attempt in pairs:
        try:
            outcome = _admit(job_id, attempt)
        except Exception:  # noqa: BLE001 - retried alone below
            log.warning("admitting job %s attempt %s failed; retrying it alone", job_id, attempt, exc_info=True)
            admit_pods.delay(job_id, attempt)
            outcome = "retrying"
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


@shared_task(name="scheduling.pods.evict", time_limit=60, soft_time_limit=50, **RETRY)
def evict_pods(job_id: int, attempt: int, namespace: str, preemption_id: int) -> str:
    from scheduling.services.jobs import record_event

    victim = PreemptionVictim.objects.filter(preemption_id=preemption_id, job_id=job_id, attempt=attempt).first()
    job = Job.objects.filter(pk=job_id).first()
    if victim is None or job is None:
        return "unknown"
    if victim.status not in (PreemptionVictim.Status.DECIDED, PreemptionVictim.Status.REQUESTED):
        return "done"
    cluster = job.cluster.name if job.cluster_id else "default"
    now = timezone.now()
    if victim.status == PreemptionVictim.Status.DECIDED:
        PreemptionVictim.objects.filter(pk=victim.pk).update(
            status=PreemptionVictim.Status.REQUESTED, eviction_requested_at=now
        )
        record_event(job=job, kind="eviction", attempt=attempt, reason_code="eviction_requested",
                     message="eviction requested through the Eviction API", data={"preemption_id": preemption_id})
    outcome = get_backend(cluster).evict(job_id=job_id, attempt=attempt, namespace=namespace)
    if outcome.status == "blocked":
        PreemptionVictim.objects.filter(pk=victim.pk).update(status=PreemptionVictim.Status.BLOCKED)
        record_event(job=job, kind="eviction", attempt=attempt, reason_code=reasons.DISRUPTION_BUDGET,
                     message=f"eviction refused (429): {outcome.message or 'a PodDisruptionBudget forbids it'}",
                     data={"preemption_id": preemption_id})
        return "blocked"
    record_event(job=job, kind="eviction", attempt=attempt, reason_code=f"eviction_{outcome.status}",
                 message=f"eviction {outcome.status}: {', '.join(outcome.pods)}"[:500],
                 data={"preemption_id": preemption_id})
    return outcome.status


@shared_task(name="scheduling.pods.delete", time_limit=60, soft_time_limit=50, **RETRY)
def delete_pods(job_id: int, attempt: int, namespace: str) -> str:
    job = Job.objects.filter(pk=job_id).first()
    if job is not None and job.attempt == attempt and job.state in (JobState.QUEUED, JobState.ADMITTED,
                                                                    JobState.RUNNING):
        return "live"  # never delete the pods of a live attempt
    cluster = job.cluster.name if job is not None and job.cluster_id else "default"
    get_backend(cluster).delete_pods(job_id=job_id, attempt=attempt, namespace=namespace)
    return "deleted"


@shared_task(name="scheduling.cycle.run", time_limit=120, soft_time_limit=100, ignore_result=True)
def run_cycle() -> dict | None:
    from scheduling.services.cycle import run_cycle as _run

    outcome = _run()
    return None if outcome is None else outcome.__dict__


@shared_task(name="scheduling.cycle.sync", time_limit=120, soft_time_limit=100, ignore_result=True)
def sync_cluster() -> dict:
    from scheduling.services.clusters import sync_cluster as _sync
    from scheduling.services.locks import exclusive

    with exclusive("cluster-sync") as acquired:
        if not acquired:
            return {"skipped": 1}
        return _sync()


@shared_task(name="scheduling.cycle.reconcile", time_limit=300, soft_time_limit=280, ignore_result=True)
def reconcile() -> dict:
    from scheduling.services.clusters import reconcile as _reconcile
    from scheduling.services.locks import exclusive

    with exclusive("reconcile") as acquired:
        if not acquired:
            return {"skipped": 1}
        return _reconcile()
