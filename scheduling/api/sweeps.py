"""Job arrays API (``/api/v1/arrays``): submit N tasks in one request, read an array with its tasks by state,
cancel, hold or release it. Validation only; use cases live in ``scheduling.services.sweeps``."""

from __future__ import annotations

from django.conf import settings
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from engine import arrayspec
from portal.api import idempotency_key
from portal.api.serializers import StrictSerializer
from portal.tenancy import CHANGE, VIEW, member
from scheduling.api.serializers import JobSubmitSerializer
from scheduling.api.views import SubmitThrottle
from scheduling.models import JobArray
from scheduling.services.sweeps import array_cancel, array_counts, array_hold, array_submit


class ArraySubmitSerializer(JobSubmitSerializer):
    """A job body (as for POST /api/v1/jobs) plus ``array``: the task indices and throttle, Slurm's syntax.
    ``{{index}}`` and ``{{count}}`` in the command and env values are filled per task; any other ``{{...}}`` is
    refused."""

    array = serializers.CharField(max_length=500, help_text='task indices and an optional throttle: "0-63%8" (64 '
                                  'tasks, at most 8 at once), "1,3,5", "0-30:10"; at most ARRAY_MAX_TASKS tasks')

    def validate_array(self, value):
        try:
            return arrayspec.parse_array(value, max_tasks=settings.ARRAY_MAX_TASKS)
        except arrayspec.ArraySpecError as exc:
            raise serializers.ValidationError(str(exc), code="invalid_array") from None

    def validate_command(self, value):
        value = super().validate_command(value)
        problems = [p for part in value for p in arrayspec.placeholder_problems(part)]
        if problems:
            raise serializers.ValidationError(problems, code="invalid_placeholder")
        return value

    def validate_roles(self, value):
        problems = [f"{r['name']}: {p}" for r in value for part in r.get("command") or ()
                    for p in arrayspec.placeholder_problems(part)]
        if problems:
            raise serializers.ValidationError(problems, code="invalid_placeholder")
        return value

    def validate_env(self, value):
        value = super().validate_env(value)
        problems = [f"{k}: {p}" for k, v in value.items() for p in arrayspec.placeholder_problems(v)]
        if problems:
            raise serializers.ValidationError(problems, code="invalid_placeholder")
        return value


class JobArraySerializer(serializers.ModelSerializer):
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    counts = serializers.SerializerMethodField(help_text="tasks per state")
    tasks_url = serializers.SerializerMethodField()

    class Meta:
        model = JobArray
        fields = ["id", "name", "owner", "department", "indices", "size", "throttle", "submitted_at", "counts",
                  "tasks_url"]
        read_only_fields = fields

    def get_counts(self, array) -> dict:
        return self.context["counts"][array.pk]

    def get_tasks_url(self, array) -> str:
        return f"/api/v1/jobs?array={array.pk}"


class ArrayCancelSerializer(StrictSerializer):
    waiting_only = serializers.BooleanField(required=False, default=False,
                                            help_text="cancel only the tasks that have not started")
    comment = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class JobArrayViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = JobArraySerializer

    def get_queryset(self):
        return JobArray.objects.restrict(self.request.user, VIEW).select_related("owner", "department")

    def get_object(self, action=VIEW):
        return self.get_queryset().get_or_404(self.request.user, action, pk=self.kwargs["pk"])

    def get_throttles(self):
        # An array is one request: its size is bounded by ARRAY_MAX_TASKS, not by the per-job submit rate.
        return [SubmitThrottle()] if self.action == "create" else super().get_throttles()

    def _render(self, arrays, many=False):
        counts = array_counts([a.pk for a in arrays])  # one query for the whole page
        body = JobArraySerializer(arrays, many=True, context={"counts": counts}).data
        return body if many else body[0]

    def list(self, request, *args, **kwargs):
        member(request.user)
        page = self.paginate_queryset(self.get_queryset().order_by("-submitted_at", "-id"))
        return self.get_paginated_response(self._render(page, many=True))

    def retrieve(self, request, *args, **kwargs):
        return Response(self._render([self.get_object()]))

    @extend_schema(request=ArraySubmitSerializer, responses={201: JobArraySerializer, 200: JobArraySerializer},
                   parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER,
                                                description="Retry-safe: the same key returns the same array")],
                   summary="Submit a job array",
                   description="One request, N tasks: each is a job (GET /api/v1/jobs?array=ID lists them) with "
                   "PORTAL_ARRAY_ID, PORTAL_ARRAY_INDEX and PORTAL_ARRAY_COUNT in its environment and {{index}} / "
                   "{{count}} filled into its command and env. All or nothing.")
    def create(self, request):
        member(request.user)
        serializer = ArraySubmitSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = dict(serializer.validated_data)
        spec = data.pop("array")
        array, created = array_submit(user=request.user, data=data, spec=spec, indices=str(request.data["array"]).strip(),
                                      idempotency_key=idempotency_key(request))
        return Response(self._render([array]), status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
                        headers={"Location": f"/api/v1/arrays/{array.pk}"})

    @extend_schema(request=ArrayCancelSerializer, responses=JobArraySerializer, summary="Cancel an array's tasks")
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        array = self.get_object(CHANGE)
        serializer = ArrayCancelSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        array_cancel(user=request.user, array=array, **serializer.validated_data)
        return Response(self._render([array]))

    @extend_schema(request=None, responses=JobArraySerializer, summary="Hold every waiting task of an array")
    @action(detail=True, methods=["post"])
    def hold(self, request, pk=None):
        array = self.get_object(CHANGE)
        array_hold(user=request.user, array=array)
        return Response(self._render([array]))

    @extend_schema(request=None, responses=JobArraySerializer, summary="Release an array's held tasks")
    @action(detail=True, methods=["post"])
    def release(self, request, pk=None):
        array = self.get_object(CHANGE)
        array_hold(user=request.user, array=array, release=True)
        return Response(self._render([array]))
