"""Cluster-facing use cases: PodSets from jobs, inventory sync, pod-state -> job transitions, reconcile (the
clusters an admin declares, and their node groups, are ``cluster_config``).

The same code serves the simulated and the Kubernetes backend (and the Kubernetes watcher, which feeds
``apply_pod_states`` one event at a time).
"""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from portal import dispatch
from portal.audit import audit
from portal.db import retry_on_conflict
from portal.timestamps import from_epoch
from quotas.models import Flavor
from scheduling.backends import creates_pods_at_admission, get_backend
from scheduling.backends.base import ClusterBackend, ClusterUnavailable, Inventory, PodSet, PodState
from scheduling.core import reasons, tiers
from scheduling.models import (
    IN_FLIGHT,
    Cluster,
    ClusterState,
    Job,
    JobState,
    Node,
    PreemptionVictim,
)
from scheduling.services import run_cache
from scheduling.services.cluster_binding import bound_to, cluster_of, cluster_row, default_cluster, federated
from scheduling.services.jobs import namespace_for, record_event
from scheduling.services.lifecycle import (
    GANG_BROKEN,
    attempt_failed,
    attempt_gone,
    finish,
    requeue,
    start_running,
)
from scheduling.services.locks import exclusive
from scheduling.services.namespace_quotas import ADMIT_RETRY, _quota_chain_pending, recheck_quota_refusals
from scheduling.services.policy import current_policy
from scheduling.services.sessions import note_readiness
from scheduling.services.sync_batches import apply_batched
from scheduling.services.workload import job_workload
from workloads.services import secrets as workload_secrets

log = logging.getLogger(__name__)

EVICTION_REASONS = {"Evicted", "Preempted", "DisruptionTarget", "TerminationByKubelet"}
PLATFORM_REASONS = {"NodeLost", "Unschedulable", "SchedulerError", "NodeAffinity", "NodeShutdown",
                    "UnexpectedAdmissionError"}
# kube-scheduler's own failures: it keeps retrying the pod by itself (a terminating pod may still hold the
# GPUs for its grace period), so the portal gives the placement up only after this long.
SCHEDULING_REASONS = {"Unschedulable", "SchedulerError"}
SCHEDULING_GRACE = timedelta(seconds=60)
FATAL_WAITING = {"ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull", "CreateContainerConfigError"}
# A job admitted longer ago than this whose pods are missing from the cluster is treated as lost.
LOST_GRACE = timedelta(seconds=60)
# An admitted job whose pods are still not all there after this long gives its GPUs back and waits in the
# queue again (e.g. a full namespace quota); before that its start is asked for again after ADMIT_RETRY.
ADMIT_GIVE_UP = timedelta(minutes=5)
# Ended attempts whose pods one ``scheduling.pods.remove_many`` message clears (each an Eviction API call or a
# delete per pod, well inside the task's time limit).
ORPHANS_PER_MESSAGE = 100


def podset_for(job: Job) -> PodSet:
    policy, _ = current_policy()
    cluster = cluster_of(job)
    return PodSet(
        job_id=job.pk,
        attempt=job.attempt,
        namespace=namespace_for(job.department.slug, cluster),
        department=job.department.slug,
        job_name=job.name,
        owner=job.owner.get_username(),
        image=job.image,
        command=tuple(job.command),
        env=tuple(sorted((str(k), str(v)) for k, v in (job.env or {}).items())),
        pods=job.pods,
        gpus_per_pod=job.gpus_per_pod,
        gpu_resource=job.flavor.resource_name,
        node_labels=tuple(sorted((str(k), str(v)) for k, v in (job.flavor.node_labels or {}).items())),
        cpu_millicores=job.cpu_millicores,
        memory_mib=job.memory_mib,
        tier=job.tier,
        priority_class=policy.priority_classes.get(job.tier) or tiers.BY_NAME[job.tier].priority_class,
        urgency=job.urgency,
        task_type=job.task_type,
        user_tier=job.user_tier,
        deadline=job.deadline.isoformat() if job.deadline else None,
        bid=job.bid,
        max_runtime_s=job.max_runtime_s,
        termination_grace_s=job.termination_grace_s,
        checkpoint_interval_s=job.checkpoint_interval_s,
        pdb_min_available=job.pdb_min_available,
        cluster=cluster.name,
        workload=job_workload(job, cluster.name),
        secrets=workload_secrets.resolve(department_id=job.department_id, uses=job.secrets or [],
                                         department_rows=run_cache.peek(department_secrets_key(job.department_id))),
        kind=job.kind,
        port=job.port,
        readiness_path=job.readiness_path or "/",
        array_id=job.array_id,
        array_index=job.array_index,
        array_count=job.array.size if job.array_id else None,
    )


