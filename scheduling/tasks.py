"""Celery tasks: thin, idempotent, stable names, declared queues (see CELERY_TASK_ROUTES), time limits.

Each takes ids and calls a service (the pod side in ``scheduling.services.pods``), which re-reads the database
and does nothing when the job moved on (a stale attempt, a cancelled job), so running any task twice is
harmless. Cluster outages back off exponentially instead of hot-looping.
"""

from __future__ import annotations

import logging
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings
from django.db import InterfaceError, OperationalError, connections

from scheduling.backends.base import BackendError, ClusterUnavailable
from scheduling.services import (
    calendar,
    cluster_binding,
    cycle,
    inventory,
    locks,
    logs,
    notice,
    pods,
    podsets,
    run_cache,
    sessions,
    stats,
    tuning,
    workload,
)
from scheduling.services import reconcile as reconciler

log = logging.getLogger(__name__)

RETRY = {
    # A database connection the server ended (restart, failover) fails a task once; the retry gets a new one.
    "autoretry_for": (ClusterUnavailable, BackendError, OperationalError, InterfaceError),
    "retry_backoff": 2,
    "retry_backoff_max": 300,
    "retry_jitter": True,
    "max_retries": 12,
}


# The queues whose tasks create pods (settings.CELERY_TASK_ROUTES): only a worker reading one needs the classes.
POD_QUEUES = frozenset({"starts", "pods"})


def creates_pods(queues: set[str]) -> bool:
    """Whether a worker reading ``queues`` may create pods (unknown queues: assume it may)."""
    return not queues or bool(queues & POD_QUEUES)


@worker_ready.connect
def _prepare_cluster(sender=None, **_kwargs):  # pragma: no cover - exercised by running a worker
    """Make sure the tier PriorityClasses exist before the worker creates any pod. A worker that creates none
    (the notifier, the cycle's) skips it: it cost each of them a Kubernetes client and its API calls at start,
    more CPU than a notifier spends on a few hundred jobs."""
    consumer = getattr(sender, "task_consumer", None)
    if not creates_pods({q.name for q in getattr(consumer, "queues", None) or ()}):
        return
    try:
        podsets.ensure_priority_classes()
    except Exception:  # noqa: BLE001 - a worker must start even when the cluster is briefly down
        log.exception("could not ensure PriorityClasses at worker start")


@shared_task(name="scheduling.pods.create", time_limit=60, soft_time_limit=50, **RETRY)
def create_pods(job_id: int, attempt: int) -> str:
    return pods.create_pods(job_id=job_id, attempt=attempt)


@shared_task(name="scheduling.pods.create_many", time_limit=120, soft_time_limit=110)
def create_pods_many(pairs: list[list[int]]) -> dict[str, int]:
    """Create the gated pods of several queued (job id, attempt) pairs: one message for a submission's or a
    transaction's jobs. A pair that fails is handed to ``create_pods`` on its own, with that task's retries and
    back-off, so one unreachable cluster never holds up the others. The message's jobs are read together."""
    with run_cache.per_run():
        read = _read_jobs(pairs, starting=False)
        return _each(pairs, lambda job_id, attempt: pods.create_pods(job_id=job_id, attempt=attempt, read=read),
                     create_pods)


def _read_jobs(pairs: list[list[int]], *, starting: bool = True) -> dict | None:
    """The message's jobs in one read (``pods.read_jobs``); None when that read fails: each pair then reads its
    own job, and one that fails is retried alone, as before."""
    try:
        return pods.read_jobs(pairs, starting=starting)
    except Exception:  # noqa: BLE001 - every pair reads for itself instead
        log.warning("reading the jobs of %d pairs together failed; each is read on its own", len(pairs),
                    exc_info=True)
        return None


def _each(items: list[list], run, alone) -> dict[str, int]:
    """Run ``run(*item)`` for every item, each a (job id, attempt, ...) list, in one run (rows that change
    rarely read once, see ``run_cache``); an item that raises is sent to the single-item task ``alone`` with
    the same arguments. Returns the outcomes' counts."""
    counts: dict[str, int] = {}
    with run_cache.per_run():
        for item in items:
            try:
                outcome = run(*item)
            except Exception:  # noqa: BLE001 - retried alone below
                log.warning("%s for job %s attempt %s failed; retrying it alone", alone.name, item[0], item[1],
                            exc_info=True)
                alone.delay(*item)
                outcome = "retrying"
            _count(counts, outcome)
    return counts


@shared_task(name="scheduling.pods.admit", time_limit=60, soft_time_limit=50, **RETRY)
def admit_pods(job_id: int, attempt: int) -> str:
    return _admit(job_id, attempt, fresh=False)


