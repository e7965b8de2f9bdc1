"""Tenant scoping. ``membership_of`` is how every piece of code learns who a user is in the portal."""

from __future__ import annotations

from portal.models import Membership


def membership_of(user) -> Membership | None:
    """The user's membership (cached on the user object for the request), or None."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    cached = getattr(user, "_portal_membership", False)
    if cached is not False:
        return cached
    m = Membership.objects.select_related("department").filter(user=user).first()
    user._portal_membership = m
    return m


def can_manage_job(user, job) -> bool:
    """Researchers manage their own jobs, department admins their department's, platform admins all."""
    m = membership_of(user)
    if m is None:
        return False
    if m.is_platform_admin:
        return True
    if job.department_id != m.department_id:
        return False
    return m.is_department_admin or job.owner_id == user.pk


def member_or_404(request):
    """The requesting user's membership for dashboard pages; a 404 for users who belong nowhere."""
    from django.http import Http404

    m = membership_of(request.user)
    if m is None:
        raise Http404("You are not a member of any department.")
    return m
