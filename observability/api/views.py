"""Observability API v1: a job's GPU use and hints, and right-sizing recommendations. Reads go through the
tenancy gate; a job you may not see is a 404."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from observability.api.serializers import (
    EfficiencyQuerySerializer,
    EfficiencyReportSerializer,
    GpuUsageSerializer,
    RecommendationQuerySerializer,
    RecommendationSerializer,
)
from observability.selectors import (
    efficiency_rows,
    job_observability,
    recommendation_for,
    recommended_fraction,
)
from observability.services import efficiency
from portal.api.csv import CsvRowsRenderer
from portal.api.serializers import validated
from portal.tenancy import VIEW, member
from scheduling.models import Job


class JobGpuUsageView(APIView):
    @extend_schema(responses=GpuUsageSerializer, summary="A job's measured GPU use, idle flag and hints")
    def get(self, request, pk: int):
        job = Job.objects.select_related("department", "flavor").get_or_404(request.user, VIEW, pk=pk)
        obs = job_observability(user=request.user, job=job)
        attempts = [{**{f: getattr(u, f) for f in GpuUsageSerializer().fields["attempts"].child.fields
                        if f != "idle"}, "idle": u.idle} for u in obs.attempts]
        return Response(GpuUsageSerializer({
            "job": job.pk, "attempt": job.attempt, "has_data": obs.has_data,
            "idle": bool(obs.current and obs.current.idle),
            "idle_threshold_pct": obs.idle_threshold_pct, "idle_minutes": obs.idle_minutes,
            "attempts": attempts, "hints": [h.__dict__ for h in obs.hints],
        }).data)


class RecommendationView(APIView):
    @extend_schema(parameters=[OpenApiParameter("name", str, description="Job name (its family is used)"),
                               OpenApiParameter("image", str, description="Container image"),
                               OpenApiParameter("flavor", str, description="A flavor that shares its GPUs: "
                                                "which fraction of one fits"),
                               OpenApiParameter("tier", str, description="The tier the fraction is priced at")],
                   responses=RecommendationSerializer,
                   summary="What your similar past jobs used (EWMA), and what to ask for")
    def get(self, request):
        query = validated(RecommendationQuerySerializer, request.query_params.dict())
        flavor, tier = query.pop("flavor"), query.pop("tier")
        rec = recommendation_for(user=request.user, **query)
        if rec is None:
            body = {"found": False, "key": None, "runs": 0, "gpus_requested": None, "busy_gpus": None,
                    "peak_memory_mib": None, "runtime_s": None, "gpus": None, "memory_gib": None,
                    "max_runtime_s": None, "text": "no finished runs of this job or image yet"}
        else:
            body = {"found": True, **{f: getattr(rec, f) for f in ("key", "runs", "gpus_requested", "busy_gpus",
                                                                    "peak_memory_mib", "runtime_s", "gpus",
                                                                    "memory_gib", "max_runtime_s", "text")},
                    "fraction": recommended_fraction(rec, flavor=flavor, tier=tier)}
        return Response(RecommendationSerializer(body).data)


class EfficiencyCSVRenderer(CsvRowsRenderer):
    columns = efficiency.COLUMNS


class EfficiencyView(APIView):
    """GET /efficiency?group_by=user|department&weeks=N&department=&format=csv: GPU-hours held against used,
    idle GPU-hours and right-sizing savings not taken, per week; your own department's (every department's
    for platform admins)."""

    renderer_classes = [JSONRenderer, EfficiencyCSVRenderer]

    def handle_exception(self, exc):
        response = super().handle_exception(exc)
        self.request.accepted_renderer = JSONRenderer()  # errors keep the one JSON shape, even for ?format=csv
        self.request.accepted_media_type = "application/json"
        return response

    @extend_schema(parameters=[EfficiencyQuerySerializer],
                   responses={(200, "application/json"): EfficiencyReportSerializer,
                              (200, "text/csv"): {"type": "string", "description": "one row per week and group"}},
                   summary="GPU efficiency per member or department, by week")
    def get(self, request):
        member(request.user)
        f = validated(EfficiencyQuerySerializer, request.query_params.dict())
        rows = efficiency_rows(user=request.user, group_by=f["group_by"], weeks=f["weeks"],
                               department=f.get("department"))
        if getattr(request.accepted_renderer, "format", "") == "csv":
            return Response(rows, headers={"Content-Disposition": 'attachment; filename="efficiency.csv"'})
        return Response({"group_by": f["group_by"], "weeks": f["weeks"], "rows": rows})
