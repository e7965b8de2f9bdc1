"""The pod side's writers of the job state machine: an attempt ends (finished, failed) or is requeued as the
next attempt (preempted, lost), always through ``jobs.transition`` or a compare-and-set on the attempt.

Every writer locks the department's wallets before the job (the portal's one lock order) and settles the
attempt's budget in the same transaction.
"""

from __future__ import annotations

import copy
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from engine import reasons, retries
from portal import dispatch
from portal.timestamps import from_epoch
from quotas import budgets
from scheduling.backends.base import PodState
from scheduling.models import IN_FLIGHT, Job, JobState, PreemptionVictim
from scheduling.services import notify, resizes
from scheduling.services.cluster_binding import cluster_of
from scheduling.services.jobs import (
    budget_attempt_ended,
    enqueue_pod_creation,
    namespace_for,
    record_event,
    transition,
)
from scheduling.services.policy import current_policy

# Reason on an active gang that lost a member while others still run: they are being evicted (never deleted).
GANG_BROKEN = "gang_broken"
# An admitted job whose pods have not started within a bound (the reconciler's): it holds GPUs and quota the queue
# cannot use meanwhile, so it says so, and the PortalAdmittedJobNotStarted alert fires (docs/operations.md).
NOT_STARTED = "not_started"
# The timeline's word for a requeue ahead of the job's tier after a node failure.
EXPEDITED_REQUEUE = "expedited_requeue"


def attempt_gone(*, job: Job) -> bool:
    """Every pod of the job's current attempt is gone: requeue it, as preempted when its eviction was under
    way, else as lost (someone deleted its pods)."""
    if PreemptionVictim.objects.filter(job=job, attempt=job.attempt, status__in=IN_FLIGHT).exists():
        return requeue(job=job, outcome="preempted", reason="Evicted", message="evicted; its pods are gone")
    if job.reason_code in (GANG_BROKEN, reasons.DISRUPTION_BUDGET):
        return requeue(job=job, outcome="platform_failure", reason="GangBroken",
                       message="its gang lost a pod to someone else; the others were evicted and are gone",
                       tell_owner=True)
    return requeue(job=job, outcome="platform_failure", reason="PodsLost",
                   message="the job's pods disappeared from the cluster", tell_owner=True)


def attempt_failed(*, job: Job, pods: list[PodState], pod: PodState) -> str | None:
    """The failure policy: one failed pod ends the attempt. The job is retried as a new attempt when its retry
    rules say so (``engine.retries``), else it fails. Either way the attempt's other pods, which may
    still run (a gang whose peers wait for the lost rank in a collective), are removed after commit."""
    decision = retries.decide(
        retries.FailedPod(index=pod.index, reason=pod.reason, exit_code=pod.exit_code, message=pod.message),
        max_retries=job.max_retries, retry_on_exit_codes=tuple(job.retry_on_exit_codes or ()),
        retries_done=job.retries)
    ran_on, attempt = cluster_of(job), job.attempt
    if decision.retry:
        outcome = "retried" if retry(job=job, pod=pod, decision=decision) else None
    else:
        outcome = "failed" if finish(job=job, state=JobState.FAILED, exit_code=pod.exit_code,
                                     reason=pod.reason or "Error",
                                     message=f"pod {pod.name} failed: {pod.reason or 'error'} "
                                             f"(exit code {pod.exit_code}) {pod.message}".strip(),
                                     finished_at=from_epoch(pod.finished_at),
                                     started_at=from_epoch(first_start(pods)),
                                     data={"pod": pod.name, "index": pod.index}) else None
    if outcome == "failed" and len(pods) > 1:
        # Its siblings are not preempted work, but they are cleared as every ended attempt's pods are: deleted
        # once they no longer run, evicted while they do (a team's PodDisruptionBudget still holds). A retry
        # clears them inside ``retry``.
        dispatch.after_commit("scheduling.pods.remove", job.pk, attempt, namespace_for(job.department.slug, ran_on),
                              ran_on.name, True)
    return outcome


