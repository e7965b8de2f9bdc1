"""Quota change requests: a department admin asks, a platform admin decides.

Invariants: only a pending request is decided, once (a compare-and-set on its state); approving applies the
quota through ``rules.quota_set``/``rules.quota_create`` (the same validation, the same audit) in the same
transaction as the decision, so a refused change leaves the request pending and nothing changed.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from portal.audit import audit
from portal.errors import Conflict, ValidationFailed
from quotas.models import Quota, QuotaChangeRequest
from quotas.services import rules
from quotas.services.base import field_error

FIELDS = ("nominal", "borrowing_limit", "lending_limit")


def quota_request_create(*, department, flavor, actor, reason: str, nominal: int, borrowing_limit=None,
                         lending_limit=None, oversubscribe: bool = False, cluster=None) -> QuotaChangeRequest:
    """File a request for the department's global quota of ``flavor`` or, with ``cluster``, for its quota on
    that cluster only. The simple rules are checked now (a request that could never be applied is refused);
    capacity is checked again when a platform admin decides, against the quotas of that moment."""
    if department.is_archived:
        raise field_error("department", f"{department.slug} is archived: it takes no quota changes.", "archived")
    if not reason.strip():
        raise field_error("reason", "Say why the department needs this quota.", "required")
    if errors := rules.quota_limit_errors(nominal=nominal, borrowing=borrowing_limit, lending=lending_limit):
        raise ValidationFailed(fields=errors)
    with transaction.atomic():
        req = QuotaChangeRequest.objects.create(
            department=department, flavor=flavor, cluster=cluster, nominal=nominal, borrowing_limit=borrowing_limit,
            lending_limit=lending_limit, oversubscribe=oversubscribe, reason=reason.strip(), requested_by=actor)
        audit(actor=actor, action="quota_request.create", obj=req, department=department,
              new={"flavor": flavor.name, "cluster": cluster.name if cluster else None,
                   **{f: getattr(req, f) for f in FIELDS}, "oversubscribe": oversubscribe}, comment=req.reason)
    return req


def _decide(req: QuotaChangeRequest, *, actor, state: str, comment: str) -> bool:
    updated = QuotaChangeRequest.objects.filter(pk=req.pk, state=QuotaChangeRequest.State.PENDING).update(
        state=state, decided_by=actor, decided_at=timezone.now(), decision_comment=comment)
    if not updated:
        req.refresh_from_db()
        raise Conflict(f"This request was already {req.state}.")
    req.refresh_from_db()
    return True


def quota_request_approve(*, req: QuotaChangeRequest, actor, comment: str = "") -> tuple[QuotaChangeRequest, Quota]:
    """Approve and apply: the quota changes exactly as if the platform admin had set it, with the request's
    reason and the decision in the audit entry."""
    why = f"quota request {req.pk} by {req.requested_by.get_username() if req.requested_by else '?'}: {req.reason}"
    if comment:
        why += f" / approved: {comment}"
    values = {f: getattr(req, f) for f in FIELDS}
    with transaction.atomic():
        _decide(req, actor=actor, state=QuotaChangeRequest.State.APPROVED, comment=comment)
        quota = Quota.objects.filter(department=req.department, flavor=req.flavor, cluster=req.cluster).first()
        if quota is None:
            quota = rules.quota_create(department=req.department, flavor=req.flavor, cluster=req.cluster,
                                       actor=actor, oversubscribe=req.oversubscribe, comment=why, **values)
        else:
            quota = rules.quota_set(quota=quota, actor=actor, oversubscribe=req.oversubscribe, comment=why,
                                    **values)
        audit(actor=actor, action="quota_request.approve", obj=req, department=req.department,
              old={"state": "pending"}, new={"state": "approved"}, comment=comment)
    return req, quota


def quota_request_reject(*, req: QuotaChangeRequest, actor, comment: str = "") -> QuotaChangeRequest:
    with transaction.atomic():
        _decide(req, actor=actor, state=QuotaChangeRequest.State.REJECTED, comment=comment)
        audit(actor=actor, action="quota_request.reject", obj=req, department=req.department,
              old={"state": "pending"}, new={"state": "rejected"}, comment=comment)
    return req
