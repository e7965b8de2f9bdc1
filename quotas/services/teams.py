"""Teams inside departments (docs/teams.md): a department admin creates teams, splits the department's quota
between them, names their members and their team admins; a team admin changes only their team's borrowing and
lending limits (and approves their team's jobs: ``scheduling.selectors.approvable``). Every change is audited;
bad input is a 400 naming the field.

Invariants:

* One level: a team belongs to one department; a member belongs to at most one team, of their own department
  (``Membership.team``); a team admin is a member of the team.
* Per flavor, the teams' nominal quotas add up to at most the department's nominal (``QuotaQuerySet.
  nominal_by_flavor``: its global quota, else its per-cluster ones together); what is left is the unassigned
  share of the members of no team. A team's lending limit is at most its nominal.
* A team with jobs is never deleted (its jobs keep naming it in reports); it can be emptied instead.
"""

from __future__ import annotations

from django.core.exceptions import ValidationError
from django.db import transaction

from portal.audit import audit
from portal.errors import Forbidden
from portal.models import SLUG, Department, Membership, Team
from portal.tenancy import membership_of
from quotas.models import Flavor, Quota, TeamQuota
from quotas.services.base import field_error

TEAM_ADMIN_FIELDS = ("borrowing_limit", "lending_limit")


def may_manage(user, team: Team) -> bool:
    """Whether ``user`` may change ``team``'s membership and nominal split: its department's admins."""
    m = membership_of(user)
    return m is not None and (m.is_platform_admin or (m.is_department_admin and m.department_id == team.department_id))


def may_tune(user, team: Team) -> bool:
    """Whether ``user`` may change ``team``'s borrowing and lending limits: its department's admins and its own
    team admins."""
    m = membership_of(user)
    return may_manage(user, team) or (m is not None and m.team_admin and m.team_id == team.pk)


def _team_values(team: Team) -> dict:
    return {"slug": team.slug, "name": team.name, "budget_share_pct": team.budget_share_pct}


def _check_share(budget_share_pct: int | None) -> None:
    if budget_share_pct is not None and not 0 <= budget_share_pct <= 100:
        raise field_error("budget_share_pct", "A share of the department's budget is a percent, 0 to 100.")


def team_create(*, department: Department, slug: str, name: str = "", budget_share_pct: int | None = None,
                actor) -> Team:
    """A new team of ``department``. A slug that is not one, or that the department has already, an archived
    department and a share outside 0-100 are 400s."""
    try:
        SLUG(slug)
    except ValidationError:
        raise field_error("slug", "Lower-case letters, digits and dashes (at most 40).") from None
    if len(slug) > 40:
        raise field_error("slug", "At most 40 characters.")
    if department.is_archived:
        raise field_error("department", f"{department.slug} is archived: it takes no new teams.")
    _check_share(budget_share_pct)
    with transaction.atomic():
        if Team.objects.filter(department=department, slug=slug).exists():
            raise field_error("slug", f"{department.slug} has a team {slug} already.", code="unique")
        team = Team.objects.create(department=department, slug=slug, name=name or slug,
                                   budget_share_pct=budget_share_pct)
        audit(actor=actor, action="team.create", obj=team, department=department, new=_team_values(team))
    return team


def team_update(*, team: Team, actor, **changes) -> Team:
    """Change a team's name or budget share (its slug names it everywhere and does not change)."""
    if "budget_share_pct" in changes:
        _check_share(changes["budget_share_pct"])
    with transaction.atomic():
        old = _team_values(team)
        for key in ("name", "budget_share_pct"):
            if key in changes:
                setattr(team, key, changes[key])
        team.save(update_fields=["name", "budget_share_pct"])
        if _team_values(team) != old:
            audit(actor=actor, action="team.update", obj=team, department=team.department, old=old,
                  new=_team_values(team))
    return team


def team_delete(*, team: Team, actor) -> None:
    """Delete a team without jobs or bookings: its members go back to no team, its quota split back to the
    unassigned share. A team with jobs is a 400 (its jobs name it in reports and the CSV), and so is one with
    bookings (they name it in the calendar's history)."""
    jobs = team.jobs.count()
    if jobs:
        raise field_error("team", f"Team {team.slug} has {jobs} job(s) on record and is kept; remove its members "
                                  "and its quota split instead.", code="has_jobs")
    bookings = team.bookings.count()  # (the calendar's rows name it as its jobs do)
    if bookings:
        raise field_error("team", f"Team {team.slug} has {bookings} booking(s) on record and is kept; remove its "
                                  "members and its quota split instead.", code="has_bookings")
    with transaction.atomic():
        Membership.objects.filter(team=team).update(team=None, team_admin=False)
        audit(actor=actor, action="team.delete", obj=team, department=team.department, old=_team_values(team))
        team.delete()


