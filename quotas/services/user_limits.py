"""Per-user limits inside a department: GPUs one member may hold at once and, optionally, jobs they may have
queued (docs/sweeps.md, "Per-user limits"). The shape of allowances: a department admin (or a platform admin)
sets them, audited; the engine enforces the GPU limit (``engine.user_limits``), the submit path the
queued-jobs limit.

Invariants:

* One row per member and one per department (``user`` null: every member without their own), as database
  constraints; a member's own row replaces the department's whole.
* A member's row belongs to their department: it is set only for a member of it, and goes when they leave it.
* A GPU limit is at least 1 and at most what the department could ever hold (``quotas.selectors.
  department_gpu_ceiling``): a larger one could never bind.
"""

from __future__ import annotations

from django.db import transaction

from portal.audit import audit
from portal.models import Department, Membership
from quotas.models import UserLimit
from quotas.selectors import department_gpu_ceiling
from quotas.services.base import field_error


def _values(limit: UserLimit | None) -> dict | None:
    return None if limit is None else {"max_gpus": limit.max_gpus, "max_queued": limit.max_queued}


def user_limit_set(*, department: Department, user=None, max_gpus: int, max_queued: int | None = None,
                   actor) -> UserLimit:
    """Set the limit of one member of ``department`` (``user``), or of every member without their own
    (``user`` None). A member of another department, or a limit above what the department could ever hold,
    is a 400."""
    if user is not None and not Membership.objects.filter(user=user, department=department).exists():
        raise field_error("user", f"{user.get_username()} is not a member of {department.slug}.")
    ceiling = department_gpu_ceiling(department_id=department.pk)
    if ceiling is not None and max_gpus > ceiling:
        raise field_error("max_gpus", f"At most {ceiling} GPUs: {department.slug} can never hold more (its quotas' "
                                      "nominal plus borrowing limits)." if ceiling else
                          f"{department.slug} has no GPU quota: no limit can bind; give it a quota first.")
    with transaction.atomic():
        current = UserLimit.objects.select_for_update().filter(department=department, user=user).first()
        old = _values(current)
        limit, _ = UserLimit.objects.update_or_create(department=department, user=user,
                                                      defaults={"max_gpus": max_gpus, "max_queued": max_queued})
        new = _values(limit)
        if new != old:
            audit(actor=actor, action="user_limit.set", obj=limit, department=department, old=old,
                  new={"user": user.get_username() if user else None, **new})
    return limit


def user_limit_delete(*, department: Department, user=None, actor, comment: str = "") -> bool:
    """Remove a member's own limit (the department's then applies to them) or the department's; whether there
    was one."""
    with transaction.atomic():
        current = UserLimit.objects.select_for_update().filter(department=department, user=user).first()
        if current is None:
            return False
        audit(actor=actor, action="user_limit.delete", obj=current, department=department, old=_values(current),
              new={"user": user.get_username() if user else None}, comment=comment)
        current.delete()
    return True