def first_start(pods: list[PodState]) -> float | None:
    """When the first of an attempt's pods started (epoch seconds), or None when none has."""
    return min((p.started_at for p in pods if p.started_at), default=None)


def retry(*, job: Job, pod: PodState, decision: retries.RetryDecision) -> bool:
    """End the failed attempt and queue the next one after its back-off (``not_before``; the engine keeps it out
    of admission until then), with a ``retried`` event on the timeline and a notification. Counts against the
    job's retries; a platform cause is settled as the platform's failure (refunded), any other as a failure."""
    old_attempt = job.attempt
    ran_on = cluster_of(job)
    now = timezone.now()
    fast = _expedite(job, pod.reason)
    not_before = now + timedelta(seconds=max(decision.backoff_s, fast.backoff_s))
    outcome = "platform_failure" if decision.cause == retries.PLATFORM else "failed"
    with transaction.atomic():
        budgets.lock_department_wallets([job.department_id])  # the wallet before the job: the one lock order
        ended = copy.copy(job)
        message = f"attempt {old_attempt} failed ({decision.detail}); retried as attempt {old_attempt + 1}"
        updated = Job.objects.filter(pk=job.pk, attempt=old_attempt,
                                     state__in=(JobState.ADMITTED, JobState.RUNNING)).update(
            **_next_attempt(old_attempt, now), retries=job.retries + 1, exit_code=pod.exit_code,
            reason_code=reasons.RETRY_BACKOFF, reason_message=message[:300], estimated_start=not_before,
            **{**_expedited_fields(fast, now), "not_before": not_before})
        if not updated:
            return False
        previous = job.state
        job.refresh_from_db()
        data = {"cause": decision.cause, "pod": pod.name, "reason": pod.reason, "exit_code": pod.exit_code,
                "failed_attempt": old_attempt, "attempt": job.attempt, "backoff_s": decision.backoff_s,
                "not_before": not_before.isoformat()}
        record_event(job=job, kind="transition", from_state=previous, to_state=JobState.QUEUED,
                     reason_code="retried", message=message, data=data, at=now)
        _record_expedite(job, fast, now)
        notify.job_retried(job=job, cause=decision.cause, message=decision.detail, backoff_s=decision.backoff_s)
        budget_attempt_ended(job=ended, attempt=old_attempt, outcome=outcome)
        dispatch.after_commit("scheduling.pods.remove", job.pk, old_attempt,
                              namespace_for(job.department.slug, ran_on), ran_on.name, True)
        enqueue_pod_creation(job)
    return True


def finish(*, job: Job, state: str, exit_code, reason: str, message: str, finished_at, started_at=None,
           data: dict | None = None) -> bool:
    """End the job; the settlement of its hold commits or rolls back with the transition. ``started_at``: when
    the attempt's pods started, as they say; written on a job that no sync saw running (it started and ended
    between two), so its page, its wait and its preemption's audit chain read when it really started."""
    # From the state the job was read in (the compare-and-set then proves it, with no extra lock); a job that
    # moved meanwhile is left for the next sync.
    sources = [job.state] if job.state in (JobState.ADMITTED, JobState.RUNNING) else [JobState.ADMITTED,
                                                                                        JobState.RUNNING]
    started = {"started_at": started_at} if started_at and job.started_at is None else {}
    with transaction.atomic(savepoint=False):
        budgets.lock_department_wallets([job.department_id])  # the wallet before the job: the one lock order
        ok = transition(job=job, to=state, allowed_from=sources,
                        attempt=job.attempt, reason_code=reason, message=message, exit_code=exit_code,
                        finished_at=finished_at or timezone.now(), data=data, **started)
        if ok:
            if started:
                _mark_restarted(job)
            budget_attempt_ended(job=job, attempt=job.attempt,
                                 outcome="succeeded" if state == JobState.SUCCEEDED else "failed")
            # while the finished pods are still there to read it from; one message for a sync's finished jobs
            dispatch.after_commit_batched("scheduling.pods.keep_logs", [job.pk, job.attempt])
    return ok


