"""The pod side of a job's lifecycle, as the Celery tasks run it: create an attempt's pods, start (admit) them
on their placement, evict them, delete or remove them.

Each use case takes ids, re-reads the database and does nothing when the job moved on (a stale attempt, a
cancelled job), so running it twice is harmless. Cluster errors are raised for the task to retry with back-off.
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, replace

from django.db.models import Exists, OuterRef
from django.utils import timezone

from engine import reasons
from scheduling.backends import get_backend
from scheduling.backends.base import (
    EVERY_OBJECT,
    SIZE_ANNOTATION,
    AttemptObjects,
    BackendError,
    ClusterBackend,
    ClusterUnavailable,
    EvictionOutcome,
    InvalidPodSpec,
    PodSet,
    QuotaExceeded,
)
from scheduling.backends.kube.podspec import size_text
from scheduling.models import IN_FLIGHT, Cluster, Job, JobState, NamespaceQuotaRefusal, PreemptionVictim
from scheduling.services import logs, namespace_quotas, podsets, resizes, run_cache
from scheduling.services.cluster_binding import cluster_of, default_cluster
from scheduling.services.jobs import namespace_for, pods_at_submission, record_event
from scheduling.services.lifecycle import finish
from workloads.models import DepartmentSecret

log = logging.getLogger(__name__)


def _jobs(*, starting: bool = True):
    """Jobs as the pod side reads them: with the rows their pod set needs and, to start them (``starting``),
    whether a namespace quota refusal of the current attempt is in force (``quota_refused``: without one,
    claiming the start reads nothing more). Building this query costs more CPU than running it, the
    subquery a third of it: a create leaves it out."""
    jobs = Job.objects.select_related("department", "flavor", "owner", "cluster", "array")  # array: a task's size
    if not starting:
        return jobs
    refused = NamespaceQuotaRefusal.objects.filter(job=OuterRef("pk"), attempt=OuterRef("attempt"),
                                                   cleared_at__isnull=True)
    return jobs.annotate(quota_refused=Exists(refused))


def read_jobs(pairs, *, starting: bool = True) -> dict[int, Job]:
    """The jobs of a message's (job id, attempt) pairs, in one query, and every secret of their departments in
    one more (kept for the run, see ``run_cache``): what each pair's pods are built from. Each pair's state
    and attempt are still checked on their own before anything is made. ``starting``: see ``_jobs``."""
    jobs = _jobs(starting=starting).in_bulk({int(job_id) for job_id, _ in pairs})
    departments = {job.department_id for job in jobs.values()}
    rows: dict[int, list] = {d: [] for d in departments}
    for secret in DepartmentSecret.objects.filter(department_id__in=departments):
        rows[secret.department_id].append(secret)
    for department_id, secrets in rows.items():
        run_cache.prime(podsets.department_secrets_key(department_id), secrets)
    return jobs


def _job(job_id: int, attempt: int, states, read: dict[int, Job] | None = None, *, starting: bool = True
         ) -> Job | None:
    """The job if its current attempt is ``attempt`` in one of ``states``; from ``read`` (``read_jobs``) when
    given, else read now."""
    job = read.get(job_id) if read is not None else _jobs(starting=starting).filter(pk=job_id).first()
    if job is None or job.attempt != attempt or job.state not in states:
        return None
    return job


def _mark_unreachable(job: Job, exc: Exception) -> None:
    if job.state == JobState.QUEUED and job.reason_code != reasons.CLUSTER_UNREACHABLE:
        Job.objects.filter(pk=job.pk, state=JobState.QUEUED, attempt=job.attempt).update(
            reason_code=reasons.CLUSTER_UNREACHABLE, reason_message=f"{reasons.CODES[reasons.CLUSTER_UNREACHABLE]} "
            f"({str(exc)[:120]})"
        )


def create_pods(*, job_id: int, attempt: int, read: dict[int, Job] | None = None) -> str:
    """Create a queued attempt's gated pods where they are made at submission (the simulated cluster).
    ``read``: the message's jobs as ``read_jobs`` read them."""
    job = _job(job_id, attempt, (JobState.QUEUED, JobState.ADMITTED), read, starting=False)
    if job is None:
        return "stale"
    if job.state == JobState.QUEUED and not pods_at_submission():
        return "at_admission"  # made on the cluster the admission binds the job to, not before
    try:
        get_backend(cluster_of(job)).ensure_pods(podsets.podset_for(job))
    except ClusterUnavailable as exc:
        _mark_unreachable(job, exc)
        raise
    if job.reason_code == reasons.CLUSTER_UNREACHABLE:
        Job.objects.filter(pk=job.pk, reason_code=reasons.CLUSTER_UNREACHABLE).update(
            reason_code=reasons.QUEUED, reason_message=reasons.CODES[reasons.QUEUED]
        )
    return "created"


