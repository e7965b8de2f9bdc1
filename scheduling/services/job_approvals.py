"""Job approvals: deciding on a job that waits for approval, approve (it is queued) or reject (it is cancelled).

Invariants: only a department admin of the job's department decides (another department's job is a 404);
each decision is one compare-and-set transition out of ``pending_approval`` plus an ``Approval`` row and an
audit entry, in one transaction; deciding the same way twice returns the job unchanged, deciding the other
way after a decision is refused. Whether a job must wait is the budgets' question
(``quotas.budgets.needs_approval``: its department's approval rule), asked at submission.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from portal.audit import audit
from portal.errors import Forbidden, InvalidTransition, NotFound, ValidationFailed
from portal.tenancy import membership_of
from scheduling.core import reasons
from scheduling.models import Approval, JobState
from scheduling.services import notify
from scheduling.services.jobs import enqueue_pod_creation, transition


def _check_approver(*, user, job) -> None:
    m = membership_of(user)
    if m is None or (not m.is_platform_admin and m.department_id != job.department_id):
        raise NotFound("No such job.")
    if not m.is_department_admin:
        raise Forbidden("Only a department admin of the job's department can approve or reject it.")


def _decided(job, decision: str):
    job.refresh_from_db()
    existing = Approval.objects.filter(job=job).first()
    if existing is not None and existing.decision == decision:
        return job
    if job.state != JobState.PENDING_APPROVAL:
        raise InvalidTransition(f"The job is {job.state}; only jobs pending approval can be "
                                f"{decision}.")
    return None


def job_approve(*, user, job, comment: str = ""):
    """Approve a job waiting in pending_approval: it is queued and its pods are created. Idempotent."""
    _check_approver(user=user, job=job)
    done = _decided(job, "approved")
    if done is not None:
        return done
    why = job.reason_message
    with transaction.atomic():
        ok = transition(job=job, to=JobState.QUEUED, allowed_from=[JobState.PENDING_APPROVAL], actor=user,
                        reason_code=reasons.QUEUED, message=f"approved by {user.get_username()}"
                        + (f": {comment}" if comment else ""), queued_at=timezone.now())
        if not ok:
            done = _decided(job, "approved")
            if done is not None:
                return done
            raise InvalidTransition("The job is no longer pending approval.")
        job.reason_message = reasons.CODES[reasons.QUEUED]
        type(job).objects.filter(pk=job.pk).update(reason_message=job.reason_message)
        approval = Approval.objects.create(job=job, decision="approved", actor=user, comment=comment, reason=why)
        audit(actor=user, action="job.approve", obj=approval, department=job.department,
              new={"job": job.pk, "decision": "approved"}, comment=comment)
        notify.approval_decided(job=job, decision="approved", actor=user, comment=comment)
        enqueue_pod_creation(job)
    return job


def job_reject(*, user, job, comment: str):
    """Reject a job waiting in pending_approval (a comment is required): it is cancelled. Idempotent."""
    _check_approver(user=user, job=job)
    if not (comment or "").strip():
        raise ValidationFailed(fields={"comment": [{"code": "required", "message": "Say why the job is rejected."}]})
    done = _decided(job, "rejected")
    if done is not None:
        return done
    why = job.reason_message
    with transaction.atomic():
        ok = transition(job=job, to=JobState.CANCELLED, allowed_from=[JobState.PENDING_APPROVAL], actor=user,
                        reason_code="rejected", message=f"rejected by {user.get_username()}: {comment}",
                        finished_at=timezone.now())
        if not ok:
            done = _decided(job, "rejected")
            if done is not None:
                return done
            raise InvalidTransition("The job is no longer pending approval.")
        approval = Approval.objects.create(job=job, decision="rejected", actor=user, comment=comment, reason=why)
        audit(actor=user, action="job.reject", obj=approval, department=job.department,
              new={"job": job.pk, "decision": "rejected"}, comment=comment)
        notify.approval_decided(job=job, decision="rejected", actor=user, comment=comment)
    return job