def requeue(*, job: Job, outcome: str, reason: str, message: str, tell_owner: bool = False) -> bool:
    """End the current attempt (eviction, lost node, unschedulable) and queue the next one, keeping the
    original submission time so the job does not lose its place to aging. ``tell_owner``: the attempt's pods
    were lost to the platform (a node, someone else's deletion), which the owner hears of as a retry (the
    ``job.retried`` notification, cause ``platform``, no back-off) though it counts against no ``max_retries``;
    a preemption has its own notification."""
    old_attempt = job.attempt
    ran_on = cluster_of(job)  # the next attempt may go to another cluster: the old pods are deleted here
    now = timezone.now()
    decided = 0  # how many of the portal's own preemption records name this attempt
    with transaction.atomic():
        budgets.lock_department_wallets([job.department_id])  # the wallet before the job: the one lock order
        if outcome == "preempted":
            if not transition(job=job, to=JobState.PREEMPTED, allowed_from=[JobState.ADMITTED, JobState.RUNNING],
                              attempt=old_attempt, reason_code=reason, message=message,
                              last_preempted_at=now, preemption_count=job.preemption_count + 1):
                return False
            now = timezone.now()  # the requeue's event follows the preemption's on the timeline (time, then id)
            decided = PreemptionVictim.objects.filter(job=job, attempt=old_attempt).update(
                status=PreemptionVictim.Status.REQUEUED, evicted_at=now, requeued_at=now
            )
        ended = copy.copy(job)  # the attempt as it ran (admission time, borrowed, price) for settlement
        fast = _expedite(job, reason) if outcome == "platform_failure" else None
        requeued = _requeue_cas(job, old_attempt, message, now, fast)
        if outcome == "preempted":
            notify.job_preempted(job=job, reason=reason, message=message, requeued=requeued)
        if not requeued:
            return False
        if tell_owner:
            notify.job_retried(job=job, cause=retries.PLATFORM, message=message,
                               backoff_s=fast.backoff_s if fast is not None else 0)
        budget_attempt_ended(job=ended, attempt=old_attempt, outcome=outcome, preempted_by_portal=decided > 0)
        # Removed, not deleted: a pod of the old attempt that still runs goes through the Eviction API.
        dispatch.after_commit("scheduling.pods.remove", job.pk, old_attempt,
                              namespace_for(job.department.slug, ran_on), ran_on.name)
        enqueue_pod_creation(job)
    return True


def _expedite(job: Job, reason: str) -> retries.Expedite:
    """Whether the attempt that ``reason`` ended is requeued ahead of its tier (pods lost with their node),
    under the policy's cap per job and back-off."""
    policy, _ = current_policy()
    return retries.expedite(reason, done=job.expedited_requeues, limit=policy.expedited_requeues,
                            first_backoff_s=policy.expedited_backoff_s, tier=job.tier)


def _expedited_fields(fast: retries.Expedite | None, now) -> dict:
    """The queued row's expedited requeue: first in its tier from now after its back-off, or its normal place
    (every other requeue, a preemption's included, clears an earlier one)."""
    if fast is None or not fast.expedited:
        return {"expedited_at": None}
    return {"expedited_at": now, "expedited_requeues": fast.number,
            "not_before": now + timedelta(seconds=fast.backoff_s)}


def _record_expedite(job: Job, fast: retries.Expedite | None, now) -> None:
    """The timeline says when a node failure sent the job to the front of its tier (or why it did not)."""
    if fast is None or not fast.detail:
        return
    data = {"expedited": fast.expedited, "number": fast.number, "backoff_s": fast.backoff_s}
    if fast.expedited:
        data["not_before"] = (now + timedelta(seconds=fast.backoff_s)).isoformat()
    record_event(job=job, kind="requeue", reason_code=EXPEDITED_REQUEUE if fast.expedited else "requeued",
                 message=fast.detail, data=data, at=now)