@dataclass
class Admission:
    """One admitted attempt's start, checked and claimed on the caller's thread: the job as re-read, its
    cluster's backend, the quota try it holds and the pod set to create. ``run`` makes the API calls and touches
    no database, so a worker may overlap several admissions' runs on other threads (``overlaps``) while every
    check, claim and state change stays on its own thread and connection."""

    job: Job
    cluster: Cluster
    backend: ClusterBackend
    claim: namespace_quotas.QuotaTry
    podset: PodSet
    fresh: bool

    @property
    def overlaps(self) -> bool:
        return self.backend.overlapping_starts

    def run(self) -> None:
        self.backend.start(self.podset, tuple(self.job.placement), fresh=self.fresh)


def admit_pods(*, job_id: int, attempt: int, fresh: bool) -> tuple[str, float | None]:
    """Start the admitted attempt's pods on its placement (create what is missing, ungate). ``fresh``: the
    cycle's own first try, when the backend may create without reading first; retries and the reconciler
    read what exists before creating anything.

    Returns the outcome and, when a namespace quota refused the pods, the seconds until the attempt's one
    retry chain tries again (the caller schedules that try)."""
    admission = claim_admission(job_id=job_id, attempt=attempt, fresh=fresh)
    if isinstance(admission, str):
        return admission, None
    try:
        admission.run()
    except BackendError as exc:
        return settle_admission(admission, exc)
    return settle_admission(admission, None)


def claim_admission(*, job_id: int, attempt: int, fresh: bool, read: dict[int, Job] | None = None,
                    recent: bool = False) -> Admission | str:
    """Check that the attempt is still admitted (not requeued because its node or cluster went, not cancelled)
    and take its quota try: the :class:`Admission` to run, or the outcome when there is nothing to start
    ("stale", or "backing_off" when this attempt's one retry chain has its next try later: no second chain).

    ``read``: the message's jobs as ``read_jobs`` read them. A backend whose starts overlap (API calls on other
    threads, a whole message in flight) has its job re-read here, right before its calls start, unless
    ``recent``: the caller checked it against the database since its last wait on calls in flight
    (``still_as_read``); one whose starts run here one after another, within milliseconds of that read, uses
    it."""
    job = _job(job_id, attempt, (JobState.ADMITTED,), read)
    if job is None:
        return "stale"
    cluster = cluster_of(job)  # the cluster the admission bound this attempt to
    backend = get_backend(cluster)
    if read is not None and backend.overlapping_starts and not recent:
        job = _job(job_id, attempt, (JobState.ADMITTED,))
        if job is None:
            return "stale"
        cluster = cluster_of(job)
        backend = get_backend(cluster)
    # No refusal in force when the job was read: nothing to claim (a chain started since by a duplicate run
    # clears its own refusal on its next try, which finds the pods there)
    claim = namespace_quotas.quota_try(job=job, now=timezone.now()) if job.quota_refused else \
        namespace_quotas.QuotaTry()
    if claim is None:
        return "backing_off"
    return Admission(job=job, cluster=cluster, backend=backend, claim=claim, podset=podsets.podset_for(job),
                     fresh=fresh)


def still_as_read(read: dict[int, Job], job_ids) -> dict[int, Job]:
    """``read`` without the jobs among ``job_ids`` that moved since it was read (another state or attempt:
    cancelled, requeued because their node or cluster went, started by another run): one light query of
    three columns for them all, instead of re-reading each job whole right before its start. What else an
    admitted attempt's start reads (its placement, its cluster, its pod set) is fixed for the attempt."""
    ids = {int(job_id) for job_id in job_ids}
    now = {pk: (state, attempt) for pk, state, attempt in
           Job.objects.filter(pk__in=ids).values_list("pk", "state", "attempt")}
    return {pk: job for pk, job in read.items() if pk not in ids or now.get(pk) == (job.state, job.attempt)}


