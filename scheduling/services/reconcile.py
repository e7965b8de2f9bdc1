"""Reconcile: repair drift between the database (truth for intent) and one cluster (truth for pods)."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime, timedelta

from django.db.models import Q
from django.utils import timezone

from engine import reasons
from portal import dispatch
from scheduling.backends import creates_pods_at_admission
from scheduling.backends.base import PodState
from scheduling.models import Cluster, Job, JobState, PreemptionVictim
from scheduling.services.cluster_binding import default_cluster, federated, owned_pods
from scheduling.services.inventory import read_inventory, under_cluster_lock
from scheduling.services.lifecycle import GANG_BROKEN, attempt_gone, note_not_started, requeue
from scheduling.services.namespace_quotas import ADMIT_RETRY, quota_chain_pending
from scheduling.services.pod_states import EVICTION_REASONS, evicting_jobs
from scheduling.services.resizes import in_size, pods_expected

# A job admitted longer ago than this whose pods are missing from the cluster is treated as lost.
LOST_GRACE = timedelta(seconds=60)
# An admitted job whose pods are still not all there after this long gives its GPUs back and waits in the
# queue again (e.g. a full namespace quota); before that its start is asked for again after ADMIT_RETRY.
ADMIT_GIVE_UP = timedelta(minutes=5)
# An admitted job whose pods are still missing this long after its admission says so (``note_not_started``).
NOT_STARTED_AFTER = timedelta(seconds=120)
# Ended attempts whose pods one ``scheduling.pods.remove_many`` message clears (each an Eviction API call or a
# delete per pod, well inside the task's time limit).
ORPHANS_PER_MESSAGE = 100



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
    read = read_inventory(cluster)
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
    evicting = {j.pk for j in evicting_jobs(cluster)}
    for job in live:
        key = (job.pk, job.attempt)
        here = job.cluster_id == cluster.pk or (job.cluster_id is None and cluster.is_default)
        if job.state != JobState.QUEUED and not here:
            continue  # bound to another cluster: its pods here, if any, are strays (deleted below)
        live_keys.add(key)
        # a look-alike of a live attempt in another of the portal's namespaces is neither the job's nor deleted
        # (a resizable job's ranks coming or going in a resize are the resize's, not a broken gang's or missing)
        mine = in_size(job, owned_pods(job, pods.get(key, []), cluster))
        _reconcile_pods(job, mine, cluster=cluster, at_admission=at_admission, evicting=evicting, now=now,
                        counts=counts)
        _reconcile_evictions(job, mine, evicting=evicting, now=now, counts=counts)
    # pods of a finished job, of an attempt that moved on, or bound elsewhere; still-running ones go through
    # the Eviction API (a dead attempt's pods are no reason to bypass a PDB)
    orphans = sorted({(key[0], key[1], p.namespace) for key, plist in pods.items() if key not in live_keys
                      for p in plist})
    orphans = [[job_id, attempt, namespace, cluster.name] for job_id, attempt, namespace in orphans]
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
        if len(mine) < job.all_pods and not at_admission and cluster.is_default:
            dispatch.send_now("scheduling.pods.create", job.pk, job.attempt)
            counts["created"] += 1
    elif job.state == JobState.ADMITTED and at_admission and len(mine) < job.all_pods and job.pk not in evicting:
        # The pods are created when the job is admitted: the start task was lost, or is backing off (a
        # namespace quota full). Ask again; after a bounded wait give the GPUs back to the queue.
        since = job.admitted_at or now
        if now - since > ADMIT_GIVE_UP:
            if requeue(job=job, outcome="platform_failure", reason="NotStarted",
                       message=f"its pods could not be started within {int(ADMIT_GIVE_UP.total_seconds())} s "
                               "of its admission (see its events)"):
                counts["requeued"] += 1
        elif now - since > ADMIT_RETRY and not quota_chain_pending(job, now):
            dispatch.send_now("scheduling.pods.admit", job.pk, job.attempt)
            counts["admitted"] += 1
            if now - since > NOT_STARTED_AFTER:
                note_not_started(job=job, waited=now - since, give_up=ADMIT_GIVE_UP)
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
            preemption__decided_at__lt=now - LOST_GRACE).filter(  # (one told first waits for its notice's end)
            Q(notice_ends_at__isnull=True) | Q(notice_ends_at__lt=now - LOST_GRACE)).values_list("preemption_id", flat=True).first()
        if lost is not None:
            dispatch.send_now("scheduling.pods.evict", job.pk, job.attempt, mine[0].namespace, lost)
            counts["evictions_resent"] += 1


def _broken_gang(job: Job, pods: list[PodState], evicting: set[int]) -> bool:
    """Some of the attempt's pods are evicted or gone (its eviction under way, or a node drained) while
    others still run."""
    running = any(not p.deleting and p.phase not in ("Succeeded", "Failed") for p in pods)
    disrupted = (any(p.reason in EVICTION_REASONS for p in pods) or job.pk in evicting
                 or job.reason_code in (GANG_BROKEN, reasons.DISRUPTION_BUDGET)
                 or (job.state == JobState.RUNNING and len(pods) < pods_expected(job)))
    return running and disrupted


def reconcile_one(*, cluster_id: int | None) -> dict:
    """Reconcile one cluster, under that cluster's own lock."""
    return under_cluster_lock(cluster_id, "reconcile", reconcile)
