"""Flavors (public to members) and quotas (a member sees their department's; platform admins all; platform
admins change them with PATCH, audited through quotas.services.quota_set)."""

from __future__ import annotations

from django.db.models import Count, Sum
from django.db.models.functions import Coalesce
from rest_framework import mixins, serializers, viewsets
from rest_framework.response import Response

from portal.tenancy import membership_of
from quotas.models import Flavor, Quota


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
        if membership_of(self.request.user) is None:
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


class QuotaUpdateSerializer(serializers.Serializer):
    nominal = serializers.IntegerField(min_value=0, max_value=100_000, required=False)
    borrowing_limit = serializers.IntegerField(min_value=0, max_value=100_000, required=False, allow_null=True)
    lending_limit = serializers.IntegerField(min_value=0, max_value=100_000, required=False, allow_null=True)

    def to_internal_value(self, data):
        if isinstance(data, dict):
            unknown = sorted(set(data) - set(self.fields))
            if unknown:
                raise serializers.ValidationError(
                    {k: [serializers.ErrorDetail("Unknown field.", code="unknown_field")] for k in unknown})
        return super().to_internal_value(data)


class QuotaViewSet(mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    serializer_class = QuotaSerializer

    def get_queryset(self):
        m = membership_of(self.request.user)
        qs = Quota.objects.select_related("department", "flavor")
        if m is None:
            return qs.none()
        return qs if m.is_platform_admin else qs.filter(department_id=m.department_id)

    def update(self, request, *args, **kwargs):
        from portal.errors import Forbidden
        from quotas.services.rules import quota_set

        quota = self.get_object()  # 404 outside the caller's scope
        m = membership_of(request.user)
        if m is None or not m.is_platform_admin:
            raise Forbidden("Only platform admins can change quotas.")
        s = QuotaUpdateSerializer(data=request.data, partial=kwargs.get("partial", False))
        s.is_valid(raise_exception=True)
        quota = quota_set(quota=quota, actor=request.user, **s.validated_data)
        return Response(self.get_serializer(quota).data)

    def get_serializer_context(self):
        from django.db.models import F

        from scheduling.models import ACTIVE_STATES, Job

        ctx = super().get_serializer_context()
        rows = (
            Job.objects.filter(state__in=ACTIVE_STATES)
            .values("department_id", "flavor_id")
            .annotate(n=Sum(F("gpus") * F("pods")))
        )
        ctx["usage"] = {(r["department_id"], r["flavor_id"]): r["n"] for r in rows}
        return ctx