def settle_admission(admission: Admission, error: BaseException | None) -> tuple[str, float | None]:
    """What the admission's run came to (``error`` None: it started), on the claiming thread: the outcome and,
    after a namespace quota refusal, the seconds until the retry chain's next try. An error to retry (the
    cluster unreachable, any other backend error) is raised again, its quota try given back first when the
    cluster never answered."""
    job = admission.job
    if error is None:
        if admission.claim.refusal is not None:  # a start refused before is let in now: its refusal is over
            namespace_quotas.quota_admitted(job=job)
        return "admitted", None
    if isinstance(error, ClusterUnavailable):
        namespace_quotas.quota_try_unanswered(claim=admission.claim)
    elif isinstance(error, QuotaExceeded):
        _quota_refused(job, error)
        return "quota_backoff", namespace_quotas.quota_refused(job=job, cluster=admission.cluster, exc=error,
                                                               now=timezone.now())
    elif isinstance(error, InvalidPodSpec):
        # The cluster refuses these pods as they are (a missing namespace, a stricter PodSecurity level):
        # retrying cannot help, so the job fails with the API server's reason and gives its GPUs back. Any pod
        # of a gang created before the refusal is an orphan the reconciler deletes.
        finish(job=job, state=JobState.FAILED, exit_code=None, reason="InvalidPodSpec",
               message=f"the cluster refused the job's pods: {error}"[:500], finished_at=None)
        return "refused", None
    raise error


def _quota_refused(job: Job, exc: Exception) -> None:
    """A namespace ResourceQuota refused the admitted job's pods: say so on the job once per attempt (the task
    backs off and the reconciler gives the GPUs back after a bounded wait), never silently retry."""
    log.warning("job %s attempt %s: namespace quota refused its pods: %s", job.pk, job.attempt, exc)
    if not job.events.filter(attempt=job.attempt, reason_code=reasons.NAMESPACE_QUOTA).exists():
        record_event(job=job, kind="pod", attempt=job.attempt, reason_code=reasons.NAMESPACE_QUOTA,
                     message=f"the namespace's ResourceQuota refused the job's pods; retrying with back-off "
                             f"({str(exc)[:300]})")


def evict_pods(*, job_id: int, attempt: int, namespace: str, preemption_id: int | None) -> str:
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
    cluster = cluster_of(job)
    now = timezone.now()
    if victim is not None and victim.status == PreemptionVictim.Status.DECIDED:
        if victim.notice_ends_at is not None and victim.checkpoint_at is None and now < victim.notice_ends_at:
            return "noticed"  # told first: its eviction waits for its answer or its notice's end
        changes: dict = {"status": PreemptionVictim.Status.REQUESTED, "eviction_requested_at": now}
        if victim.checkpoint_at is not None:  # lost work counts from the checkpoint its answer announced
            changes["gpu_seconds_lost"] = int(max(0.0, (now - victim.checkpoint_at).total_seconds()) * job.total_gpus)
        PreemptionVictim.objects.filter(pk=victim.pk, status=PreemptionVictim.Status.DECIDED).update(**changes)
        record_event(job=job, kind="eviction", attempt=attempt, reason_code="eviction_requested",
                     message="eviction requested through the Eviction API", data={"preemption_id": preemption_id})
    outcome = get_backend(cluster).evict(job_id=job_id, attempt=attempt, namespace=namespace)
    if outcome.status == "blocked":
        return _eviction_refused(job, attempt, victim, preemption_id, outcome)
    if victim is not None and outcome.status == "accepted":
        PreemptionVictim.objects.filter(pk=victim.pk, status=PreemptionVictim.Status.REQUESTED).update(
            status=PreemptionVictim.Status.EVICTED, evicted_at=now)
    record_event(job=job, kind="eviction", attempt=attempt, reason_code=f"eviction_{outcome.status}",
                 message=f"eviction {outcome.status}: {', '.join(outcome.pods)}"[:500],
                 data={"preemption_id": preemption_id})
    return outcome.status