def department_secrets_key(department_id: int) -> str:
    """Where a pod-worker run keeps every secret of a department, read once for all of a message's jobs."""
    return f"department_secrets:{department_id}"


def ensure_priority_classes() -> list[str]:
    policy, _ = current_policy()
    # the policy may rename a tier's class, never its value (the tier table's)
    classes = {policy.priority_classes.get(t.name, t.priority_class): t.priority_value for t in tiers.TABLE}
    changed: list[str] = []
    for cluster in Cluster.objects.all() or [default_cluster()]:
        try:
            changed += get_backend(cluster).ensure_priority_classes(classes)
        except ClusterUnavailable as exc:  # one cluster down must not keep the others' classes from being made
            log.warning("cluster %s: PriorityClasses not ensured (%s)", cluster.name, exc)
    return changed


# ------------------------------------------------------------------------------------------ inventory


def sync_cluster(*, cluster: Cluster | None = None) -> dict[str, int]:
    """Read one cluster once (nodes + the portal's pods), store its nodes, and move the jobs bound to it from
    their pods. Every cluster is synced on its own (``scheduling.cycle.sync_one``): one that is down or slow
    marks itself unreachable and holds up no other."""
    cluster = cluster or default_cluster()
    read = _read_inventory(cluster)
    if read is None:
        return {"unreachable": 1}
    backend, inv = read
    mark_reachable(cluster=cluster)
    if backend.owns_inventory:
        store_nodes(cluster=cluster, inventory=inv, terminating=_terminating_gpus(inv.pods))
    counts = apply_pod_states(inv.pods, complete=True, cluster=cluster)
    if recheck_quota_refusals(cluster=cluster, backend=backend):
        counts["quota_refusals_cleared"] = 1
    if drain_finished(cluster=cluster):
        counts["drained"] = 1
    return counts


def _read_inventory(cluster: Cluster) -> tuple[ClusterBackend, Inventory] | None:
    """The cluster's backend and one read of its inventory; None (and the cluster marked unreachable) when it
    does not answer."""
    try:
        backend = get_backend(cluster)
        return backend, backend.inventory()
    except ClusterUnavailable as exc:
        mark_unreachable(cluster=cluster, error=str(exc))
        return None


def _unreachable_message(cluster: Cluster) -> str:
    return (f"cluster {cluster.name} is unreachable: the job's pods there are left as they are (never started "
            "elsewhere) until it answers again")


def mark_unreachable(*, cluster: Cluster, error: str) -> int:
    """The cluster's API did not answer: say so on the cluster and on every job running there (once per
    outage, on its timeline too). Its running jobs are not requeued: their pods may still run, and starting
    them elsewhere would run the work twice. Returns how many jobs were marked."""
    Cluster.objects.filter(pk=cluster.pk).update(reachable=False, last_error=error[:2000])
    log.warning("cluster %s unreachable: %s", cluster.name, error[:300])
    message = _unreachable_message(cluster)
    marked = 0
    active = bound_to(Job.objects.filter(state__in=(JobState.ADMITTED, JobState.RUNNING)), cluster)
    for job in active.exclude(reason_code=reasons.CLUSTER_UNREACHABLE).select_related("department", "flavor",
                                                                                     "owner"):
        if Job.objects.filter(pk=job.pk, attempt=job.attempt, state=job.state).exclude(
                reason_code=reasons.CLUSTER_UNREACHABLE).update(reason_code=reasons.CLUSTER_UNREACHABLE,
                                                                reason_message=message[:300]):
            record_event(job=job, kind="note", reason_code=reasons.CLUSTER_UNREACHABLE, message=message,
                         data={"cluster": cluster.name})
            marked += 1
    return marked


