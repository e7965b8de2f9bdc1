"""Celery tasks: thin, idempotent, stable names, declared queues (see CELERY_TASK_ROUTES), time limits.

Each takes ids, re-reads the database and does nothing when the job moved on (a stale attempt, a cancelled
job), so running any task twice is harmless. Cluster outages back off exponentially instead of hot-looping.
"""

from __future__ import annotations

import logging

from celery import shared_task
from celery.signals import worker_ready
from django.db import InterfaceError, OperationalError
from django.utils import timezone

from portal import dispatch
from scheduling.backends import get_backend
from scheduling.backends.base import BackendError, ClusterUnavailable, InvalidPodSpec, QuotaExceeded
from scheduling.core import reasons
from scheduling.models import IN_FLIGHT, Cluster, Job, JobState, PreemptionVictim
from scheduling.services import clusters, cycle, logs, stats
from scheduling.services.jobs import namespace_for, pods_at_submission, record_event
from scheduling.services.locks import exclusive
from workloads.models import DepartmentSecret

log = logging.getLogger(__name__)

RETRY = {
    # A database connection the server ended (restart, failover) fails a task once; the retry gets a new one.
    "autoretry_for": (ClusterUnavailable, BackendError, OperationalError, InterfaceError),
    "retry_backoff": 2,
    "retry_backoff_max": 300,
    "retry_jitter": True,
    "max_retries": 12,
}


# Event code of an admission the namespace's ResourceQuota refused (also the pending reason it leads to).
NAMESPACE_QUOTA = reasons.NAMESPACE_QUOTA


@worker_ready.connect
def _prepare_cluster(**_kwargs):  # pragma: no cover - exercised by running a worker
    """Make sure the tier PriorityClasses exist before the worker creates any pod."""
    try:
        clusters.ensure_priority_classes()
    except Exception:  # noqa: BLE001 - a worker must start even when the cluster is briefly down
        log.exception("could not ensure PriorityClasses at worker start")


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


@shared_task(name="scheduling.pods.create", time_limit=60, soft_time_limit=50, **RETRY)
def create_pods(job_id: int, attempt: int) -> str:
    job = _job(job_id, attempt, (JobState.QUEUED, JobState.ADMITTED))
    if job is None:
        return "stale"
    if job.state == JobState.QUEUED and not pods_at_submission():
        return "at_admission"  # made on the cluster the admission binds the job to, not before
    try:
        get_backend(clusters.cluster_of(job)).ensure_pods(clusters.podset_for(job))
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
    return _admit(job_id, attempt, fresh=False)


def _admit(job_id: int, attempt: int, *, fresh: bool) -> str:
    """Start the admitted attempt's pods on its placement (create what is missing, ungate). ``fresh``: the
    cycle's own first try, when the backend may create without reading first; retries and the reconciler
    read what exists before creating anything."""
    job = _job(job_id, attempt, (JobState.ADMITTED,))
    if job is None:
        return "stale"
    cluster = clusters.cluster_of(job)  # the cluster the admission bound this attempt to
    backend = get_backend(cluster)
    if clusters.quota_backing_off(job=job, now=timezone.now()):
        return "backing_off"  # this attempt's one retry chain has its next try later: no second chain
    try:
        backend.start(clusters.podset_for(job), tuple(job.placement), fresh=fresh)
    except QuotaExceeded as exc:
        _quota_refused(job, exc)
        delay = clusters.quota_refused(job=job, cluster=cluster, exc=exc, now=timezone.now())
        admit_pods.apply_async((job_id, attempt), countdown=delay)  # the chain's next step
        return "quota_backoff"
    except InvalidPodSpec as exc:
        # The cluster refuses these pods as they are (a missing namespace, a stricter PodSecurity level):
        # retrying cannot help, so the job fails with the API server's reason and gives its GPUs back. Any pod
        # of a gang created before the refusal is an orphan the reconciler deletes.
        clusters.finish(job=job, state=JobState.FAILED, exit_code=None, reason="InvalidPodSpec",
                        message=f"the cluster refused the job's pods: {exc}"[:500], finished_at=None)
        return "refused"
    clusters.quota_admitted(job=job)
    return "admitted"


