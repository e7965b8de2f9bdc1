"""Job templates API (/api/v1/templates): list (?scope=personal|department), create, retrieve, update, delete.

Reads go through the tenancy gate (``JobTemplate.objects.restrict``): a personal template is its owner's
alone, a department template is read by the department's members and changed by its admins; any other
template is a 404.
"""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import status, viewsets
from rest_framework.response import Response

from portal.api.serializers import validated
from portal.errors import ValidationFailed
from portal.tenancy import CHANGE, VIEW, member
from scheduling.api.serializers import (
    JobTemplateSerializer,
    JobTemplateUpdateSerializer,
    JobTemplateWriteSerializer,
)
from scheduling.models import JobTemplate, TemplateScope
from scheduling.services.templates import template_create, template_delete, template_update, templates_for

CHANGE_FORBIDDEN = "Only the template's owner (personal) or the department's admins can change it."


class JobTemplateViewSet(viewsets.ViewSet):
    serializer_class = JobTemplateSerializer
    queryset = JobTemplate.objects.none()  # only tells the schema the id's type; every read goes through the gate

    def _get(self, pk, action=VIEW):
        return templates_for(self.request.user).get_or_404(self.request.user, action, message=CHANGE_FORBIDDEN,
                                                           missing="No such template.", pk=pk)

    def _out(self, template):
        return JobTemplateSerializer(template, context={"request": self.request}).data

    @extend_schema(parameters=[OpenApiParameter("scope", str, enum=TemplateScope.values,
                                                description="Only personal or only department templates")],
                   responses=JobTemplateSerializer(many=True))
    def list(self, request):
        member(request.user)
        wanted = request.query_params.get("scope") or None
        if wanted is not None and wanted not in TemplateScope.values:
            raise ValidationFailed("Unknown scope.", fields={"scope": [{
                "code": "invalid_choice", "message": f"One of: {', '.join(TemplateScope.values)}."}]})
        rows = list(templates_for(request.user, scope=wanted))
        return Response(JobTemplateSerializer(rows, many=True, context={"request": request}).data)

    @extend_schema(request=JobTemplateWriteSerializer, responses={201: JobTemplateSerializer})
    def create(self, request):
        member(request.user)
        body = validated(JobTemplateWriteSerializer, request.data)
        t = template_create(user=request.user, **body)
        return Response(self._out(t), status=status.HTTP_201_CREATED, headers={"Location": f"/api/v1/templates/{t.pk}"})

    @extend_schema(responses=JobTemplateSerializer)
    def retrieve(self, request, pk=None):
        return Response(self._out(self._get(pk)))

    @extend_schema(request=JobTemplateUpdateSerializer, responses=JobTemplateSerializer)
    def partial_update(self, request, pk=None, partial=True):
        t = self._get(pk, CHANGE)
        body = validated(JobTemplateUpdateSerializer, request.data, partial=partial)
        return Response(self._out(template_update(user=request.user, template=t, **body)))

    @extend_schema(request=JobTemplateUpdateSerializer, responses=JobTemplateSerializer)
    def update(self, request, pk=None):
        """PUT replaces the name, description and spec (name and spec required)."""
        return self.partial_update(request, pk, partial=False)

    def destroy(self, request, pk=None):
        template_delete(user=request.user, template=self._get(pk, CHANGE))
        return Response(status=status.HTTP_204_NO_CONTENT)

