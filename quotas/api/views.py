"""Flavors (public to members) and quotas (read through the tenancy gate: a member sees their department's,
platform admins all; platform admins change them with PATCH, audited through quotas.services.rules.quota_set)."""

from __future__ import annotations

from django.db.models import Count, F, Sum
from django.db.models.functions import Coalesce
from rest_framework import mixins, serializers, viewsets
from rest_framework.response import Response

from portal.api.serializers import StrictSerializer
from portal.tenancy import CHANGE, VIEW, membership_of
from quotas.models import Flavor, Quota
from quotas.services import rules
from scheduling.models import ACTIVE_STATES, Job


class FlavorSerializer(serializers.ModelSerializer):
    total_gpus = serializers.IntegerField(read_only=True)
    nodes = serializers.IntegerField(source="node_count", read_only=True)

    class Meta:
        model = Flavor
        fields = ["name", "resource_name", "node_labels", "gpu_memory_gib", "description", "total_gpus", "nodes"]


class FlavorViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = FlavorSerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"

    def get_queryset(self):
        if membership_of(self.request.user) is None:  # flavors belong to no department: any member sees them
            return Flavor.objects.none()
        # Coalesce: a flavor no node offers has 0 GPUs, not null (the schema promises an integer).
        return Flavor.objects.annotate(total_gpus=Coalesce(Sum("nodes__gpus"), 0),
                                       node_count=Count("nodes")).order_by("name")


class QuotaSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    flavor = serializers.SlugRelatedField(slug_field="name", read_only=True)
    in_use = serializers.SerializerMethodField()

    class Meta:
        model = Quota
        fields = ["id", "department", "flavor", "nominal", "borrowing_limit", "lending_limit", "in_use"]

    def get_in_use(self, quota) -> int:
        return self.context.get("usage", {}).get((quota.department_id, quota.flavor_id), 0)


class QuotaUpdateSerializer(StrictSerializer):
    nominal = serializers.IntegerField(min_value=0, max_value=100_000, required=False)
    borrowing_limit = serializers.IntegerField(min_value=0, max_value=100_000, required=False, allow_null=True)
    lending_limit = serializers.IntegerField(min_value=0, max_value=100_000, required=False, allow_null=True)


class QuotaViewSet(mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = QuotaSerializer

    def get_queryset(self):
        return Quota.objects.restrict(self.request.user, VIEW).select_related("department", "flavor")

    def get_object(self, action=VIEW):
        return self.get_queryset().get_or_404(self.request.user, action, pk=self.kwargs["pk"],
                                              message="Only platform admins can change quotas.")

    def update(self, request, *args, **kwargs):
        quota = self.get_object(CHANGE)
        s = QuotaUpdateSerializer(data=request.data, partial=kwargs.get("partial", False))
        s.is_valid(raise_exception=True)
        quota = rules.quota_set(quota=quota, actor=request.user, **s.validated_data)
        return Response(self.get_serializer(quota).data)

    def get_serializer_context(self):
        ctx = super().get_serializer_context()
        rows = (
            Job.objects.filter(state__in=ACTIVE_STATES)
            .values("department_id", "flavor_id")
            .annotate(n=Sum(F("gpus") * F("pods")))
        )
        ctx["usage"] = {(r["department_id"], r["flavor_id"]): r["n"] for r in rows}
        return ctx