def _quota_refused(job: Job, exc: Exception) -> None:
    """A namespace ResourceQuota refused the admitted job's pods: say so on the job once per attempt (the task
    backs off and the reconciler gives the GPUs back after a bounded wait), never silently retry."""
    log.warning("job %s attempt %s: namespace quota refused its pods: %s", job.pk, job.attempt, exc)
    if not job.events.filter(attempt=job.attempt, reason_code=NAMESPACE_QUOTA).exists():
        record_event(job=job, kind="pod", attempt=job.attempt, reason_code=NAMESPACE_QUOTA,
                     message=f"the namespace's ResourceQuota refused the job's pods; retrying with back-off "
                             f"({str(exc)[:300]})")


@shared_task(name="scheduling.pods.admit_many", time_limit=120, soft_time_limit=110)
def admit_pods_many(pairs: list[list[int]]) -> dict[str, int]:
    """Ungate the pods of several admitted (job id, attempt) pairs: one message for a cycle's admissions
    instead of one broker round trip each. A pair that fails is handed to ``admit_pods`` on its own, with that
    task's retries and back-off, so one unreachable cluster or bad pod never holds up the others."""
    counts: dict[str, int] = {}
    for job_id, attempt in pairs:
        try:
            outcome = _admit(job_id, attempt, fresh=True)
        except Exception:  # noqa: BLE001 - retried alone below
            log.warning("admitting job %s attempt %s failed; retrying it alone", job_id, attempt, exc_info=True)
            admit_pods.delay(job_id, attempt)
            outcome = "retrying"
        counts[outcome] = counts.get(outcome, 0) + 1
    return counts


@shared_task(name="scheduling.pods.evict", time_limit=60, soft_time_limit=50, **RETRY)
def evict_pods(job_id: int, attempt: int, namespace: str, preemption_id: int | None) -> str:
    """Ask the Eviction API to evict the attempt's pods (never DELETE: PodDisruptionBudgets decide).

    ``preemption_id`` None: the reconciler asks for the rest of a gang that is already partly evicted (by the
    portal or by someone draining a node). A refusal before any pod went leaves the victim BLOCKED (the next
    cycle chooses again). A refusal after some pods went leaves it in flight: the gang is broken, so the
    reconciler asks again each run until every pod is evicted; the job is requeued only once all are gone."""
    job = Job.objects.filter(pk=job_id).first()
    if job is None:
        return "unknown"
    victim = None
    if preemption_id is not None:
        victim = PreemptionVictim.objects.filter(preemption_id=preemption_id, job_id=job_id, attempt=attempt).first()
        if victim is None:
            return "unknown"
        if victim.status not in IN_FLIGHT:
            return "done"
    elif job.attempt != attempt or job.state not in (JobState.ADMITTED, JobState.RUNNING):
        return "stale"
    cluster = clusters.cluster_of(job)
    now = timezone.now()
    if victim is not None and victim.status == PreemptionVictim.Status.DECIDED:
        PreemptionVictim.objects.filter(pk=victim.pk).update(
            status=PreemptionVictim.Status.REQUESTED, eviction_requested_at=now
        )
        record_event(job=job, kind="eviction", attempt=attempt, reason_code="eviction_requested",
                     message="eviction requested through the Eviction API", data={"preemption_id": preemption_id})
    outcome = get_backend(cluster).evict(job_id=job_id, attempt=attempt, namespace=namespace)
    data = {"preemption_id": preemption_id}
    if outcome.status == "blocked":
        refused = f"eviction refused: {outcome.message or 'a PodDisruptionBudget forbids it'}"
        # The reconciler only asks for the rest of a gang some of whose pods are already gone.
        partial = outcome.partial or preemption_id is None
        if partial:
            message = f"{refused}; the gang's other pods are already evicted: asking again until this one may go"
        else:
            message = refused
            if victim is not None:
                PreemptionVictim.objects.filter(pk=victim.pk).update(status=PreemptionVictim.Status.BLOCKED)
        pod = outcome.pods[0] if outcome.pods else ""
        last = job.events.filter(kind="eviction", attempt=attempt).order_by("-at", "-id").first()
        if not (partial and last is not None and last.reason_code == reasons.DISRUPTION_BUDGET
                and (last.data or {}).get("pod") == pod):  # asked again every reconcile run: said once
            record_event(job=job, kind="eviction", attempt=attempt, reason_code=reasons.DISRUPTION_BUDGET,
                         message=message[:500], data={**data, "pod": pod})
        if partial:  # the job's own state says what it waits for, not only its timeline
            Job.objects.filter(pk=job.pk, attempt=attempt, state__in=(JobState.ADMITTED, JobState.RUNNING)).update(
                reason_code=reasons.DISRUPTION_BUDGET, reason_message=message[:300])
        return "partly_blocked" if partial else "blocked"
    if victim is not None and outcome.status == "accepted":
        PreemptionVictim.objects.filter(pk=victim.pk, status=PreemptionVictim.Status.REQUESTED).update(
            status=PreemptionVictim.Status.EVICTED, evicted_at=now)
    record_event(job=job, kind="eviction", attempt=attempt, reason_code=f"eviction_{outcome.status}",
                 message=f"eviction {outcome.status}: {', '.join(outcome.pods)}"[:500], data=data)
    return outcome.status