def mark_reachable(*, cluster: Cluster) -> None:
    """The cluster answered: clear its error, and the unreachable reason of the jobs running there."""
    Cluster.objects.filter(pk=cluster.pk).update(reachable=True, last_error="", last_sync_at=timezone.now())
    active = bound_to(Job.objects.filter(state__in=(JobState.ADMITTED, JobState.RUNNING),
                                         reason_code=reasons.CLUSTER_UNREACHABLE), cluster)
    for job in active.select_related("department", "flavor", "owner"):
        message = f"cluster {cluster.name} answers again"
        if Job.objects.filter(pk=job.pk, attempt=job.attempt, reason_code=reasons.CLUSTER_UNREACHABLE).update(
                reason_code=job.state, reason_message=message):
            record_event(job=job, kind="note", reason_code="cluster_reachable", message=message,
                         data={"cluster": cluster.name})


def drain_finished(*, cluster: Cluster) -> bool:
    """A draining cluster on which no job of the portal is active any more becomes cordoned (audited): its
    running work has finished or moved, and it still takes no new admissions."""
    if cluster.state != ClusterState.DRAINING:
        return False
    if bound_to(Job.objects.filter(state__in=(JobState.ADMITTED, JobState.RUNNING)), cluster).exists():
        return False
    with transaction.atomic():
        if not Cluster.objects.filter(pk=cluster.pk, state=ClusterState.DRAINING).update(
                state=ClusterState.CORDONED):
            return False
        audit(actor=None, action="cluster.update", obj=cluster, old={"state": ClusterState.DRAINING},
              new={"state": ClusterState.CORDONED}, comment="drained: no job of the portal runs there any more")
    cluster.state = ClusterState.CORDONED
    return True


def _terminating_gpus(pods: Iterable[PodState]) -> dict[tuple[str, str], int]:
    """GPUs still held, per (node, resource), by the portal's pods that no active job attempt accounts for: a
    cancelled or requeued attempt's pods keep their GPUs while they terminate (up to their grace period), and
    kube-scheduler places nothing into them until they are gone. An active attempt's pods (a victim being
    evicted) are counted through its job's placement already."""
    now = timezone.now().timestamp()
    holding = [p for p in pods if p.deleting and p.node and p.gpus and p.holds_node(now)]
    if not holding:
        return {}
    live = set(Job.objects.filter(pk__in={p.job_id for p in holding},
                                  state__in=(JobState.ADMITTED, JobState.RUNNING)).values_list("pk", "attempt"))
    out: dict[tuple[str, str], int] = defaultdict(int)
    for p in holding:
        if (p.job_id, p.attempt) not in live:
            out[(p.node, p.gpu_resource)] += p.gpus
    return dict(out)


def store_nodes(*, cluster: Cluster, inventory: Inventory, terminating: dict[tuple[str, str], int] | None = None
                ) -> None:
    """Store the cluster's nodes. ``terminating``: GPUs per (node, resource) that terminating pods of the
    portal's no-longer-active attempts still hold, counted as used by others until those pods are gone."""
    terminating = terminating or {}
    flavors = {f.name: f for f in Flavor.objects.all()}
    seen = set()
    with transaction.atomic():
        existing = {(n.name, n.flavor.name): n for n in Node.objects.filter(cluster=cluster).select_related("flavor")}
        for cn in inventory.nodes:
            flavor = flavors.get(cn.flavor)
            if flavor is None:
                continue
            seen.add((cn.name, cn.flavor))
            used = min(cn.gpus, cn.used_by_others + terminating.get((cn.name, flavor.resource_name), 0))
            values = {"gpus": cn.gpus, "used_by_others": used, "labels": dict(cn.labels),
                      "taints": list(cn.taints), "schedulable": cn.schedulable}
            row = existing.get((cn.name, cn.flavor))
            if row is None:
                Node.objects.create(cluster=cluster, name=cn.name, flavor=flavor, **values)
            elif any(getattr(row, k) != v for k, v in values.items()):
                Node.objects.filter(pk=row.pk).update(**values)
        gone = [n.pk for key, n in existing.items() if key not in seen]
        if gone:
            Node.objects.filter(pk__in=gone).delete()


# ------------------------------------------------------------------------------------------ pod states


