"""Lab API: departments and their members. Every read goes through the tenancy gate."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from lab.api.serializers import (
    ArchiveImpactSerializer,
    DepartmentArchiveSerializer,
    DepartmentSerializer,
    DepartmentUpdateSerializer,
    MemberSerializer,
    MemberUpdateSerializer,
)
from lab.inputs import DepartmentCreateSerializer, MemberCreateSerializer
from lab.services import departments, members
from portal.api.serializers import validated
from portal.models import Department, Membership
from portal.tenancy import ADMIN, CHANGE, VIEW, require_role


class DepartmentViewSet(viewsets.ReadOnlyModelViewSet):
    """Departments. Platform admins create, rename, archive and restore them (every change audited)."""

    serializer_class = DepartmentSerializer
    lookup_field = "slug"

    def get_queryset(self):
        return Department.objects.restrict(self.request.user, VIEW)

    def get_object(self, action=VIEW):
        return Department.objects.get_or_404(self.request.user, action, slug=self.kwargs["slug"],
                                             message="Only platform admins can change departments.")

    @extend_schema(request=DepartmentCreateSerializer, responses={201: DepartmentSerializer})
    def create(self, request):
        require_role(request.user, ADMIN, "Only platform admins can create departments.")
        body = validated(DepartmentCreateSerializer, request.data)
        dept = departments.department_create(actor=request.user, **body)
        return Response(DepartmentSerializer(dept).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=DepartmentUpdateSerializer, responses=DepartmentSerializer)
    def partial_update(self, request, slug=None):
        dept = self.get_object(ADMIN)
        body = validated(DepartmentUpdateSerializer, request.data)
        dept = departments.department_rename(department=dept, actor=request.user, **body)
        return Response(DepartmentSerializer(dept).data)

    @extend_schema(methods=["GET"], request=None, responses=ArchiveImpactSerializer)
    @extend_schema(methods=["POST"], request=DepartmentArchiveSerializer, responses=ArchiveImpactSerializer)
    @action(detail=True, methods=["get", "post"])
    def archive(self, request, slug=None):
        """GET: what archiving would do. POST with a reason and ``confirm: true``: archive (without
        ``confirm`` a 400 carries the impact)."""
        dept = self.get_object(ADMIN)
        if request.method == "GET":
            return Response(departments.archive_impact(dept))
        body = validated(DepartmentArchiveSerializer, request.data)
        return Response(departments.department_archive(department=dept, actor=request.user, **body))

    @extend_schema(request=None, responses=DepartmentSerializer)
    @action(detail=True, methods=["post"])
    def restore(self, request, slug=None):
        dept = departments.department_restore(department=self.get_object(ADMIN), actor=request.user)
        return Response(DepartmentSerializer(dept).data)


class MemberListView(APIView):
    """A department's members (its members read them; its admins and platform admins add them)."""

    @extend_schema(responses=MemberSerializer(many=True))
    def get(self, request, slug):
        dept = Department.objects.get_or_404(request.user, VIEW, slug=slug)
        rows = (Membership.objects.restrict(request.user, VIEW).filter(department=dept)
                .select_related("user", "department").order_by("user__username"))
        return Response(MemberSerializer(rows, many=True).data)

    @extend_schema(request=MemberCreateSerializer, responses={201: MemberSerializer})
    def post(self, request, slug):
        dept = Department.objects.get_or_404(request.user, CHANGE, slug=slug,
                                             message="Only the department's admins can add members.")
        body = validated(MemberCreateSerializer, request.data)
        m = members.member_add(department=dept, actor=request.user, invite=True, **body)
        return Response(MemberSerializer(m).data, status=status.HTTP_201_CREATED)


class MemberDetailView(APIView):
    """One member: its department's admins change their role and user tier, or remove them."""

    def _member(self, request, slug, username, action):
        Department.objects.get_or_404(request.user, VIEW, slug=slug)
        return Membership.objects.select_related("user", "department").get_or_404(
            request.user, action, department__slug=slug, user__username=username, missing="No such member.",
            message="Only the department's admins can change its members.")

    @extend_schema(responses=MemberSerializer)
    def get(self, request, slug, username):
        return Response(MemberSerializer(self._member(request, slug, username, VIEW)).data)

    @extend_schema(request=MemberUpdateSerializer, responses=MemberSerializer)
    def patch(self, request, slug, username):
        m = self._member(request, slug, username, CHANGE)
        body = validated(MemberUpdateSerializer, request.data)
        m = members.member_change(membership=m, actor=request.user, **body)
        return Response(MemberSerializer(m).data)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, slug, username):
        m = self._member(request, slug, username, CHANGE)
        members.member_remove(membership=m, actor=request.user, comment=request.query_params.get("comment", ""))
        return Response(status=status.HTTP_204_NO_CONTENT)
