"""Quota change requests: a department admin asks, a platform admin decides.

Invariants: only a pending request is decided, once (a compare-and-set on its state); approving applies the
quota through ``rules.quota_set``/``rules.quota_create`` (the same validation, the same audit) in the same
transaction as the decision, so a refused change leaves the request pending and nothing changed. A request
stores every number it would set: a field the requester leaves out is taken from the quota in force when it is
filed (never "no limit"), so what is stored, and shown to the approver against the quota in force, is exactly
what approving applies.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from portal.audit import audit
from portal.errors import Conflict, ValidationFailed
from quotas.models import Quota, QuotaChangeRequest, QuotaResource
from quotas.services import rules
from quotas.services.base import field_error

FIELDS = ("nominal", "borrowing_limit", "lending_limit")


class _Keep:
    def __repr__(self) -> str:
        return "KEEP"


# A field left out of a request: keep the quota in force's value. None is an answer of its own ("no limit").
KEEP = _Keep()
NULL_MEANS = {"nominal": None, "borrowing_limit": "null: no borrowing limit",
             "lending_limit": "null: lend all of the nominal quota"}


def _asked(department, flavor, cluster, given: dict, resource: str) -> dict:
    """The request's numbers: those ``given``, the rest from the quota in force for the department, flavor and
    cluster. Without a quota in force there is nothing to keep (a department without one cannot use the
    flavor there), so each number must be given: leaving a limit out must not make it unlimited."""
    quota = Quota.objects.filter(department=department, flavor=flavor, cluster=cluster, resource=resource).first()
    if quota is not None:
        return {f: given[f] if f in given else getattr(quota, f) for f in FIELDS}
    where = (flavor.name if cluster is None else f"{flavor.name} on {cluster.name}") + (
        f" ({resource})" if flavor.is_cpu else "")
    errors = {f: [{"code": "required", "message": f"{department.slug} has no quota of {where} to keep: give "
                                                  f"{f}" + (f" ({NULL_MEANS[f]})." if NULL_MEANS[f] else ".")}]
              for f in FIELDS if f not in given}
    if errors:
        raise ValidationFailed(fields=errors)
    return dict(given)


def quota_request_create(*, department, flavor, actor, reason: str, nominal=KEEP, borrowing_limit=KEEP,
                         lending_limit=KEEP, oversubscribe: bool = False, cluster=None,
                         resource: str = QuotaResource.GPUS) -> QuotaChangeRequest:
    """File a request for the department's global quota of ``flavor`` or, with ``cluster``, for its quota on
    that cluster only. A number left as ``KEEP`` is the quota in force's; None is no limit. The simple rules
    are checked now, capacity included (a request that could not be approved as asked is refused: the other
    departments' nominal quotas and the installed GPUs leave no room for its nominal, and it does not ask to
    oversubscribe); capacity is checked again when a platform admin decides, against the quotas of that moment."""
    if department.is_archived:
        raise field_error("department", f"{department.slug} is archived: it takes no quota changes.", "archived")
    if not reason.strip():
        raise field_error("reason", "Say why the department needs this quota.", "required")
    if (resource == QuotaResource.GPUS) == flavor.is_cpu:
        raise rules.resource_mismatch(flavor)
    given = {f: v for f, v in zip(FIELDS, (nominal, borrowing_limit, lending_limit), strict=True) if v is not KEEP}
    values = _asked(department, flavor, cluster, given, resource)
    if errors := rules.quota_limit_errors(nominal=values["nominal"], borrowing=values["borrowing_limit"],
                                          lending=values["lending_limit"]):
        raise ValidationFailed(fields=errors)
    if not oversubscribe and not flavor.is_cpu:
        capacity, others = rules.nominal_room(flavor=flavor, cluster=cluster, department=department)
        if others + values["nominal"] > capacity:
            message = rules.over_capacity_message(flavor=flavor, cluster=cluster, total=others + values["nominal"],
                                                  capacity=capacity)
            raise field_error("nominal", f"{message} The other departments hold {others} of the {capacity}: "
                                         f"ask for at most {max(capacity - others, 0)}, or ask to oversubscribe.",
                              "over_capacity")
    with transaction.atomic():
        req = QuotaChangeRequest.objects.create(
            department=department, flavor=flavor, cluster=cluster, resource=resource, **values,
            oversubscribe=oversubscribe,
            reason=reason.strip(), requested_by=actor)
        audit(actor=actor, action="quota_request.create", obj=req, department=department,
              new={"flavor": flavor.name, "cluster": cluster.name if cluster else None, "resource": resource,
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
        quota = Quota.objects.filter(department=req.department, flavor=req.flavor, cluster=req.cluster,
                                     resource=req.resource).first()
        if quota is None:
            quota = rules.quota_create(department=req.department, flavor=req.flavor, cluster=req.cluster,
                                       resource=req.resource, actor=actor, oversubscribe=req.oversubscribe, comment=why, **values)
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
