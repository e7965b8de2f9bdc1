"""Department secrets API. Members list their department's secrets (names, keys, never values) and use them
in jobs; department admins create, rotate and delete them. Every read goes through the tenancy gate."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.serializers import validated
from portal.errors import ValidationFailed
from portal.models import Department
from portal.tenancy import CHANGE, VIEW, member, require_role
from workloads.api.serializers import SecretCreateSerializer, SecretSerializer, SecretUpdateSerializer
from workloads.models import DepartmentSecret
from workloads.selectors import secrets_for
from workloads.services import secrets

DEPARTMENT = OpenApiParameter("department", str, description="Department slug (platform admins)")


def _department(request, slug: str | None):
    """The user's department, or (platform admins) the one named: another department reads as missing to
    everyone else (``Department.restrict`` shows them their own only)."""
    m = member(request.user)
    if not slug or slug == m.department.slug:
        return m.department
    found = Department.objects.restrict(request.user, VIEW).filter(slug=slug).first()
    if found is None:
        raise ValidationFailed(fields={"department": [{"code": "not_found", "message": "No such department."}]})
    return found


class SecretListView(APIView):
    @extend_schema(responses=SecretSerializer(many=True))
    def get(self, request):
        member(request.user)
        return Response(SecretSerializer(secrets_for(request.user), many=True).data)

    @extend_schema(request=SecretCreateSerializer, responses={201: SecretSerializer})
    def post(self, request):
        require_role(request.user, CHANGE, "Only department admins can declare secrets.")
        data = dict(validated(SecretCreateSerializer, request.data))
        department = _department(request, data.pop("department", None))
        secret = secrets.secret_create(actor=request.user, department=department, **data)
        return Response(SecretSerializer(secret).data, status=status.HTTP_201_CREATED)


class SecretDetailView(APIView):
    def _get(self, request, name, action):
        department = _department(request, request.query_params.get("department"))
        return DepartmentSecret.objects.get_or_404(request.user, action, department=department, name=name)

    @extend_schema(parameters=[DEPARTMENT], responses=SecretSerializer)
    def get(self, request, name):
        return Response(SecretSerializer(self._get(request, name, VIEW)).data)

    @extend_schema(parameters=[DEPARTMENT], request=SecretUpdateSerializer, responses=SecretSerializer)
    def patch(self, request, name):
        secret = self._get(request, name, CHANGE)
        body = validated(SecretUpdateSerializer, request.data)
        return Response(SecretSerializer(secrets.secret_update(actor=request.user, secret=secret,
                                                               **body)).data)

    @extend_schema(parameters=[DEPARTMENT], responses={204: None})
    def delete(self, request, name):
        secrets.secret_delete(actor=request.user, secret=self._get(request, name, CHANGE))
        return Response(status=status.HTTP_204_NO_CONTENT)