def apply_pod_states(states: Iterable[PodState], *, complete: bool = False,
                     cluster: Cluster | None = None) -> dict[str, int]:
    """Move each job according to its current attempt's pods. ``complete``: ``states`` lists every portal
    pod of ``cluster``, so an active job there whose eviction was under way and that has no pod left is
    requeued now (other active jobs without pods are ``reconcile``'s: their pods may not have been created
    yet). ``cluster``: where the states come from; only the jobs bound to it move (a stray pod of the same
    attempt on another cluster never moves a job). None: the default cluster."""
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
        pods = [p for p in by_job[job.pk] if p.attempt == job.attempt]
        if not pods:
            continue
        if not complete and len(pods) < job.pods and any(_disrupted(p) for p in pods):
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
        broken = bound_to(Job.objects.filter(state__in=(JobState.ADMITTED, JobState.RUNNING),
                                             reason_code__in=(GANG_BROKEN, reasons.DISRUPTION_BUDGET)), cluster)
        evicting = {j.pk: j for j in _evicting_jobs(cluster)}
        for job in broken.select_related("department", "flavor", "owner", "cluster"):
            evicting.setdefault(job.pk, job)
        for job in sorted(evicting.values(), key=lambda j: j.pk):
            if any(p.attempt == job.attempt for p in by_job.get(job.pk, ())):
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


def _may_settle(pods: list[PodState]) -> bool:
    """These pods may end their attempt (and settle its budget): anything but pods that run or wait quietly."""
    return any(_disrupted(p) or p.reason in FATAL_WAITING or p.phase == "Succeeded" for p in pods)




def _evicting_jobs(cluster: Cluster):
    """Active jobs on ``cluster`` whose current attempt is being evicted (decided, requested or accepted)."""
    ids = PreemptionVictim.objects.filter(
        status__in=IN_FLIGHT, job__state__in=(JobState.ADMITTED, JobState.RUNNING)
    ).values_list("job_id", flat=True)
    return [j for j in bound_to(Job.objects.filter(pk__in=list(ids)), cluster)
            .select_related("department", "flavor", "owner", "cluster")
            .order_by("pk") if PreemptionVictim.objects.filter(job=j, attempt=j.attempt, status__in=IN_FLIGHT).exists()]




def apply_pod_deleted(*, state: PodState, cluster: str = "default") -> str | None:
    """A watcher saw one of the portal's pods go away: re-read that attempt's pods (one list) and move the job,
    so an externally deleted pod or the end of an eviction is acted on now, not at the next reconcile. Only a
    job bound to that cluster moves."""
    row = Cluster.objects.filter(name=cluster).first() or default_cluster()
    job = bound_to(Job.objects.filter(pk=state.job_id, attempt=state.attempt,
                                      state__in=(JobState.ADMITTED, JobState.RUNNING)), row).select_related(
        "department", "flavor", "owner", "cluster").first()
    if job is None:
        return None
    remaining = get_backend(row).attempt_pods(job_id=job.pk, attempt=job.attempt, namespace=state.namespace)
    with transaction.atomic():
        if remaining:
            return _apply_job(job, list(remaining))
        return "requeued" if attempt_gone(job=job) else None


def _disrupted(pod: PodState) -> bool:
    """The pod was evicted, lost with its node, failed or is terminating: its attempt may be over."""
    return pod.reason in EVICTION_REASONS or pod.reason in PLATFORM_REASONS or pod.phase == "Failed" or pod.deleting




def _wait_for_the_rest(job: Job, pods: list[PodState], lost: PodState, now: datetime) -> bool:
    """A gang lost ``lost`` (evicted by someone else, its node drained or gone) while other pods of the attempt
    still run. The attempt cannot go on, but its running pods may be covered by a PodDisruptionBudget: they
    are asked to go through the Eviction API (a 429 is honoured: the reconciler asks again on each run), and
    the job keeps its placement until they are gone. Returns True when the job has to wait for that."""
    if job.pods < 2:
        return False
    running = [p for p in pods if p is not lost and not _disrupted(p) and p.holds_node(now.timestamp())]
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
    if failed or fatal:
        return attempt_failed(job=job, pods=pods, pod=(failed or fatal)[0])
    if len(pods) >= job.pods and all(p.phase == "Succeeded" for p in pods):
        last = max((p.finished_at or 0) for p in pods) or None
        return "succeeded" if finish(job=job, state=JobState.SUCCEEDED, exit_code=0, reason="Completed",
                                     message="all pods completed", finished_at=from_epoch(last)) else None
    if job.state == JobState.ADMITTED and any(p.phase in ("Running", "Succeeded") for p in pods):
        started = min((p.started_at for p in pods if p.started_at), default=None)
        if start_running(job=job, nodes=sorted({p.node or "?" for p in pods}),
                         started_at=from_epoch(started) or timezone.now()):
            return "running"
    return None


