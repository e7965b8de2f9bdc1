"""The teams page of a department (``/lab/departments/<slug>/teams``, docs/teams.md): its teams, each one's
split of the department's quota and its members, with forms for the department's admins to create a team,
split the quota and put members in teams, and for a team's admins to change their team's borrowing and lending
limits. Each form is read by the API's serializer and applied by the same service (``quotas.services.teams``),
so the page accepts exactly what the API does."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods

from portal.errors import Forbidden
from portal.forms import form_payload, render_form, submit_form
from portal.models import Department, Membership
from portal.tenancy import VIEW, member
from quotas.api.teams import TeamMemberSerializer, TeamQuotaSerializer, TeamSerializer
from quotas.models import Flavor, FlavorKind, Quota
from quotas.selectors import visible_teams
from quotas.services import teams as service

QUOTA_FIELDS = ("nominal", "borrowing_limit", "lending_limit")


def _context(request, dept: Department, m) -> dict:
    teams = list(visible_teams(request.user).filter(department=dept).prefetch_related(
        "quotas__flavor", "members__user").order_by("slug"))
    nominal = Quota.objects.filter(department=dept).nominal_by_flavor()
    flavors = list(Flavor.objects.filter(kind=FlavorKind.GPU).order_by("name"))
    split = {f.name: sum(q.nominal for t in teams for q in t.quotas.all() if q.flavor_id == f.pk) for f in flavors}
    shares = [{"flavor": f.name, "department": nominal.get((dept.pk, f.pk), 0), "teams": split[f.name],
               "unassigned": max(0, nominal.get((dept.pk, f.pk), 0) - split[f.name])}
              for f in flavors if nominal.get((dept.pk, f.pk), 0) or split[f.name]]
    return {"membership": m, "department": dept, "teams": teams, "flavors": flavors, "shares": shares,
            "manage": m.is_platform_admin or (m.is_department_admin and m.department_id == dept.pk),
            "members": list(Membership.objects.filter(department=dept).select_related("user", "team")
                            .order_by("user__username"))}


@login_required
@require_http_methods(["GET", "POST"])
def teams(request, slug: str):
    dept = Department.objects.get_or_404(request.user, VIEW, slug=slug)
    m = member(request.user)
    ctx = _context(request, dept, m)
    if not ctx["manage"] and not (m.team_admin and m.department_id == dept.pk):
        raise Forbidden("Only the department's admins and its team admins can see this page.")
    errors: dict = {}
    values = request.POST.dict() if request.method == "POST" else {}
    if request.method == "POST":
        action = request.POST.get("action")
        team = next((t for t in ctx["teams"] if t.slug == request.POST.get("team", "")), None)
        if action == "create" and ctx["manage"]:
            def create(data):
                service.team_create(department=dept, actor=request.user, **data)
                messages.success(request, f"Team {data['slug']} created.")
            errors = submit_form(TeamSerializer, form_payload(request.POST, ("slug", "name", "budget_share_pct"),
                                 integers=("budget_share_pct",), nullable=("budget_share_pct",)), create)
        elif action == "split":
            flavor = Flavor.objects.filter(name=request.POST.get("flavor", "")).first()
            early = {**({} if team else {"team": ["Choose a team."]}),
                     **({} if flavor else {"flavor": ["Choose a GPU type."]})}

            def split(data):
                service.team_quota_set(team=team, flavor=flavor, actor=request.user, **data)
                messages.success(request, f"Team {team.slug}'s quota of {flavor.name} set.")
            errors = submit_form(TeamQuotaSerializer, form_payload(request.POST, QUOTA_FIELDS, integers=QUOTA_FIELDS,
                                 nullable=("borrowing_limit", "lending_limit")), split, early)
        elif action == "member" and ctx["manage"]:
            target = next((x for x in ctx["members"] if x.user.username == request.POST.get("user", "")), None)
            early = {} if target else {"user": ["Choose a member of the department."]}

            def place(data):
                service.member_set_team(membership=target, team=team, team_admin=data["team_admin"],
                                        actor=request.user)
                messages.success(request, f"{target.user.username}: " + (f"team {team.slug}" if team else "no team"))
            errors = submit_form(TeamMemberSerializer, form_payload(request.POST, ("team_admin",),
                                 checkboxes=("team_admin",)), place, early)
        else:
            raise Forbidden("Only the department's admins can do this.")
        if not errors:
            return redirect("lab:teams", slug=slug)
        ctx = _context(request, dept, m)
    return render_form(request, "lab/teams.html", {**ctx, "values": values}, errors)