@shared_task(name="scheduling.pods.delete", time_limit=60, soft_time_limit=50, **RETRY)
def delete_pods(job_id: int, attempt: int, namespace: str, cluster: str | None = None) -> str:
    """Delete an attempt's pods on ``cluster`` (None: the cluster the job is bound to, else the default one).
    Never the pods of a live attempt on the cluster it is bound to; a queued attempt's pods are kept too (its
    admission may be adopting them right now)."""
    job = Job.objects.select_related("cluster").filter(pk=job_id).first()
    if job is not None and job.attempt == attempt:
        if job.state == JobState.QUEUED:
            return "live"
        if job.state in (JobState.ADMITTED, JobState.RUNNING) and (
                cluster is None or clusters.cluster_of(job).name == cluster):
            return "live"  # never delete the pods of a live attempt
    if cluster is None:
        cluster = clusters.cluster_of(job).name if job is not None else clusters.default_cluster().name
    if job is None or job.attempt != attempt or clusters.cluster_of(job).name == cluster:
        logs.keep_attempt_log(job_id=job_id, attempt=attempt)  # the pods take the cluster's copy of the log along
    get_backend(cluster).delete_pods(job_id=job_id, attempt=attempt, namespace=namespace)
    return "deleted"


@shared_task(name="scheduling.pods.delete_secret", time_limit=120, soft_time_limit=100, **RETRY)
def delete_department_secret(department_slug: str, secret_name: str, kube_name: str) -> list[str]:
    """Delete the portal's copy of a department secret that was deleted, on every cluster (in the
    department's namespace there). Nothing when the department declared a secret of that name again since:
    its next pod start writes it anew anyway."""
    if DepartmentSecret.objects.filter(department__slug=department_slug, name=secret_name).exists():
        return []
    deleted = []
    for cluster in list(Cluster.objects.order_by("name")) or [clusters.default_cluster()]:
        namespace = namespace_for(department_slug, cluster)
        if get_backend(cluster).delete_owned_secret(namespace=namespace, name=kube_name):
            deleted.append(f"{cluster.name}/{namespace}")
    return deleted


@shared_task(name="scheduling.pods.remove", time_limit=60, soft_time_limit=50, **RETRY)
def remove_pods(job_id: int, attempt: int, namespace: str, cluster: str | None = None) -> str:
    """Clear the pods of an attempt that has ended (requeued, finished, orphaned) on ``cluster``: the ones that no
    longer run are deleted, the ones that still run are evicted through the Eviction API. A refusal (a
    PodDisruptionBudget) is recorded on the job once per pod and left running; the reconciler asks again on its
    next run, for as long as the pods are there. Never a live attempt on the cluster it is bound to."""
    job = Job.objects.select_related("cluster", "department", "flavor", "owner").filter(pk=job_id).first()
    if job is not None and job.attempt == attempt:
        if job.state == JobState.QUEUED:
            return "live"
        if job.state in (JobState.ADMITTED, JobState.RUNNING) and (
                cluster is None or clusters.cluster_of(job).name == cluster):
            return "live"
    if cluster is None:
        cluster = clusters.cluster_of(job).name if job is not None else clusters.default_cluster().name
    if job is None or job.attempt != attempt or clusters.cluster_of(job).name == cluster:
        logs.keep_attempt_log(job_id=job_id, attempt=attempt)
    outcome = get_backend(cluster).remove_pods(job_id=job_id, attempt=attempt, namespace=namespace)
    if outcome.status != "blocked":
        return "removed"
    pod = outcome.pods[0] if outcome.pods else ""
    log.info("job %s attempt %s: eviction of %s refused (%s); asked again later", job_id, attempt, pod,
             outcome.message)
    if job is not None and not job.events.filter(attempt=attempt, reason_code=reasons.DISRUPTION_BUDGET,
                                                 data__pod=pod).exists():
        record_event(job=job, kind="eviction", attempt=attempt, reason_code=reasons.DISRUPTION_BUDGET,
                     message=f"pod {pod} of ended attempt {attempt} still runs: its eviction was refused "
                             f"({outcome.message or 'a PodDisruptionBudget forbids it'}); asking again, "
                             "never deleting it"[:500], data={"pod": pod})
    return "blocked"