def _admit(job_id: int, attempt: int, *, fresh: bool) -> str:
    """Start the admitted attempt's pods; a namespace quota refusal schedules the attempt's retry chain's next
    step (one chain per attempt)."""
    outcome, retry_in = pods.admit_pods(job_id=job_id, attempt=attempt, fresh=fresh)
    if retry_in is not None:
        admit_pods.apply_async((job_id, attempt), countdown=retry_in)  # the chain's next step
    return outcome


@shared_task(name="scheduling.pods.admit_many", time_limit=120, soft_time_limit=110)
def admit_pods_many(pairs: list[list[int]]) -> dict[str, int]:
    """Start the pods of several admitted (job id, attempt) pairs: one message for a cycle's admissions
    instead of one broker round trip each. A pair that fails is handed to ``admit_pods`` on its own, with that
    task's retries and back-off, so one unreachable cluster or bad pod never holds up the others.

    On a backend whose starts may overlap (Kubernetes) up to ``ADMIT_CONCURRENCY`` admissions' API calls are in
    flight at once, on a pool of threads that never touch the database: each pair is re-read and its quota try
    claimed on this thread when a slot is free, right before its calls start, and its outcome is settled here
    too (docs/kubernetes.md, "Admission: creating the pods"). On a backend whose starts run here one after
    another (the simulated one) the message's jobs are read together at its start instead."""
    counts: dict[str, int] = {}
    slots = settings.ADMIT_CONCURRENCY
    with run_cache.per_run(), ThreadPoolExecutor(max_workers=slots, thread_name_prefix="admit") as pool:
        running: dict[Future, pods.Admission] = {}
        read = _read_jobs(pairs)
        waited = False
        for i, (job_id, attempt) in enumerate(pairs):
            while len(running) >= slots:
                _settle_first(running, counts)
                waited = True
            if waited and read is not None:
                # The pairs still to start waited behind others' calls: whether they moved meanwhile is
                # checked for them all in one light query, not by re-reading each whole (its query's
                # building cost more than its run, and more than the start's own API call)
                read = _still_as_read(read, [p[0] for p in pairs[i:]])
                waited = False
            admission = _claim(job_id, attempt, read, recent=read is not None)
            if isinstance(admission, str):
                _count(counts, admission)
            elif admission.overlaps:
                running[pool.submit(_off_thread, admission)] = admission
            else:  # a backend that writes the database as it starts (the simulated one): on this thread
                _count(counts, _settle(admission, _run_here(admission)))
        while running:
            _settle_first(running, counts)
    return counts


def _still_as_read(read: dict, job_ids: list[int]) -> dict | None:
    """``pods.still_as_read``; None when that check fails: each pair then re-reads its own job, as before."""
    try:
        return pods.still_as_read(read, job_ids)
    except Exception:  # noqa: BLE001 - every pair reads for itself instead
        log.warning("checking %d admitted jobs together failed; each is read on its own", len(job_ids),
                    exc_info=True)
        return None


def _count(counts: dict[str, int], outcome: str) -> None:
    counts[outcome] = counts.get(outcome, 0) + 1


def _alone(job_id: int, attempt: int) -> str:
    log.warning("admission of job %s attempt %s failed; retrying it alone", job_id, attempt, exc_info=True)
    admit_pods.delay(job_id, attempt)
    return "retrying"


def _claim(job_id: int, attempt: int, read: dict | None, *, recent: bool = False) -> pods.Admission | str:
    try:
        return pods.claim_admission(job_id=job_id, attempt=attempt, fresh=True, read=read, recent=recent)
    except Exception:  # noqa: BLE001 - retried alone
        return _alone(job_id, attempt)


def _off_thread(admission: pods.Admission) -> None:
    """An admission's API calls, on a pool thread. They touch no database; should anything on the way open a
    connection all the same, it is this thread's own (Django keeps one per thread) and is closed here rather
    than left open on a thread that is about to end."""
    try:
        admission.run()
    finally:
        connections.close_all()


def _run_here(admission: pods.Admission) -> BaseException | None:
    try:
        admission.run()
    except Exception as exc:  # noqa: BLE001 - settled (and retried alone) like an overlapped run's error
        return exc
    return None


def _settle_first(running: dict[Future, pods.Admission], counts: dict[str, int]) -> None:
    """Wait for at least one overlapped run to end and settle every one that has."""
    done, _ = wait(running, return_when=FIRST_COMPLETED)
    for future in done:
        _count(counts, _settle(running.pop(future), future.exception()))