def _broken_gang(job: Job, pods: list[PodState], evicting: set[int]) -> bool:
    """Some of the attempt's pods are evicted or gone (its eviction under way, or a node drained) while
    others still run."""
    running = any(not p.deleting and p.phase not in ("Succeeded", "Failed") for p in pods)
    disrupted = (any(p.reason in EVICTION_REASONS for p in pods) or job.pk in evicting
                 or job.reason_code in (GANG_BROKEN, reasons.DISRUPTION_BUDGET)
                 or (job.state == JobState.RUNNING and len(pods) < job.pods))
    return running and disrupted


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


# ------------------------------------------------------------------------------------------ reconcile


def reconcile(*, cluster: Cluster | None = None) -> dict[str, int]:
    """Repair drift between the database (truth for intent) and the cluster (truth for pods): queued jobs
    without pods get them (again) where pods are created at submission; admitted jobs still gated, or still
    without pods where pods are created at admission, are started again (and requeued after a bounded wait);
    active jobs whose pods vanished are requeued; gangs partly evicted get the rest of their evictions asked
    again; and portal pods without a live job attempt are deleted.

    One cluster per call (``scheduling.cycle.reconcile_one`` per cluster): only the jobs bound to it are looked
    at, so a job running on another cluster is never taken for lost here, and an unreachable cluster's jobs are
    left alone until it answers. Pods here of an attempt bound to another cluster are deleted."""
    cluster = cluster or default_cluster()
    read = _read_inventory(cluster)
    if read is None:
        return {"unreachable": 1}
    inv = read[1]
    pods: dict[tuple[int, int], list[PodState]] = defaultdict(list)
    for p in inv.pods:
        pods[(p.job_id, p.attempt)].append(p)
    counts: dict[str, int] = defaultdict(int)
    now = timezone.now()
    live = Job.objects.filter(state__in=(JobState.QUEUED, JobState.ADMITTED, JobState.RUNNING)).select_related(
        "department", "flavor", "owner"
    )
    live_keys = set()
    several = federated()
    at_admission = creates_pods_at_admission(cluster) or several
    evicting = {j.pk for j in _evicting_jobs(cluster)}
    for job in live:
        key = (job.pk, job.attempt)
        here = job.cluster_id == cluster.pk or (job.cluster_id is None and cluster.is_default)
        if job.state != JobState.QUEUED and not here:
            continue  # bound to another cluster: its pods here, if any, are strays (deleted below)
        live_keys.add(key)
        mine = pods.get(key, [])
        _reconcile_pods(job, mine, cluster=cluster, at_admission=at_admission, evicting=evicting, now=now,
                        counts=counts)
        _reconcile_evictions(job, mine, evicting=evicting, now=now, counts=counts)
    # pods of a finished job, of an attempt that moved on, or bound elsewhere; still-running ones go through
    # the Eviction API (a dead attempt's pods are no reason to bypass a PDB)
    orphans = [[key[0], key[1], plist[0].namespace, cluster.name] for key, plist in pods.items()
               if key not in live_keys]
    # A message per chunk, not per attempt: after a busy hour there are thousands, and a broker round trip
    # each held up the cycle worker that runs the reconciler (about two minutes for 12,000).
    for start in range(0, len(orphans), ORPHANS_PER_MESSAGE):
        dispatch.send_now("scheduling.pods.remove_many", orphans[start:start + ORPHANS_PER_MESSAGE])
    counts["orphans_deleted"] += len(orphans)
    return {k: v for k, v in counts.items() if v}