@shared_task(name="scheduling.pods.keep_log", time_limit=120, soft_time_limit=100, ignore_result=True)
def keep_log(job_id: int, attempt: int) -> bool:
    """Keep the tail of an ended attempt's log (idempotent)."""
    return logs.keep_attempt_log(job_id=job_id, attempt=attempt) is not None


@shared_task(name="scheduling.logs.cleanup", time_limit=600, soft_time_limit=550, ignore_result=True)
def cleanup_logs() -> int:
    """Delete kept logs past LOG_RETENTION_DAYS."""
    return logs.cleanup_logs()


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


def _fan_out(task_name: str) -> dict:
    """One message per cluster, so each cluster's work runs (and times out) on its own: a cluster that is down
    or slow holds up no other's. A publish that fails for one cluster is logged; the next beat sends it again."""
    sent: dict[str, str] = {}
    for cluster_id, name in Cluster.objects.order_by("name").values_list("pk", "name") or []:
        try:
            dispatch.send_now(task_name, cluster_id)
            sent[name] = "sent"
        except Exception:  # noqa: BLE001 - one cluster's failure must not stop the others' messages
            log.exception("%s for cluster %s could not be run", task_name, name)
            sent[name] = "failed"
    if not sent:  # no cluster row yet: the default one is made on first use
        dispatch.send_now(task_name, clusters.default_cluster().pk)
    return sent


def _cluster_row(cluster_id: int | None) -> Cluster | None:
    if cluster_id is None:
        return clusters.default_cluster()
    return Cluster.objects.filter(pk=cluster_id).first()


@shared_task(name="scheduling.cycle.sync", time_limit=60, soft_time_limit=50, ignore_result=True)
def sync_cluster() -> dict:
    """Sync every cluster: one ``sync_one`` each."""
    return _fan_out("scheduling.cycle.sync_one")


@shared_task(name="scheduling.cycle.sync_one", time_limit=120, soft_time_limit=100, ignore_result=True)
def sync_one(cluster_id: int | None = None) -> dict:
    """Sync one cluster, under that cluster's own lock (two syncs of one cluster never overlap; syncs of
    different clusters run side by side)."""
    cluster = _cluster_row(cluster_id)
    if cluster is None:
        return {"gone": 1}
    with exclusive(f"cluster-sync-{cluster.name}") as acquired:
        if not acquired:
            return {"skipped": 1}
        return clusters.sync_cluster(cluster=cluster)


@shared_task(name="scheduling.cycle.reconcile", time_limit=60, soft_time_limit=50, ignore_result=True)
def reconcile() -> dict:
    """Reconcile every cluster: one ``reconcile_one`` each."""
    return _fan_out("scheduling.cycle.reconcile_one")


@shared_task(name="scheduling.cycle.reconcile_one", time_limit=300, soft_time_limit=280, ignore_result=True)
def reconcile_one(cluster_id: int | None = None) -> dict:
    cluster = _cluster_row(cluster_id)
    if cluster is None:
        return {"gone": 1}
    with exclusive(f"reconcile-{cluster.name}") as acquired:
        if not acquired:
            return {"skipped": 1}
        return clusters.reconcile(cluster=cluster)
