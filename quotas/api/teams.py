"""Teams inside departments (mounted under /api/v1/, docs/teams.md): a department's admins create teams, split
the department's quota between them and name their members and team admins; a team's admins change its
borrowing and lending limits; researchers see their own team. Interfaces only: ``quotas.selectors.
visible_teams`` finds the team (one the user may not see is a 404), ``quotas.services.teams`` validates and
writes (a 400 per bad field, a 403 for a change the user's role may not make)."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.serializers import StrictSerializer
from portal.errors import Forbidden, NotFound
from portal.models import Department, Membership, Team
from portal.tenancy import CHANGE, require_role
from quotas.models import Flavor
from quotas.selectors import visible_teams
from quotas.services import teams as service

ADMINS_ONLY = "Only the department's admins can do this."
TEAM = r"(?P<slug>[a-z0-9-]+)/(?P<team>[a-z0-9-]+)"


class TeamSerializer(StrictSerializer):
    department = serializers.SlugField(required=False, help_text="its department (default: yours)")
    slug = serializers.SlugField(max_length=40)
    name = serializers.CharField(max_length=120, required=False, allow_blank=True, default="")
    budget_share_pct = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=0,
                                                max_value=100, help_text="share of the department's credits (%)")


class TeamChangeSerializer(StrictSerializer):
    name = serializers.CharField(max_length=120, required=False, allow_blank=True)
    budget_share_pct = serializers.IntegerField(required=False, allow_null=True, min_value=0, max_value=100)


class TeamQuotaSerializer(StrictSerializer):
    nominal = serializers.IntegerField(min_value=0, max_value=100_000)
    borrowing_limit = serializers.IntegerField(min_value=0, max_value=100_000, required=False, allow_null=True,
                                               default=None, help_text="null: no limit")
    lending_limit = serializers.IntegerField(min_value=0, max_value=100_000, required=False, allow_null=True,
                                             default=None, help_text="null: it lends all of its idle nominal")


class TeamMemberSerializer(StrictSerializer):
    team_admin = serializers.BooleanField(required=False, default=False)


class TeamOutSerializer(serializers.Serializer):
    department = serializers.CharField()
    slug = serializers.CharField()
    name = serializers.CharField()
    budget_share_pct = serializers.IntegerField(allow_null=True)
    quotas = serializers.ListField(child=serializers.DictField())
    members = serializers.ListField(child=serializers.DictField())


def team_dict(team: Team) -> dict:
    quotas = [{"flavor": q.flavor.name, "nominal": q.nominal, "borrowing_limit": q.borrowing_limit,
               "lending_limit": q.lending_limit} for q in team.quotas.select_related("flavor").order_by("flavor__name")]
    members = [{"user": m.user.username, "team_admin": m.team_admin}
               for m in team.members.select_related("user").order_by("user__username")]
    return {"department": team.department.slug, "slug": team.slug, "name": team.name,
            "budget_share_pct": team.budget_share_pct, "quotas": quotas, "members": members}


def _valid(serializer_class, data) -> dict:
    s = serializer_class(data=data)
    s.is_valid(raise_exception=True)
    return s.validated_data


def _team(request, slug: str, team: str) -> Team:
    found = visible_teams(request.user).filter(department__slug=slug, slug=team).first()
    if found is None:
        raise NotFound("No such team.")
    return found


def _managed(request, slug: str, team: str) -> Team:
    found = _team(request, slug, team)
    if not service.may_manage(request.user, found):
        raise Forbidden(ADMINS_ONLY)
    return found


class TeamListView(APIView):
    """GET: the teams you see (a department admin's department's, every one for platform admins, your own team
    for anyone else). POST (department admins): a new team of your department (platform admins name one)."""

    serializer_class = TeamSerializer

    @extend_schema(responses=TeamOutSerializer(many=True))
    def get(self, request):
        require_role(request.user, "view")
        return Response([team_dict(t) for t in visible_teams(request.user).order_by("department__slug", "slug")])

    @extend_schema(responses={201: TeamOutSerializer})
    def post(self, request):
        m = require_role(request.user, CHANGE, ADMINS_ONLY)
        data = _valid(TeamSerializer, request.data)
        slug = data.pop("department", None) or m.department.slug
        department = Department.objects.get_or_404(request.user, CHANGE, slug=slug, message=ADMINS_ONLY,
                                                   missing="No such department.")
        team = service.team_create(department=department, actor=request.user, **data)
        return Response(team_dict(team), status=status.HTTP_201_CREATED)


class TeamDetailView(APIView):
    """GET (anyone who sees the team), PATCH (its department's admins: name, budget share), DELETE (its
    department's admins; a team with jobs is kept: a 400)."""

    serializer_class = TeamChangeSerializer

    @extend_schema(responses=TeamOutSerializer)
    def get(self, request, slug: str, team: str):
        return Response(team_dict(_team(request, slug, team)))

    @extend_schema(responses=TeamOutSerializer)
    def patch(self, request, slug: str, team: str):
        found = _managed(request, slug, team)
        return Response(team_dict(service.team_update(team=found, actor=request.user,
                                                      **_valid(TeamChangeSerializer, request.data))))

    def delete(self, request, slug: str, team: str):
        service.team_delete(team=_managed(request, slug, team), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TeamQuotaView(APIView):
    """PUT: a team's split of one GPU flavor (its department's admins; its team admins may change the borrowing
    and lending limits only). The teams' nominals add up to at most the department's: a 400 says by how much.
    DELETE (its department's admins): the split goes back to the unassigned share."""

    serializer_class = TeamQuotaSerializer

    def _flavor(self, name: str) -> Flavor:
        found = Flavor.objects.filter(name=name).first()
        if found is None:
            raise NotFound(f"No flavor {name}; see GET /api/v1/flavors.")
        return found

    @extend_schema(responses=TeamOutSerializer)
    def put(self, request, slug: str, team: str, flavor: str):
        found = _team(request, slug, team)
        if not service.may_tune(request.user, found):
            raise Forbidden("Only the department's admins and the team's admins can change its quota.")
        service.team_quota_set(team=found, flavor=self._flavor(flavor), actor=request.user,
                               **_valid(TeamQuotaSerializer, request.data))
        return Response(team_dict(found))

    def delete(self, request, slug: str, team: str, flavor: str):
        service.team_quota_delete(team=_managed(request, slug, team), flavor=self._flavor(flavor), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class TeamMemberView(APIView):
    """PUT (its department's admins): put a member of the department in the team, as a team admin or not (a
    member is in at most one team: this moves them). DELETE: take them out (they draw on the unassigned
    share again)."""

    serializer_class = TeamMemberSerializer

    def _member(self, request, team: Team, username: str) -> Membership:
        m = Membership.objects.select_related("user", "department", "team").filter(
            user__username=username, department=team.department).first()
        if m is None:
            raise NotFound(f"{username} is not a member of {team.department.slug}.")
        return m

    @extend_schema(responses=TeamOutSerializer)
    def put(self, request, slug: str, team: str, username: str):
        found = _managed(request, slug, team)
        data = _valid(TeamMemberSerializer, request.data)
        service.member_set_team(membership=self._member(request, found, username), team=found,
                                team_admin=data["team_admin"], actor=request.user)
        return Response(team_dict(found))

    def delete(self, request, slug: str, team: str, username: str):
        found = _managed(request, slug, team)
        m = self._member(request, found, username)
        if m.team_id != found.pk:
            raise NotFound(f"{username} is not a member of team {found.slug}.")
        service.member_set_team(membership=m, team=None, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


