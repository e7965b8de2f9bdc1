"""Budget selectors: which department, wallets, allowances and ledger entries a user may see.

The scoping rule of each tenant model lives here, in one place per model: platform admins see every
department, members their own department's, others nothing.
"""

from __future__ import annotations

from portal.errors import Forbidden, NotFound
from portal.models import Department
from portal.tenancy import membership_of
from quotas.models import Allowance, LedgerEntry, Wallet


def department_for(user, slug: str) -> Department:
    """The department ``slug`` if ``user`` may see it (their own; platform admins any), else NotFound: the
    one tenancy rule for a department named in a URL."""
    m = membership_of(user)
    if m is None:
        raise Forbidden("You are not a member of any department.")
    if not m.is_platform_admin and m.department.slug != slug:
        raise NotFound("No such department.")
    dept = Department.objects.filter(slug=slug).first()
    if dept is None:
        raise NotFound("No such department.")
    return dept


def wallets_for(user):
    """The one scoping rule for wallets: platform admins all, members their department's, others none."""
    m = membership_of(user)
    qs = Wallet.objects.select_related("department")
    if m is None:
        return qs.none()
    return qs if m.is_platform_admin else qs.filter(department_id=m.department_id)


def allowances_for(user):
    """Allowances ``user`` may see: platform admins all, department admins their department's, researchers
    only their own (a colleague's limit and spending are the department admins' business), others none."""
    m = membership_of(user)
    qs = Allowance.objects.select_related("user", "wallet__department").order_by("wallet__department__slug",
                                                                                 "user__username", "id")
    if m is None:
        return qs.none()
    if m.is_platform_admin:
        return qs
    qs = qs.filter(wallet__department_id=m.department_id)
    return qs if m.is_department_admin else qs.filter(user=user)


def ledger_for(user):
    m = membership_of(user)
    qs = LedgerEntry.objects.select_related("wallet__department", "user", "actor", "flavor")
    if m is None:
        return qs.none()
    return qs if m.is_platform_admin else qs.filter(wallet__department_id=m.department_id)
