"""Job approvals: deciding on a job that waits for approval, approve (it is queued) or reject (it is cancelled).

Invariants: only a department admin of the job's department, or a platform admin, decides (another
department's job is a 404), and nobody approves their own job (a 403: another admin of the department, or a
platform admin, decides; ``deciders`` names them, and a department without another admin falls to the
platform admins); each decision is one compare-and-set transition out of ``pending_approval`` plus an ``Approval`` row and an
audit entry, in one transaction; deciding the same way twice returns the job unchanged, deciding the other
way after a decision is refused. Whether a job must wait is the budgets' question
(``quotas.budgets.needs_approval``: its department's approval rule), asked at submission.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from engine import reasons
from portal.audit import audit
from portal.errors import Forbidden, InvalidTransition, NotFound, ValidationFailed
from portal.tenancy import membership_of
from scheduling.models import Approval, JobState
from scheduling.services import notify
from scheduling.services.approvers import deciders
from scheduling.services.jobs import enqueue_pod_creation, transition


def _check_approver(*, user, job, approving: bool = False) -> None:
    m = membership_of(user)
    if m is None or (not m.is_platform_admin and m.department_id != job.department_id):
        raise NotFound("No such job.")
    if not m.is_department_admin and not (m.team_admin and job.team_id is not None and m.team_id == job.team_id):
        raise Forbidden("Only a department admin of the job's department (or a team admin of its team) can "
                        "approve or reject it.")
    if approving and job.owner_id == user.pk:
        # An approval rule is a second pair of eyes; one's own approval would make it none. (Rejecting
        # one's own job is only cancelling it, which the owner may do anyway.)
        who, _ = deciders(job=job)
        raise Forbidden(f"You cannot approve your own job: {who} decides.")


def _decided(job, decision: str):
    job.refresh_from_db()
    existing = Approval.objects.filter(job=job).first()
    if existing is not None and existing.decision == decision:
        return job
    if job.state != JobState.PENDING_APPROVAL:
        raise InvalidTransition(f"The job is {job.state}; only jobs pending approval can be "
                                f"{decision}.")
    return None


def _decide(*, user, job, decision: str, action: str, comment: str, then=None, **move):
    """One decision: the compare-and-set out of pending_approval (``move``: the transition's target, reason
    and time), ``then(job)``, the ``Approval`` row, the audit entry and the notification, in one transaction.
    A job already decided this way (here or by a concurrent call) is returned unchanged."""
    done = _decided(job, decision)
    if done is not None:
        return done
    why = job.reason_message
    with transaction.atomic():
        if not transition(job=job, allowed_from=[JobState.PENDING_APPROVAL], actor=user, **move):
            done = _decided(job, decision)
            if done is not None:
                return done
            raise InvalidTransition("The job is no longer pending approval.")
        if then is not None:
            then(job)
        approval = Approval.objects.create(job=job, decision=decision, actor=user, comment=comment, reason=why)
        audit(actor=user, action=action, obj=approval, department=job.department,
              new={"job": job.pk, "decision": decision}, comment=comment)
        notify.approval_decided(job=job, decision=decision, actor=user, comment=comment)
    return job


def _queued(job) -> None:
    job.reason_message = reasons.CODES[reasons.QUEUED]
    type(job).objects.filter(pk=job.pk).update(reason_message=job.reason_message)
    enqueue_pod_creation(job)


def job_approve(*, user, job, comment: str = ""):
    """Approve a job waiting in pending_approval: it is queued and its pods are created. Idempotent. Its
    owner may not approve it."""
    _check_approver(user=user, job=job, approving=True)
    return _decide(user=user, job=job, decision="approved", action="job.approve", comment=comment, then=_queued,
                   to=JobState.QUEUED, reason_code=reasons.QUEUED,
                   message=f"approved by {user.get_username()}" + (f": {comment}" if comment else ""),
                   queued_at=timezone.now())


def job_reject(*, user, job, comment: str):
    """Reject a job waiting in pending_approval (a comment is required): it is cancelled. Idempotent."""
    _check_approver(user=user, job=job)
    if not (comment or "").strip():
        raise ValidationFailed(fields={"comment": [{"code": "required", "message": "Say why the job is rejected."}]})
    return _decide(user=user, job=job, decision="rejected", action="job.reject", comment=comment,
                   to=JobState.CANCELLED, reason_code="rejected",
                   message=f"rejected by {user.get_username()}: {comment}", finished_at=timezone.now())