def department_nominal(department: Department, flavor: Flavor) -> int:
    """The department's nominal GPUs of ``flavor``, every cluster together (what its teams split)."""
    nominal = Quota.objects.filter(department=department).nominal_by_flavor()
    return nominal.get((department.pk, flavor.pk), 0)


def team_quota_set(*, team: Team, flavor: Flavor, nominal: int, borrowing_limit: int | None = None,
                   lending_limit: int | None = None, actor, check_role: bool = True) -> TeamQuota:
    """Set a team's split of one flavor. The department's admins set all of it; the team's admins only its
    borrowing and lending limits (a changed nominal is a 403 for them). A CPU flavor, a lending limit above
    the nominal, and a nominal that takes the teams' sum above the department's (the 400 says by how much)
    are refused. ``check_role`` False: the lab file's apply, whose caller is a platform admin already."""
    if flavor.is_cpu:
        raise field_error("flavor", f"{flavor.name} is a CPU pool: teams split GPU quotas only.")
    if lending_limit is not None and lending_limit > nominal:
        raise field_error("lending_limit", f"The lending limit ({lending_limit}) is above the nominal ({nominal}).")
    department = team.department
    with transaction.atomic():
        current = TeamQuota.objects.select_for_update().filter(team=team, flavor=flavor).first()
        if check_role and not may_manage(actor, team):
            if not may_tune(actor, team):
                raise Forbidden("Only the department's admins and the team's admins can change its quota.")
            if nominal != (current.nominal if current else 0):
                raise Forbidden("A team admin changes the team's borrowing and lending limits only; the "
                                "department's admins split the nominal quota.")
        available = department_nominal(department, flavor)
        others = sum(TeamQuota.objects.filter(team__department=department, flavor=flavor).exclude(team=team)
                     .values_list("nominal", flat=True))
        if others + nominal > available:
            over = others + nominal - available
            raise field_error(
                "nominal",
                f"The teams' nominal quotas of {flavor.name} would add up to {others + nominal}, {over} above "
                f"{department.slug}'s nominal of {available} (the other teams hold {others}).",
                code="over_department")
        old = None if current is None else {"nominal": current.nominal, "borrowing_limit": current.borrowing_limit,
                                             "lending_limit": current.lending_limit}
        row, _ = TeamQuota.objects.update_or_create(team=team, flavor=flavor, defaults={
            "nominal": nominal, "borrowing_limit": borrowing_limit, "lending_limit": lending_limit})
        new = {"nominal": nominal, "borrowing_limit": borrowing_limit, "lending_limit": lending_limit}
        if new != old:
            audit(actor=actor, action="team_quota.set", obj=row, department=department, old=old,
                  new={"team": team.slug, "flavor": flavor.name, **new})
    return row


def team_quota_delete(*, team: Team, flavor: Flavor, actor) -> bool:
    """Give a team's split of ``flavor`` back to the unassigned share; whether it had one."""
    with transaction.atomic():
        row = TeamQuota.objects.select_for_update().filter(team=team, flavor=flavor).first()
        if row is None:
            return False
        audit(actor=actor, action="team_quota.delete", obj=row, department=team.department,
              old={"team": team.slug, "flavor": flavor.name, "nominal": row.nominal})
        row.delete()
    return True


def member_set_team(*, membership: Membership, team: Team | None, team_admin: bool = False, actor) -> Membership:
    """Put a member in ``team`` (None: in no team), as one of its admins or not. A team of another department
    is a 400, and so is a team admin without a team."""
    if team is not None and team.department_id != membership.department_id:
        raise field_error("team", f"{membership.user.get_username()} is a member of {membership.department.slug}, "
                                  f"not of {team.department.slug}.")
    if team is None and team_admin:
        raise field_error("team_admin", "A team admin is a member of a team: name the team.")
    with transaction.atomic():
        old = {"team": membership.team.slug if membership.team_id else None, "team_admin": membership.team_admin}
        membership.team, membership.team_admin = team, team_admin
        membership.save(update_fields=["team", "team_admin"])
        new = {"team": team.slug if team else None, "team_admin": team_admin}
        if new != old:
            audit(actor=actor, action="membership.team", obj=membership, department=membership.department, old=old,
                  new={"user": membership.user.get_username(), **new})
    return membership