def _eviction_refused(job: Job, attempt: int, victim: PreemptionVictim | None, preemption_id: int | None,
                      outcome: EvictionOutcome) -> str:
    """A PodDisruptionBudget refused the eviction: before any pod went the victim is BLOCKED (the next cycle
    chooses again); after some went the gang is broken, and the job says what it waits for."""
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
                     message=message[:500], data={"preemption_id": preemption_id, "pod": pod})
    if partial:  # the job's own state says what it waits for, not only its timeline
        Job.objects.filter(pk=job.pk, attempt=attempt, state__in=(JobState.ADMITTED, JobState.RUNNING)).update(
            reason_code=reasons.DISRUPTION_BUDGET, reason_message=message[:300])
    return "partly_blocked" if partial else "blocked"


def _pods_cluster(job: Job | None, attempt: int, cluster: str | None) -> str | None:
    """The cluster whose pods of the attempt go (``cluster``, else the one the job is bound to, else the
    default one), or None when they are kept: never the pods of a live attempt on the cluster it is bound to,
    and a queued attempt's pods are kept too (its admission may be adopting them right now)."""
    if job is not None and job.attempt == attempt:
        if job.state == JobState.QUEUED:
            return None
        if job.state in (JobState.ADMITTED, JobState.RUNNING) and (
                cluster is None or cluster_of(job).name == cluster):
            return None
    if cluster is None:
        cluster = cluster_of(job).name if job is not None else default_cluster().name
    return cluster


def attempt_objects(job: Job | None) -> AttemptObjects:
    """What the job's attempts have besides their pods (every kind when the job is gone: nothing to go by). The
    fields these follow are fixed at submission, so they hold for every attempt of the job."""
    if job is None:
        return EVERY_OBJECT
    return AttemptObjects(service=job.pods > 1 or job.has_route, route=job.has_route,
                          budget=job.pdb_min_available is not None)


def delete_pods(*, job_id: int, attempt: int, namespace: str, cluster: str | None = None) -> str:
    """Delete an attempt's pods on ``cluster`` (None: the cluster the job is bound to, else the default one)."""
    job = Job.objects.select_related("cluster").filter(pk=job_id).first()
    target = _pods_cluster(job, attempt, cluster)
    if target is None:
        return "live"  # never delete the pods of a live attempt
    if job is None or job.attempt != attempt or cluster_of(job).name == target:
        logs.keep_attempt_log(job_id=job_id, attempt=attempt)  # the pods take the cluster's copy of the log along
    get_backend(target).delete_pods(job_id=job_id, attempt=attempt, namespace=namespace,
                                    objects=attempt_objects(job))
    return "deleted"


def replace_pod(*, job_id: int, attempt: int, index: int) -> str:
    """Make the failed pod ``index`` of a running attempt again, alone, on the node it had (failure policy
    ``restart-pod``, decided in ``pod_states``). ``stale`` when the attempt is no longer running; ``waiting``
    while the old pod is still terminating (BackendError, so the task is retried with its back-off)."""
    job = _job(job_id, attempt, (JobState.ADMITTED, JobState.RUNNING))
    if job is None:
        return "stale"
    podset = podsets.podset_for(job)
    if not get_backend(cluster_of(job)).replace_pod(podset, index, tuple(job.placement or ())):
        raise BackendError(f"pod {podset.pod_name(index)} is still terminating; replaced once it is gone")
    return "replaced"


def remove_pods(*, job_id: int, attempt: int, namespace: str, cluster: str | None = None,
                failed: bool = False) -> str:
    """Clear the pods of an attempt that has ended (requeued, finished, orphaned) on ``cluster``: the ones that no
    longer run are deleted, the ones that still run are evicted through the Eviction API. A refusal (a
    PodDisruptionBudget) is recorded on the job once per pod and left running; the reconciler asks again on its
    next run, for as long as the pods are there. Never a live attempt on the cluster it is bound to."""
    job = Job.objects.select_related("cluster", "department", "flavor", "owner").filter(pk=job_id).first()
    target = _pods_cluster(job, attempt, cluster)
    if target is None:
        return "live"
    if job is None or job.attempt != attempt or cluster_of(job).name == target:
        logs.keep_attempt_log(job_id=job_id, attempt=attempt)
    outcome = get_backend(target).remove_pods(job_id=job_id, attempt=attempt, namespace=namespace, failed=failed,
                                              objects=attempt_objects(job))
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