def _settle(admission: pods.Admission, error: BaseException | None) -> str:
    job_id, attempt = admission.job.pk, admission.job.attempt
    try:
        outcome, retry_in = pods.settle_admission(admission, error)
    except Exception:  # noqa: BLE001 - retried alone
        return _alone(job_id, attempt)
    if retry_in is not None:
        admit_pods.apply_async((job_id, attempt), countdown=retry_in)  # the chain's next step
    return outcome


@shared_task(name="scheduling.pods.notify", time_limit=60, soft_time_limit=50, **RETRY)
def notify_pods(job_id: int, attempt: int, namespace: str, preemption_id: int) -> str:
    """Tell a victim that asked for notice (its pods' annotation); its eviction waits for its answer or the
    notice's end."""
    return notice.send_notice(job_id=job_id, attempt=attempt, namespace=namespace, preemption_id=preemption_id)


@shared_task(name="scheduling.pods.evict", time_limit=60, soft_time_limit=50, **RETRY)
def evict_pods(job_id: int, attempt: int, namespace: str, preemption_id: int | None) -> str:
    """Ask the Eviction API to evict the attempt's pods (never DELETE: PodDisruptionBudgets decide)."""
    return pods.evict_pods(job_id=job_id, attempt=attempt, namespace=namespace, preemption_id=preemption_id)


@shared_task(name="scheduling.pods.delete", time_limit=60, soft_time_limit=50, **RETRY)
def delete_pods(job_id: int, attempt: int, namespace: str, cluster: str | None = None) -> str:
    """Delete an attempt's pods on ``cluster`` (never a live attempt's)."""
    return pods.delete_pods(job_id=job_id, attempt=attempt, namespace=namespace, cluster=cluster)


@shared_task(name="scheduling.pods.replace", time_limit=60, soft_time_limit=50, **RETRY)
def replace_pod(job_id: int, attempt: int, index: int) -> str:
    """Make a failed pod of a ``restart-pod`` role again, alone (the attempt goes on)."""
    return pods.replace_pod(job_id=job_id, attempt=attempt, index=index)


@shared_task(name="scheduling.pods.resize", time_limit=60, soft_time_limit=50)
def resize_pods(job_id: int, attempt: int, resize_id: int) -> str:
    """Add or remove a resizable job's pods at its checkpoint. Not retried by itself: the cycle sends a resize
    that is not done yet again after ``resizes.RETRY_S``, for as long as it is under way."""
    return pods.resize_pods(job_id=job_id, attempt=attempt, resize_id=resize_id)


@shared_task(name="scheduling.pods.tell_resize", time_limit=60, soft_time_limit=50, **RETRY)
def tell_resize(job_id: int, attempt: int, resize_id: int) -> str:
    """Tell a job that checkpoints when asked that a resize waits for its checkpoint (its size file)."""
    return pods.tell_resize(job_id=job_id, attempt=attempt, resize_id=resize_id)


@shared_task(name="scheduling.pods.remove", time_limit=60, soft_time_limit=50, **RETRY)
def remove_pods(job_id: int, attempt: int, namespace: str, cluster: str | None = None, failed: bool = False) -> str:
    """Clear the pods of an attempt that has ended, through the Eviction API where they still run. ``failed``:
    the attempt ended because a pod failed (its own PodDisruptionBudget goes first)."""
    return pods.remove_pods(job_id=job_id, attempt=attempt, namespace=namespace, cluster=cluster, failed=failed)


@shared_task(name="scheduling.pods.remove_many", time_limit=300, soft_time_limit=280)
def remove_pods_many(items: list[list]) -> dict[str, int]:
    """Clear the pods of several ended attempts, each ``[job id, attempt, namespace, cluster]``: the
    reconciler's orphans, one message per chunk. An attempt that fails is handed to ``remove_pods`` on its own,
    with that task's retries and back-off, so one refused or unreachable clears nothing less of the others."""
    return _each(items, lambda job_id, attempt, namespace, cluster: pods.remove_pods(
        job_id=job_id, attempt=attempt, namespace=namespace, cluster=cluster), remove_pods)


@shared_task(name="scheduling.pods.keep_log", time_limit=120, soft_time_limit=100, ignore_result=True)
def keep_log(job_id: int, attempt: int) -> bool:
    """Keep the tail of an ended attempt's log (idempotent)."""
    return logs.keep_attempt_log(job_id=job_id, attempt=attempt) is not None


