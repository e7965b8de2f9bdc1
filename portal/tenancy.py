"""The one tenancy gate: who may see, and who may act on, which rows.

Every tenant model's queryset inherits ``TenantQuerySet`` and declares two things: the path from a row to
its department (and, where a row belongs to one user, to that user), and which rule answers each action.
``Model.objects.restrict(user, action)`` is then the only way a view or a page reads tenant rows, and
``get_or_404`` the only way it looks one up by what the URL names. The rule for the answer is the same
everywhere (docs/architecture.md, "Tenancy"):

* a row the user may not even see is a 404, exactly as if it did not exist (no existence leak);
* a row the user sees but may not act on is a 403;
* a page or endpoint that names no row refuses a user without the role with a 403, and a user who belongs to
  no department with a 403 too (``member``).

Actions: ``view``; ``change`` (the row's owner and its department's admins: cancel a job, set an approval
rule); ``approve`` (its department's admins); ``admin`` (platform admins only). Platform admins pass every
rule except ``OWNER`` (an API token is its owner's alone).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from django.apps import apps
from django.core.exceptions import ValidationError
from django.db import models
from django.db.models import Q

from portal.errors import Forbidden, NotFound


class Action(StrEnum):
    VIEW = "view"
    CHANGE = "change"
    APPROVE = "approve"
    ADMIN = "admin"


VIEW, CHANGE, APPROVE, ADMIN = Action.VIEW, Action.CHANGE, Action.APPROVE, Action.ADMIN

# The rules an action maps to.
DEPARTMENT = "department"  # every member of the row's department
DEPARTMENT_ADMIN = "department_admin"  # the admins of the row's department
OWNER_OR_ADMIN = "owner_or_admin"  # the row's owner and the admins of its department
PLATFORM = "platform"  # platform admins only
OWNER = "owner"  # the row's owner only, platform admins included (API tokens)


def membership_of(user):
    """The user's ``Membership`` (cached on the user object for the request), or None. The model is looked
    up through the app registry because the models themselves import this module (their querysets)."""
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    cached = getattr(user, "_portal_membership", False)
    if cached is not False:
        return cached
    m = apps.get_model("portal", "Membership").objects.select_related("department").filter(user=user).first()
    user._portal_membership = m
    return m


def remember_membership(user, membership) -> None:
    """What ``membership_of`` answers for this user object from now on: a read that joined the membership
    already (the API token's) spares the request its own."""
    user._portal_membership = membership


def member(user):
    """The one member lookup for views and pages: the user's membership, or a 403 for a signed-in user who
    belongs to no department (there is nothing of theirs a page could show)."""
    m = membership_of(user)
    if m is None:
        raise Forbidden("You are not a member of any department; ask a platform admin to add you.")
    return m


# The rule a role needs for endpoints that name no row: ``restrict`` would give such a user nothing anyway.
ROLE_RULES = {ADMIN: PLATFORM, APPROVE: DEPARTMENT_ADMIN, CHANGE: DEPARTMENT_ADMIN}
ROLE_NAMES = {PLATFORM: "platform admins", DEPARTMENT_ADMIN: "department admins"}


def require_role(user, action: Action | str, message: str | None = None):
    """For pages and endpoints that name no row: the user's membership if their role may ``action``
    something (``approve`` and ``change`` need a department admin, ``admin`` a platform admin), else a 403."""
    m = member(user)
    rule = ROLE_RULES.get(action)
    if rule is not None and scope(user, rule).nothing:
        raise Forbidden(message or f"Only {ROLE_NAMES[rule]} can do this.")
    return m


@dataclass(frozen=True)
class Scope:
    """What one rule lets one user reach: everything, nothing, or the rows of one department (optionally
    only theirs)."""

    everything: bool = False
    department_id: int | None = None
    owner_id: int | None = None

    @property
    def nothing(self) -> bool:
        return not self.everything and self.department_id is None and self.owner_id is None


def scope(user, rule: str) -> Scope:
    """The rule, decided for one user. This is the only place roles turn into rows."""
    m = membership_of(user)
    if rule == OWNER:
        return Scope(owner_id=user.pk) if getattr(user, "is_authenticated", False) else Scope()
    if m is None:
        return Scope()
    if m.is_platform_admin:
        return Scope(everything=True)
    if rule == DEPARTMENT:
        return Scope(department_id=m.department_id)
    if rule == DEPARTMENT_ADMIN:
        return Scope(department_id=m.department_id) if m.is_department_admin else Scope()
    if rule == OWNER_OR_ADMIN:
        if m.is_department_admin:
            return Scope(department_id=m.department_id)
        return Scope(department_id=m.department_id, owner_id=user.pk)
    if rule == PLATFORM:
        return Scope()
    raise ValueError(f"unknown tenancy rule {rule!r}")


class TenantQuerySet(models.QuerySet):
    """Subclasses set ``department_path`` ("" for Department itself), ``owner_path`` (None when rows belong
    to a department, not a user) and ``rules`` (action -> rule; a missing action is refused to everyone but
    platform admins)."""

    department_path: str = "department"
    owner_path: str | None = None
    rules: dict[str, str] = {VIEW: DEPARTMENT, CHANGE: DEPARTMENT_ADMIN, APPROVE: DEPARTMENT_ADMIN, ADMIN: PLATFORM}

    def _rule(self, action) -> str:
        return self.rules.get(str(action), PLATFORM)

    def _department_lookup(self) -> str:
        return f"{self.department_path}_id" if self.department_path else "pk"

    def restrict(self, user, action: Action | str = VIEW):
        """The rows ``user`` may ``action``. Every view and page reads tenant rows through this."""
        s = scope(user, self._rule(action))
        if s.everything:
            return self
        if s.nothing:
            return self.none()
        q = Q()
        if s.department_id is not None:
            q &= Q(**{self._department_lookup(): s.department_id})
        if s.owner_id is not None:
            q &= Q(**{f"{self.owner_path}_id": s.owner_id}) if self.owner_path else Q(pk__in=[])
        return self.filter(q)

    def permits(self, user, obj, action: Action | str) -> bool:
        """Whether ``user`` may ``action`` the row ``obj`` (already read): the same rule as ``restrict``,
        decided in Python so a lookup stays one query."""
        s = scope(user, self._rule(action))
        if s.everything:
            return True
        if s.nothing:
            return False
        if s.department_id is not None and _walk(obj, self._department_lookup()) != s.department_id:
            return False
        if s.owner_id is not None:
            return self.owner_path is not None and _walk(obj, f"{self.owner_path}_id") == s.owner_id
        return True

    def get_or_404(self, user, action: Action | str = VIEW, *, message: str | None = None,
                   missing: str | None = None, **lookup):
        """The one lookup of a row a URL names: a 404 unless ``user`` may see it (a value that cannot even
        be a key, like ``/jobs/abc``, is not found either), then a 403 unless they may ``action`` it."""
        name = self.model._meta.verbose_name
        try:
            obj = self.restrict(user, VIEW).filter(**lookup).first()
        except (TypeError, ValueError, ValidationError):
            obj = None
        if obj is None:
            raise NotFound(missing or f"No such {name}.")
        if action != VIEW and not self.permits(user, obj, action):
            raise Forbidden(message or f"You may not {action} this {name}.")
        return obj


def _walk(obj, path: str):
    for part in path.split("__"):
        obj = getattr(obj, part)
    return obj


def permits(user, obj, action: Action | str) -> bool:
    """``permits`` of the row's own model (for code that holds a row, e.g. a template's "may cancel")."""
    return type(obj)._default_manager.all().permits(user, obj, action)


def can_manage_job(user, job) -> bool:
    """Researchers manage their own jobs, department admins their department's, platform admins all."""
    return permits(user, job, CHANGE)