def resize_pods(*, job_id: int, attempt: int, resize_id: int) -> str:
    """Add or remove the pods of a resize whose checkpoint has come (``resizes``), and once every pod of the
    new size runs and every removed one is gone, apply it to the job. ``pending`` (pods on their way) and
    ``blocked`` (a PodDisruptionBudget refused an eviction) are asked again by the next cycles; a grow the
    cluster keeps refusing is rolled back, its new pods (which never ran) deleted, so that no attempt is left
    with pods of two sizes."""
    job = resizes.current(job_id, attempt, resize_id)
    if job is None:
        return "stale"
    before, after = tuple(job.placement or ()), tuple(resizes.target(job))
    podset = replace(podsets.podset_for(job), pods=len(after))
    backend = get_backend(cluster_of(job))
    if len(after) > len(before) and job.started_at is not None:
        # the new ranks end with the attempt, not a whole max runtime after they start (their deadline)
        ran = (timezone.now() - job.started_at).total_seconds() * float(getattr(backend, "speedup", 1.0) or 1.0)
        podset = replace(podset, max_runtime_s=max(1, int(job.max_runtime_s - ran)))
    try:
        outcome = backend.resize(podset, before, after)
    except BackendError as exc:
        log.warning("job %s attempt %s: resize %s refused: %s", job_id, attempt, resize_id, exc)
        if resizes.failed_try(job_id=job_id, attempt=attempt, resize_id=resize_id, error=str(exc)) != "roll_back":
            return "retry"
        for index in range(len(before), len(after)):
            backend.delete_pod(job_id=job_id, attempt=attempt, namespace=podset.namespace, index=index)
        resizes.roll_back(job_id=job_id, attempt=attempt, resize_id=resize_id)
        return "rolled_back"
    if outcome.status == "done":
        return "resized" if resizes.finish(job_id=job_id, attempt=attempt, resize_id=resize_id) else "stale"
    if outcome.status == "blocked":
        pod = outcome.pods[0] if outcome.pods else ""
        if not job.events.filter(attempt=attempt, reason_code=reasons.DISRUPTION_BUDGET, data__pod=pod,
                                 data__resize=resize_id).exists():
            record_event(job=job, kind="eviction", attempt=attempt, reason_code=reasons.DISRUPTION_BUDGET,
                         message=f"shrinking to {len(after)} pods: the eviction of {pod} was refused "
                                 f"({outcome.message or 'a PodDisruptionBudget forbids it'}); asking again, "
                                 "never deleting it"[:500], data={"pod": pod, "resize": resize_id})
    return outcome.status


def tell_resize(*, job_id: int, attempt: int, resize_id: int) -> str:
    """Tell a job that writes a checkpoint when asked (``notice_s``) that a resize waits for one: its size file
    says the size it goes to and by when (``checkpoint_by``: the notice's end, when the resize goes ahead
    anyway); it may answer "checkpoint written" sooner. Nothing once the resize has moved on."""
    job = Job.objects.select_related("department", "flavor", "owner", "cluster").filter(
        pk=job_id, attempt=attempt, state__in=(JobState.ADMITTED, JobState.RUNNING)).first()
    if job is None or not job.resize or job.resize.get("id") != resize_id or job.resize.get("state") != "decided":
        return "stale"
    podset = podsets.podset_for(job)
    told = {**json.loads(size_text(podset)), "resize": {"to": job.resize["to"], "checkpoint_by": job.resize["due_at"],
                                                        "answer": "POST $PORTAL_NOTICE_ANSWER_URL"}}
    pods = get_backend(cluster_of(job)).notify(job_id=job_id, attempt=attempt, namespace=podset.namespace,
                                               annotations={SIZE_ANNOTATION: json.dumps(told, sort_keys=True)})
    return "told" if pods else "no_pod"


def delete_department_secret(*, department_slug: str, secret_name: str, kube_name: str) -> list[str]:
    """Delete the portal's copy of a department secret that was deleted, on every cluster (in the
    department's namespace there). Nothing when the department declared a secret of that name again since:
    its next pod start writes it anew anyway."""
    if DepartmentSecret.objects.filter(department__slug=department_slug, name=secret_name).exists():
        return []
    deleted = []
    for cluster in list(Cluster.objects.order_by("name")) or [default_cluster()]:
        namespace = namespace_for(department_slug, cluster)
        if get_backend(cluster).delete_owned_secret(namespace=namespace, name=kube_name):
            deleted.append(f"{cluster.name}/{namespace}")
    return deleted