@shared_task(name="scheduling.pods.keep_logs", time_limit=300, soft_time_limit=280, ignore_result=True)
def keep_logs(pairs: list[list[int]]) -> dict[str, int]:
    """Keep the tails of several ended (job id, attempt) pairs' logs: one message for a sync's finished jobs. A
    pair that fails is handed to ``keep_log`` on its own."""
    with run_cache.per_run():
        failed = logs.keep_attempt_logs(pairs=pairs)
    for job_id, attempt in failed:
        keep_log.delay(job_id, attempt)
    return {"done": len(pairs) - len(failed), "retrying": len(failed)}


@shared_task(name="scheduling.logs.cleanup", time_limit=600, soft_time_limit=550, ignore_result=True)
def cleanup_logs() -> int:
    """Delete kept logs past LOG_RETENTION_DAYS."""
    return logs.cleanup_logs()


@shared_task(name="scheduling.sessions.warn_ending", time_limit=120, soft_time_limit=100, ignore_result=True)
def warn_ending_sessions() -> int:
    """Warn the owners of sessions whose lifetime ends soon (once each)."""
    return sessions.warn_ending()


@shared_task(name="scheduling.calendar.notify", time_limit=120, soft_time_limit=100, ignore_result=True)
def notify_calendar() -> dict[str, int]:
    """Tell the owners of running jobs a maintenance window ahead affects, and a booking's owners that it began."""
    return calendar.notify_due()


@shared_task(name="scheduling.checkpoints.cleanup", time_limit=600, soft_time_limit=550, ignore_result=True)
def cleanup_checkpoints() -> int:
    """Delete checkpoint directories past CHECKPOINT_RETENTION_DAYS after their job ended."""
    return workload.delete_expired_checkpoints()


@shared_task(name="scheduling.stats.sample", time_limit=120, soft_time_limit=100, ignore_result=True)
def sample_stats() -> str:
    """One sample of the dashboard's time series (and old samples deleted)."""
    at = stats.record_sample()
    stats.cleanup_samples()
    return at.isoformat()


@shared_task(name="scheduling.cycle.run", time_limit=120, soft_time_limit=100, ignore_result=True)
def run_cycle() -> dict | None:
    outcome = cycle.run_cycle()
    return None if outcome is None else outcome.__dict__


@shared_task(name="scheduling.cycle.sync", time_limit=60, soft_time_limit=50, ignore_result=True)
def sync_cluster() -> dict:
    """Sync every cluster: one ``sync_one`` each."""
    return cluster_binding.send_per_cluster("scheduling.cycle.sync_one")


@shared_task(name="scheduling.cycle.sync_one", time_limit=120, soft_time_limit=100, ignore_result=True)
def sync_one(cluster_id: int | None = None) -> dict:
    return inventory.sync_one(cluster_id=cluster_id)


@shared_task(name="scheduling.cycle.reconcile", time_limit=60, soft_time_limit=50, ignore_result=True)
def reconcile() -> dict:
    """Reconcile every cluster: one ``reconcile_one`` each."""
    return cluster_binding.send_per_cluster("scheduling.cycle.reconcile_one")


@shared_task(name="scheduling.cycle.reconcile_one", time_limit=300, soft_time_limit=280, ignore_result=True)
def reconcile_one(cluster_id: int | None = None) -> dict:
    return reconciler.reconcile_one(cluster_id=cluster_id)


@shared_task(name="scheduling.pods.delete_secret", time_limit=120, soft_time_limit=100, **RETRY)
def delete_department_secret(department_slug: str, secret_name: str, kube_name: str) -> list[str]:
    """Delete the portal's copy of a department secret that was deleted, on every cluster."""
    return pods.delete_department_secret(department_slug=department_slug, secret_name=secret_name,
                                         kube_name=kube_name)


@shared_task(name="scheduling.tuning.run", time_limit=int(settings.POLICY_TUNER_TIME_LIMIT_S) + 120,
             soft_time_limit=int(settings.POLICY_TUNER_TIME_LIMIT_S) + 60, ignore_result=True)
def run_tuner(trigger: str = "schedule", user_id: int | None = None) -> int | None:
    """The policy tuner over the last week (beat: every POLICY_TUNER_INTERVAL_S; an admin: on demand); returns
    the PolicyProposal's id (None when another run holds the tuner's lock). Its replays stop at
    POLICY_TUNER_TIME_LIMIT_S (the run is then kept as failed)."""
    from django.contrib.auth import get_user_model

    user = get_user_model().objects.filter(pk=user_id).first() if user_id else None
    with locks.exclusive("policy-tuner") as mine:
        if not mine:  # another run (a second beat, an admin's click) is replaying the same week
            return None
        return tuning.run_tuner(trigger=trigger, user=user).pk
