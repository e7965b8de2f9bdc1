"""Pod states -> job transitions: each job moved by its current attempt's pods (running, succeeded, failed,
preempted, requeued after a platform failure), from a cluster's full inventory or a watcher's one event.

The same code serves the simulated and the Kubernetes backend (and the Kubernetes watcher, which feeds
``apply_pod_states`` one event at a time).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Iterable
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from engine import reasons
from portal import dispatch
from portal.db import retry_on_conflict
from portal.timestamps import from_epoch
from scheduling.backends import get_backend
from scheduling.backends.base import ClusterUnavailable, PodState
from scheduling.models import IN_FLIGHT, Cluster, FailurePolicy, Job, JobState, Node, PreemptionVictim
from scheduling.services.cluster_binding import bound_to, cluster_of, default_cluster, owned_pods
from scheduling.services.jobs import record_event
from scheduling.services.lifecycle import (
    GANG_BROKEN,
    attempt_failed,
    attempt_gone,
    finish,
    first_start,
    requeue,
    start_running,
)
from scheduling.services.resizes import in_size
from scheduling.services.sessions import note_readiness
from scheduling.services.sync_batches import apply_batched

log = logging.getLogger(__name__)

EVICTION_REASONS = {"Evicted", "Preempted", "DisruptionTarget", "TerminationByKubelet"}
PLATFORM_REASONS = {"NodeLost", "Unschedulable", "SchedulerError", "NodeAffinity", "NodeShutdown",
                    "UnexpectedAdmissionError"}
# kube-scheduler's own failures: it keeps retrying the pod by itself (a terminating pod may still hold the
# GPUs for its grace period), so the portal gives the placement up only after this long.
SCHEDULING_REASONS = {"Unschedulable", "SchedulerError"}
SCHEDULING_GRACE = timedelta(seconds=60)
FATAL_WAITING = {"ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"}


def apply_pod_states(states: Iterable[PodState], *, complete: bool = False,
                     cluster: Cluster | None = None, listed: set[tuple[int, int]] | None = None) -> dict[str, int]:
    """Move each job according to its current attempt's pods. ``complete``: ``states`` lists every pod of
    ``cluster``'s active jobs, so an active job there whose eviction was under way and that has no pod left
    is requeued now (other active jobs without pods are ``reconcile``'s: their pods may not have been created
    yet). ``listed``: the (job, attempt) of those evictions as read before the states were (``podless``);
    only they may be requeued so (a job admitted, then chosen as a victim, after the pods were listed has
    pods the list could not show). None: as read now. ``cluster``: where the states come from; only the jobs
    bound to it move (a stray pod of the same attempt on another cluster never moves a job). None: the
    default cluster."""
    cluster = cluster or default_cluster()
    by_job: dict[int, list[PodState]] = defaultdict(list)
    for s in states:
        by_job[s.job_id].append(s)
    counts: dict[str, int] = defaultdict(int)
    jobs = bound_to(Job.objects.filter(state__in=(JobState.ADMITTED, JobState.RUNNING)), cluster).select_related(
        "department", "flavor", "owner", "cluster"
    )
    if len(by_job) <= 1000:  # a watcher's few events; a full inventory also lists every finished job's pods,
        jobs = jobs.filter(pk__in=list(by_job))  # and the active jobs (bounded by capacity) are the fewer rows
    # In primary-key order, many jobs per transaction with the wallets they may settle against locked first
    # (``sync_batches``: the portal's one lock order). A job that changes nothing issues no write. One bad pod
    # or job is logged and skipped: it must not stop the sync of every other job.
    work: list[tuple[Job, list[PodState]]] = []
    for job in jobs.order_by("pk"):
        if job.pk not in by_job:
            continue
        pods = owned_pods(job, by_job[job.pk], cluster)
        if not pods:
            continue
        if not complete and len(pods) < job.all_pods and any(disrupted(p) for p in pods):
            # A watcher's event names one pod. Whether a gang's disruption ends the attempt depends on its other
            # pods: one that still runs must be evicted (its PodDisruptionBudget may refuse), never deleted
            # along with an attempt requeued on the strength of one pod's event.
            try:
                pods = list(get_backend(cluster).attempt_pods(job_id=job.pk, attempt=job.attempt,
                                                              namespace=pods[0].namespace)) or pods
            except ClusterUnavailable as exc:
                log.warning("job %s: the attempt's other pods could not be read (%s); left to the sync", job.pk, exc)
                continue
        work.append((job, pods))
    apply_batched(work, _apply_job, settles=_may_settle, counts=counts)
    if complete:  # evicting jobs (or broken gangs) none of whose pods is listed any more: their eviction is over
        for job in podless(cluster):
            if owned_pods(job, by_job.get(job.pk, ()), cluster) or (
                    listed is not None and (job.pk, job.attempt) not in listed):
                continue
            try:
                gone = retry_on_conflict(lambda j=job: attempt_gone(job=j), what=f"requeue of job {job.pk}")
            except Exception:  # noqa: BLE001 - one job must not stop the others, as above
                log.exception("requeueing evicted job %s failed; the other jobs go on", job.pk)
                counts["errors"] += 1
                continue
            if gone:
                counts["preempted"] += 1
    return dict(counts)


def podless(cluster: Cluster) -> list[Job]:
    """The active jobs on ``cluster`` that are requeued once none of their pods is left: those being evicted
    and the broken gangs, in id order."""
    broken = bound_to(Job.objects.filter(state__in=(JobState.ADMITTED, JobState.RUNNING),
                                         reason_code__in=(GANG_BROKEN, reasons.DISRUPTION_BUDGET)), cluster)
    evicting = {j.pk: j for j in evicting_jobs(cluster)}
    for job in broken.select_related("department", "flavor", "owner", "cluster"):
        evicting.setdefault(job.pk, job)
    return sorted(evicting.values(), key=lambda j: j.pk)


def _may_settle(pods: list[PodState]) -> bool:
    """These pods may end their attempt (and settle its budget): anything but pods that run or wait quietly."""
    return any(disrupted(p) or p.reason in FATAL_WAITING or p.phase == "Succeeded" for p in pods)


def evicting_jobs(cluster: Cluster):
    """Active jobs on ``cluster`` whose current attempt is being evicted (decided, requested or accepted)."""
    ids = PreemptionVictim.objects.filter(
        status__in=IN_FLIGHT, job__state__in=(JobState.ADMITTED, JobState.RUNNING)
    ).values_list("job_id", flat=True)
    return [j for j in bound_to(Job.objects.filter(pk__in=list(ids)), cluster)
            .select_related("department", "flavor", "owner", "cluster")
            .order_by("pk") if PreemptionVictim.objects.filter(job=j, attempt=j.attempt, status__in=IN_FLIGHT).exists()]


def apply_pod_deleted(*, state: PodState, cluster: str = "default") -> str | None:
    """A watcher saw one of the portal's pods go away: re-read that attempt's pods (one list, in the job's own
    namespace) and move the job, so an externally deleted pod or the end of an eviction is acted on now, not at
    the next reconcile. Only a job bound to that cluster moves, and only for a pod of its own namespace: a
    look-alike deleted elsewhere is nothing to the job (and that namespace is never read)."""
    row = Cluster.objects.filter(name=cluster).first() or default_cluster()
    job = bound_to(Job.objects.filter(pk=state.job_id, attempt=state.attempt,
                                      state__in=(JobState.ADMITTED, JobState.RUNNING)), row).select_related(
        "department", "flavor", "owner", "cluster").first()
    if job is None or not owned_pods(job, [state], row):
        return None
    remaining = get_backend(row).attempt_pods(job_id=job.pk, attempt=job.attempt, namespace=state.namespace)
    with transaction.atomic():
        if remaining:
            return _apply_job(job, list(remaining))
        return "requeued" if attempt_gone(job=job) else None


def disrupted(pod: PodState) -> bool:
    """The pod was evicted, lost with its node, failed or is terminating: its attempt may be over."""
    return pod.reason in EVICTION_REASONS or pod.reason in PLATFORM_REASONS or pod.phase == "Failed" or pod.deleting


def _wait_for_the_rest(job: Job, pods: list[PodState], lost: PodState, now: datetime) -> bool:
    """A gang lost ``lost`` (evicted by someone else, its node drained or gone) while other pods of the attempt
    still run. The attempt cannot go on, but its running pods may be covered by a PodDisruptionBudget: they
    are asked to go through the Eviction API (a 429 is honoured: the reconciler asks again on each run), and
    the job keeps its placement until they are gone. Returns True when the job has to wait for that."""
    if job.all_pods < 2:
        return False
    running = [p for p in pods if p is not lost and not disrupted(p) and p.holds_node(now.timestamp())]
    if not running:
        return False
    message = (f"pod {lost.name} is gone ({lost.reason or lost.phase}); evicting the gang's other pods "
               f"({', '.join(p.name for p in running)}) through the Eviction API before it is requeued")
    if Job.objects.filter(pk=job.pk, attempt=job.attempt, state=job.state).exclude(
            reason_code__in=(GANG_BROKEN, reasons.DISRUPTION_BUDGET)).update(reason_code=GANG_BROKEN,
                                                                              reason_message=message[:300]):
        record_event(job=job, kind="eviction", attempt=job.attempt, reason_code=GANG_BROKEN, message=message[:500],
                     data={"pod": lost.name})
        dispatch.after_commit("scheduling.pods.evict", job.pk, job.attempt, lost.namespace, None)
    return True


def _apply_job(job: Job, pods: list[PodState]) -> str | None:
    pods = in_size(job, pods)  # (a resizable job's pods coming or going in a resize are not its state)
    if not pods:
        return None
    if job.has_route:  # a session's or service's readiness, as its pods' Ready conditions say
        note_readiness(job, pods)
    now = timezone.now()
    evicted = [p for p in pods if p.reason in EVICTION_REASONS]
    platform = [p for p in pods if p.reason in PLATFORM_REASONS]
    if evicted:
        if _wait_for_the_rest(job, pods, evicted[0], now):
            return None
        if any(p.holds_node(now.timestamp()) for p in pods):
            # A terminating pod keeps its node's GPUs until it is gone (or its grace period has passed), and a
            # gang's pods whose eviction was refused keep running: the job keeps its placement (so nothing is
            # admitted into those GPUs) and is requeued once every pod has gone. The refused ones are asked
            # again by the reconciler, never deleted behind their PodDisruptionBudget's back.
            return None
        # A gang that lost a pod with its node had its other ranks evicted by the portal itself: the lost node
        # ended the attempt (below), not a preemption, unless the portal had also chosen it as a victim.
        if not platform or PreemptionVictim.objects.filter(job=job, attempt=job.attempt,
                                                           status__in=IN_FLIGHT).exists():
            return "preempted" if requeue(job=job, outcome="preempted", reason=evicted[0].reason,
                                          message=f"pod {evicted[0].name} evicted") else None
    failed = [p for p in pods if p.phase == "Failed"]
    if platform:
        p = platform[0]
        if p.reason in SCHEDULING_REASONS and _scheduler_may_still_bind(job, p, now):
            return None
        if _wait_for_the_rest(job, pods, p, now):
            return None
        # A node lost or shut down under a pod is a retry its owner hears of; a placement kube-scheduler
        # could not bind never started, and is only placed again.
        return "requeued" if requeue(job=job, outcome="platform_failure", reason=p.reason,
                                     message=f"pod {p.name}: {p.reason} {p.message}".strip(),
                                     tell_owner=p.reason not in SCHEDULING_REASONS) else None
    fatal = [p for p in pods if p.reason in FATAL_WAITING]
    alone = restart_pod_roles(job)
    if failed and alone and not fatal and all(p.index in alone for p in failed):
        past = restart_failed_pods(job, failed, alone)
        if past is None:
            failed = []  # replaced alone (or to be, after its back-off): the attempt goes on
        else:
            failed = [past]
    if failed or fatal:
        return attempt_failed(job=job, pods=pods, pod=(failed or fatal)[0])
    # The job ends when the pods of its roles that are not restart-pod have all succeeded (a data worker that
    # serves batches has no end of its own); the restart-pod roles' pods are then removed. A job whose roles
    # are all restart-pod, and a job of one role, end when every pod has succeeded.
    ending = [p for p in pods if p.index not in alone] if len(alone) < job.all_pods else pods
    needed = job.all_pods - (len(alone) if len(alone) < job.all_pods else 0)
    if len(ending) >= needed and all(p.phase == "Succeeded" for p in ending):
        last = max((p.finished_at or 0) for p in ending) or None
        still = [p for p in pods if p.index in alone and p.phase != "Succeeded"] if ending is not pods else []
        message = "all pods completed" if not still else (
            f"the pods of its roles that are not restart-pod completed; {len(still)} restart-pod pod(s) ended")
        done = finish(job=job, state=JobState.SUCCEEDED, exit_code=0, reason="Completed", message=message,
                      finished_at=from_epoch(last), started_at=from_epoch(first_start(pods)))
        if done and still:
            dispatch.after_commit("scheduling.pods.remove", job.pk, job.attempt, still[0].namespace,
                                  cluster_of(job).name, False)
        return "succeeded" if done else None
    if job.state == JobState.ADMITTED and any(p.phase in ("Running", "Succeeded") for p in pods):
        if start_running(job=job, nodes=sorted({p.node or "?" for p in pods}),
                         started_at=from_epoch(first_start(pods)) or timezone.now()):
            return "running"
    return None


def _scheduler_may_still_bind(job: Job, pod: PodState, now: datetime) -> bool:
    """kube-scheduler retries an unschedulable pod by itself as soon as resources free up (a terminating
    victim's GPUs, typically), so a fresh failure is waited on, for ``SCHEDULING_GRACE`` from the condition's
    transition. Not when a node of the placement has left the inventory: that placement can never bind."""
    if pod.since is None or now.timestamp() - pod.since >= SCHEDULING_GRACE.total_seconds():
        return False
    placement = set(job.placement or ())
    cluster = cluster_of(job).name
    known = set(Node.objects.filter(cluster__name=cluster, name__in=placement).values_list("name", flat=True))
    return placement <= known


# The timeline's word for a failed pod of a restart-pod role replaced alone.
POD_RESTARTED = "pod_restarted"
POD_RESTART_BACKOFF_MAX_S = 300


def restart_pod_roles(job: Job) -> dict[int, str]:
    """The pods of the job's ``restart-pod`` roles, by index (numbered role by role), with their role's name;
    empty for a job of one role (its one role ends the attempt as every gang's pod does)."""
    if job.role_count < 2:
        return {}
    out: dict[int, str] = {}
    at = 0
    for name, pods, policy in job.roles.order_by("index").values_list("name", "pods", "failure_policy"):
        if policy == FailurePolicy.RESTART_POD:
            out.update((i, name) for i in range(at, at + pods))
        at += pods
    return out


def restart_failed_pods(job: Job, failed: list[PodState], alone: dict[int, str]) -> PodState | None:
    """Replace the failed pods of restart-pod roles alone: each replacement is counted on the timeline
    (``pod_restarted``), at most ``POD_RESTART_LIMIT`` per attempt, the first at once and each later one
    ``POD_RESTART_BACKOFF_S`` after the one before, doubled each time (at most 5 minutes), so that a worker
    that fails at once is not remade in a loop. Returns the pod past the limit (it ends the attempt), else None."""
    done = list(job.events.filter(attempt=job.attempt, reason_code=POD_RESTARTED).order_by("at")
                .values_list("at", "data"))
    asked = {((d or {}).get("pod"), (d or {}).get("failed_at")) for _, d in done}
    count = len(done)
    now = timezone.now()
    for pod in failed:
        if (pod.name, pod.finished_at) in asked:
            continue  # its replacement is on its way
        if count >= settings.POD_RESTART_LIMIT:
            return pod
        if count:
            wait = min(POD_RESTART_BACKOFF_MAX_S, settings.POD_RESTART_BACKOFF_S * 2 ** (count - 1))
            if now < done[-1][0] + timedelta(seconds=wait):
                continue  # in its back-off: asked again on a later sync
        count += 1
        role = alone[pod.index]
        message = (f"pod {pod.name} of role {role} failed ({pod.reason or 'error'}, exit code {pod.exit_code}); "
                   f"replaced alone, restart {count} of at most {settings.POD_RESTART_LIMIT} in this attempt")
        record_event(job=job, kind="pod", attempt=job.attempt, reason_code=POD_RESTARTED, message=message[:500],
                     data={"pod": pod.name, "index": pod.index, "role": role, "failed_at": pod.finished_at,
                           "exit_code": pod.exit_code, "reason": pod.reason, "restarts": count}, at=now)
        done.append((now, {}))
        dispatch.after_commit("scheduling.pods.replace", job.pk, job.attempt, pod.index)
    return None
