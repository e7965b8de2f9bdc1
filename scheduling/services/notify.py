"""What a job's owner is told when its job moves: the notification of each transition, with a hint for failures
(``scheduling.failure_hints``, the table the job's page reads too).

Called inside the transaction of the change (``transition``, ``requeue``, approvals, submission), so the
notification commits or rolls back with it (``notifications.services.emit`` writes an outbox row).
"""

from __future__ import annotations

from notifications.services import emit
from scheduling.failure_hints import failure_hint
from scheduling.models import JobState

# The kind a job's arrival in a state is reported as. Preemption is reported by ``requeue``, which knows
# whether the job was queued again; cancellations are the user's own doing.
KIND_OF_STATE = {
    JobState.ADMITTED: "job.admitted",
    JobState.RUNNING: "job.started",
    JobState.SUCCEEDED: "job.succeeded",
    JobState.FAILED: "job.failed",
}

def _job_data(job, **extra) -> dict:
    return {"job_id": job.pk, "job_name": job.name, "attempt": job.attempt, "owner": _owner_name(job),
            **extra}


def _owner_name(job) -> str:
    """The owner's name when the job was read with it (no query on the cycle's path), else the id."""
    owner = job._state.fields_cache.get("owner")
    return owner.get_username() if owner is not None else f"user {job.owner_id}"


def job_transitioned(*, job, to: str, reason_code: str, message: str) -> None:
    kind = KIND_OF_STATE.get(to)
    if kind is None:
        return
    extra = {"reason": reason_code, "message": message}
    if to == JobState.FAILED:
        extra["exit_code"] = job.exit_code
        extra["hint"] = failure_hint(reason_code, job.exit_code).advice
    emit(kind=kind, department_id=job.department_id, users=[job.owner_id], data=_job_data(job, **extra))


def job_preempted(*, job, reason: str, message: str, requeued: bool) -> None:
    note = (f"It was queued again as attempt {job.attempt} and keeps its place in the queue." if requeued
            else "It was not queued again.")
    emit(kind="job.preempted", department_id=job.department_id, users=[job.owner_id],
         data=_job_data(job, reason=reason, message=message, requeued=requeued, requeue_note=note))


def job_retried(*, job, cause: str, message: str, backoff_s: float) -> None:
    """The failed attempt is retried: ``job`` is already the new attempt."""
    emit(kind="job.retried", department_id=job.department_id, users=[job.owner_id],
         data=_job_data(job, cause=cause, message=message, backoff_s=int(backoff_s)))


def approval_requested(*, jobs, reason_of, deciders: list[int]) -> None:
    """To those who decide (``approvers.deciders``: the department's admins but the owner, else the platform
    admins), not to the department's admins as such: the owner cannot approve her own job."""
    for job in jobs:
        emit(kind="approval.requested", department_id=job.department_id, users=deciders,
             data=_job_data(job, reason=reason_of(job)))


def approval_decided(*, job, decision: str, actor, comment: str) -> None:
    emit(kind="approval.decided", department_id=job.department_id, users=[job.owner_id],
         data=_job_data(job, decision=decision, actor=actor.get_username(), comment=comment))


def dependency_never_satisfied(*, job, message: str, detail: dict) -> None:
    """The job was ended because a job it depends on ended in a way its condition excludes."""
    emit(kind="job.dependency_never_satisfied", department_id=job.department_id, users=[job.owner_id],
         data=_job_data(job, message=message, dependency=str(detail.get("dependency", ""))))


def deadline_at_risk(*, job, miss: dict, message: str) -> None:
    """The engine's feasibility check says ``job`` will miss its deadline (``miss``: the core's
    ``detail["deadline_miss"]``): its owner is told once (the key is the job's)."""
    emit(kind="job.deadline_at_risk", department_id=job.department_id, users=[job.owner_id],
         data=_job_data(job, message=message, late_min=round(miss["late_s"] / 60),
                        deadline=job.deadline.isoformat() if job.deadline else None),
         dedupe_key=f"job.deadline_at_risk:{job.pk}")