def _reconcile_pods(job: Job, mine: list[PodState], *, cluster: Cluster, at_admission: bool, evicting: set[int],
                    now: datetime, counts: dict[str, int]) -> None:
    """A live attempt's pods against its state: missing pods are created or its start asked again (requeued
    after a bounded wait), gated ones ungated, and an active attempt whose pods vanished is requeued."""
    if job.state == JobState.QUEUED:
        if len(mine) < job.pods and not at_admission and cluster.is_default:
            dispatch.send_now("scheduling.pods.create", job.pk, job.attempt)
            counts["created"] += 1
    elif job.state == JobState.ADMITTED and at_admission and len(mine) < job.pods and job.pk not in evicting:
        # The pods are created when the job is admitted: the start task was lost, or is backing off (a
        # namespace quota full). Ask again; after a bounded wait give the GPUs back to the queue.
        since = job.admitted_at or now
        if now - since > ADMIT_GIVE_UP:
            if requeue(job=job, outcome="platform_failure", reason="NotStarted",
                       message=f"its pods could not be started within {int(ADMIT_GIVE_UP.total_seconds())} s "
                               "of its admission (see its events)"):
                counts["requeued"] += 1
        elif now - since > ADMIT_RETRY and not _quota_chain_pending(job, now):
            dispatch.send_now("scheduling.pods.admit", job.pk, job.attempt)
            counts["admitted"] += 1
    elif job.state == JobState.ADMITTED and mine and any(p.gated for p in mine):
        dispatch.send_now("scheduling.pods.admit", job.pk, job.attempt)
        counts["admitted"] += 1
    elif job.state in (JobState.ADMITTED, JobState.RUNNING) and not mine:
        since = job.started_at or job.admitted_at or now
        if now - since > LOST_GRACE:
            if attempt_gone(job=job):
                counts["requeued"] += 1


def _reconcile_evictions(job: Job, mine: list[PodState], *, evicting: set[int], now: datetime,
                         counts: dict[str, int]) -> None:
    """A partly evicted gang gets the rest of its evictions asked again; a decided eviction whose message was
    lost is sent again."""
    if job.state in (JobState.ADMITTED, JobState.RUNNING) and _broken_gang(job, mine, evicting):
        # Some pods are evicted (by a preemption whose other evictions were refused, or by a node drain)
        # while others still run: ask the Eviction API for the rest again, with this run's cadence as the
        # back-off. Never a DELETE: their PodDisruptionBudgets still decide.
        dispatch.send_now("scheduling.pods.evict", job.pk, job.attempt, mine[0].namespace, None)
        counts["evictions_retried"] += 1
    elif job.pk in evicting and mine:
        # A decided eviction still not asked for after the grace period: its message was lost (the broker
        # was down when the cycle committed). Send it again; the task is idempotent.
        lost = PreemptionVictim.objects.filter(
            job=job, attempt=job.attempt, status=PreemptionVictim.Status.DECIDED,
            preemption__decided_at__lt=now - LOST_GRACE).values_list("preemption_id", flat=True).first()
        if lost is not None:
            dispatch.send_now("scheduling.pods.evict", job.pk, job.attempt, mine[0].namespace, lost)
            counts["evictions_resent"] += 1


# ------------------------------------------------------------------------------------------ one cluster per task


def sync_one(*, cluster_id: int | None) -> dict:
    """Sync one cluster, under that cluster's own lock (two syncs of one cluster never overlap; syncs of
    different clusters run side by side)."""
    return _under_cluster_lock(cluster_id, "cluster-sync", sync_cluster)


def reconcile_one(*, cluster_id: int | None) -> dict:
    """Reconcile one cluster, under that cluster's own lock."""
    return _under_cluster_lock(cluster_id, "reconcile", reconcile)


def _under_cluster_lock(cluster_id: int | None, lock: str, run: Callable[..., dict[str, int]]) -> dict:
    cluster = cluster_row(cluster_id)
    if cluster is None:
        return {"gone": 1}
    # One message per task for the run's per-job transactions (a notification, a log to keep), not one each.
    with dispatch.coalesced(), exclusive(f"{lock}-{cluster.name}") as acquired:
        if not acquired:
            return {"skipped": 1}
        return run(cluster=cluster)
