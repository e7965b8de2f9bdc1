"""Per-user limits (mounted under /api/v1/): GPUs one member may hold at once and, optionally, jobs they may
have waiting (docs/sweeps.md, "Per-user limits"). Department admins read and set their department's;
platform admins every department's. Interfaces only: the tenancy gate finds the row (another department's
member or department is a 404), ``quotas.services.user_limits`` validates and writes."""

from __future__ import annotations

from django.db.models import F
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.serializers import StrictSerializer
from portal.models import Department, Membership
from portal.tenancy import CHANGE, VIEW, require_role
from quotas.models import UserLimit
from quotas.services import user_limits

ADMINS_ONLY = "Only department admins can set per-user limits."


class UserLimitSerializer(StrictSerializer):
    max_gpus = serializers.IntegerField(min_value=1, max_value=100_000,
                                        help_text="GPUs the member may hold at once, every flavor together")
    max_queued = serializers.IntegerField(min_value=1, max_value=100_000, required=False, allow_null=True,
                                          default=None, help_text="Jobs the member may have waiting to start "
                                          "(queued or awaiting approval); null: no limit")


class UserLimitOutSerializer(serializers.Serializer):
    department = serializers.CharField()
    user = serializers.CharField(allow_null=True, help_text="null: every member without a limit of their own")
    max_gpus = serializers.IntegerField()
    max_queued = serializers.IntegerField(allow_null=True)


def limit_dict(limit: UserLimit) -> dict:
    return {"department": limit.department.slug, "user": limit.user.username if limit.user_id else None,
            "max_gpus": limit.max_gpus, "max_queued": limit.max_queued}


def _valid(data) -> dict:
    s = UserLimitSerializer(data=data)
    s.is_valid(raise_exception=True)
    return s.validated_data


class UserLimitListView(APIView):
    """GET: the per-user limits: a department admin's department's, every department's for platform admins
    (each department's row for every member first, then its members' by name)."""

    serializer_class = UserLimitSerializer

    @extend_schema(responses=UserLimitOutSerializer(many=True))
    def get(self, request):
        require_role(request.user, CHANGE, ADMINS_ONLY)
        qs = (UserLimit.objects.restrict(request.user, VIEW).select_related("department", "user")
              .order_by("department__slug", F("user__username").asc(nulls_first=True), "id"))
        return Response([limit_dict(x) for x in qs])


class MemberLimitView(APIView):
    """PUT/DELETE (the member's department's admins, platform admins): one member's own limit, which replaces
    their department's for them."""

    serializer_class = UserLimitSerializer

    def _target(self, request, username: str) -> Membership:
        """The member the URL names: 404 unless in the user's view, 403 unless the user is their admin."""
        return Membership.objects.select_related("user", "department").get_or_404(
            request.user, CHANGE, user__username=username, missing="No such member.", message=ADMINS_ONLY)

    @extend_schema(responses=UserLimitOutSerializer)
    def put(self, request, username: str):
        m = self._target(request, username)
        data = _valid(request.data)
        limit = user_limits.user_limit_set(department=m.department, user=m.user, actor=request.user, **data)
        return Response(limit_dict(limit))

    def delete(self, request, username: str):
        m = self._target(request, username)
        user_limits.user_limit_delete(department=m.department, user=m.user, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class DepartmentLimitView(APIView):
    """PUT/DELETE (the department's admins, platform admins): the limit of every member of the department who
    has none of their own."""

    serializer_class = UserLimitSerializer

    def _target(self, request, slug: str) -> Department:
        return Department.objects.get_or_404(request.user, CHANGE, slug=slug, message=ADMINS_ONLY)

    @extend_schema(responses=UserLimitOutSerializer)
    def put(self, request, slug: str):
        dept = self._target(request, slug)
        limit = user_limits.user_limit_set(department=dept, actor=request.user, **_valid(request.data))
        return Response(limit_dict(limit))

    def delete(self, request, slug: str):
        user_limits.user_limit_delete(department=self._target(request, slug), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)
