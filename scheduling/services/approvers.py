"""Who decides on a job waiting for approval: never its owner (job_approvals refuses one's own approval), so
its department's other admins, or, when the department has none, the platform admins. The submission names
them in the job's reason and notifies them; the approvals service names them when it refuses an owner."""

from __future__ import annotations

from portal.models import Membership, Role


def deciders(*, job) -> tuple[str, list[int]]:
    """(who decides on ``job``, in words for its owner; their user ids): its department's admins other than
    its owner, or, when there is none, the platform admins (any department's job is theirs to decide)."""
    admins = list(Membership.objects.filter(department_id=job.department_id, role=Role.DEPARTMENT_ADMIN)
                  .exclude(user_id=job.owner_id).order_by("user_id").values_list("user_id", flat=True))
    if admins:
        return f"a department admin of {job.department.slug}", admins
    platform = list(Membership.objects.filter(role=Role.PLATFORM_ADMIN).exclude(user_id=job.owner_id)
                    .order_by("user_id").values_list("user_id", flat=True))
    return f"a platform admin ({job.department.slug} has no other department admin)", platform
