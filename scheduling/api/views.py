"""Jobs API v1. Views validate and call services; every job lookup goes through Job.objects.for_user."""

from __future__ import annotations

from django.db import transaction
from django.db.models import Prefetch
from django.http import StreamingHttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.throttling import ScopedRateThrottle

from portal.errors import Forbidden
from portal.tenancy import can_manage_job, membership_of
from scheduling.api.serializers import (
    CancelSerializer,
    JobDetailSerializer,
    JobSerializer,
    JobSubmitSerializer,
)
from scheduling.models import JobEvent
from scheduling.selectors import jobs_for
from scheduling.services.jobs import job_cancel, job_submit

FILTERS = [
    OpenApiParameter("state", str, description="Comma-separated states, e.g. queued,running"),
    OpenApiParameter("tier", str, description="Comma-separated tiers"),
    OpenApiParameter("flavor", str),
    OpenApiParameter("mine", bool, description="Only my jobs"),
    OpenApiParameter("department", str, description="Department slug (platform admins)"),
    OpenApiParameter("q", str, description="Name contains"),
]


class JobViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, viewsets.GenericViewSet):
    serializer_class = JobSerializer

    def get_queryset(self):
        qs = jobs_for(self.request.user, self.request.query_params if self.action == "list" else {})
        if self.action == "retrieve":
            qs = qs.prefetch_related(Prefetch("events", JobEvent.objects.select_related("actor")))
        return qs

    def get_serializer_class(self):
        return JobDetailSerializer if self.action == "retrieve" else JobSerializer

    def get_throttles(self):
        if self.action == "create":
            self.throttle_scope = "submit"
            return [ScopedRateThrottle()]
        return super().get_throttles()

    @extend_schema(parameters=FILTERS)
    def list(self, request, *args, **kwargs):
        return super().list(request, *args, **kwargs)

    @extend_schema(
        request=JobSubmitSerializer,
        responses={201: JobDetailSerializer, 200: JobDetailSerializer},
        parameters=[OpenApiParameter("Idempotency-Key", str, OpenApiParameter.HEADER,
                                     description="Retry-safe submission: the same key returns the same job")],
    )
    def create(self, request):
        if membership_of(request.user) is None:
            raise Forbidden("You are not a member of any department; ask a platform admin to add you.")
        serializer = JobSubmitSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        key = request.headers.get("Idempotency-Key") or None
        if key is not None and len(key) > 200:
            from portal.errors import ValidationFailed

            raise ValidationFailed(fields={"Idempotency-Key": [{"code": "too_long",
                                                                "message": "At most 200 characters."}]})
        job, created = job_submit(user=request.user, data=serializer.validated_data, idempotency_key=key)
        if created:  # complete in memory: its relations came with the request, its timeline is one event
            _prefetched_timeline(job, [job.submission_event])
        else:  # a replay: render the stored job as it is now
            job = self.get_queryset().prefetch_related(
                Prefetch("events", JobEvent.objects.select_related("actor"))).get(pk=job.pk)
        body = JobDetailSerializer(job, context={"request": request}).data
        return Response(body, status=status.HTTP_201_CREATED if created else status.HTTP_200_OK,
                        headers={"Location": f"/api/v1/jobs/{job.pk}"})

    @extend_schema(request=CancelSerializer, responses=JobDetailSerializer)
    @action(detail=True, methods=["post"])
    def cancel(self, request, pk=None):
        job = self.get_object()  # 404 for another tenant's job
        serializer = CancelSerializer(data=request.data or {})
        serializer.is_valid(raise_exception=True)
        with transaction.atomic():
            job_cancel(user=request.user, job=job, comment=serializer.validated_data["comment"])
        job = self.get_queryset().prefetch_related("events").get(pk=job.pk)
        return Response(JobDetailSerializer(job, context={"request": request}).data)

    @extend_schema(
        parameters=[OpenApiParameter("tail", int, description="Last N lines (default 200, max 5000)"),
                    OpenApiParameter("follow", bool, description="Stream new lines as they come")],
        responses={(200, "text/plain"): OpenApiTypes.STR},
    )
    @action(detail=True, methods=["get"])
    def logs(self, request, pk=None):
        job = self.get_object()
        if not can_manage_job(request.user, job):
            raise Forbidden("Only the job's owner and admins can read its logs.")
        from scheduling.backends import get_backend
        from scheduling.services.jobs import namespace_for

        try:
            tail = max(1, min(5000, int(request.query_params.get("tail", 200))))
        except ValueError:
            from portal.errors import ValidationFailed

            raise ValidationFailed(fields={"tail": [{"code": "invalid", "message": "An integer is required."}]})
        follow = request.query_params.get("follow") in ("1", "true", "yes")
        backend = get_backend(job.cluster.name if job.cluster_id else "default")
        lines = backend.logs(job_id=job.pk, attempt=job.attempt, namespace=namespace_for(job.department.slug),
                             tail_lines=tail, follow=follow)
        return StreamingHttpResponse((line.rstrip("\n") + "\n" for line in lines),
                                     content_type="text/plain; charset=utf-8")


def _prefetched_timeline(job, events) -> None:
    """Set ``job.events`` as if prefetched (what Django's prefetch_related stores), for rendering only."""
    qs = job.events.all()
    qs._result_cache, qs._prefetch_done = list(events), True
    job._prefetched_objects_cache = {"events": qs}