def _next_attempt(old_attempt: int, now) -> dict:
    """What a requeue writes besides its reason: queued as the next attempt, with nothing of the attempt that
    ended (placement, cluster, price, times). A requeue writes the state with its own compare-and-set rather
    than through ``transition``, whose guard is the attempt: this one also moves the attempt it guards on."""
    return {"state": JobState.QUEUED, "attempt": old_attempt + 1, "placement": [], "gpu_devices": [], "cluster": None,
            "current_pods": None, "resize": None,
            "borrowed": False, "price": None, "admitted_at": None, "started_at": None, "queued_at": now,
            "updated_at": now}


def _requeue_cas(job: Job, old_attempt: int, message: str, now, fast: retries.Expedite | None = None) -> bool:
    """Compare-and-set: the attempt that ended becomes queued attempt + 1 with its placement cleared."""
    updated = Job.objects.filter(pk=job.pk, attempt=old_attempt,
                                 state__in=(JobState.PREEMPTED, JobState.ADMITTED, JobState.RUNNING)).update(
        **_next_attempt(old_attempt, now), reason_code=reasons.QUEUED,
        reason_message=reasons.CODES[reasons.QUEUED], estimated_start=None, **_expedited_fields(fast, now),
    )
    if not updated:
        return False
    previous = job.state
    job.refresh_from_db()
    record_event(job=job, kind="transition", from_state=previous, to_state=JobState.QUEUED,
                 reason_code=reasons.QUEUED, message=f"requeued as attempt {old_attempt + 1}: {message}", at=now)
    _record_expedite(job, fast, now)
    return True


def start_running(*, job: Job, nodes: list[str], started_at) -> bool:
    """The admitted attempt's pods run on ``nodes``: the job is running; an attempt that follows a preemption
    closes that preemption's audit chain (its victim restarted)."""
    def run() -> bool:
        return transition(job=job, to=JobState.RUNNING, allowed_from=[JobState.ADMITTED], attempt=job.attempt,
                          reason_code="running", message="pods running on " + ", ".join(nodes), started_at=started_at)

    if job.min_pods is None:  # (no savepoint for the many jobs that never resize: the sync batches them)
        ok = run()
    else:
        with transaction.atomic():  # a resize decided before its pods ran counts its checkpoint from their start
            ok = run()
            if ok:
                resizes.count_from_start(job=job, started_at=started_at)
    if ok:
        _mark_restarted(job)
    return ok


def _mark_restarted(job: Job) -> None:
    if job.attempt > 1:
        n = PreemptionVictim.objects.filter(job=job, attempt__lt=job.attempt, restarted_at__isnull=True).update(
            status=PreemptionVictim.Status.RESTARTED, restarted_at=timezone.now()
        )
        if n:
            record_event(job=job, kind="preemption", reason_code="restarted",
                         message=f"restarted as attempt {job.attempt} after preemption")


def note_not_started(*, job: Job, waited: timedelta, give_up: timedelta) -> bool:
    """Say on an admitted job (its reason, and its timeline once) that its pods have not started ``waited``
    after its admission; a namespace quota's refusal, which says more, is left as it is."""
    message = (f"admitted {int(waited.total_seconds())} s ago and its pods have not started: their start was asked "
               f"again; the GPUs go back to the queue {int(give_up.total_seconds())} s after the admission")
    if not Job.objects.filter(pk=job.pk, attempt=job.attempt, state=JobState.ADMITTED).exclude(
            reason_code__in=(NOT_STARTED, reasons.NAMESPACE_QUOTA)).update(reason_code=NOT_STARTED,
                                                                             reason_message=message[:300]):
        return False
    record_event(job=job, kind="pod", attempt=job.attempt, reason_code=NOT_STARTED, message=message)
    return True
