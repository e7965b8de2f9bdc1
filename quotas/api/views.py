"""Flavors (public to members) and quotas (a member sees their department's; platform admins all)."""

from __future__ import annotations

from django.db.models import Count, Sum
from rest_framework import serializers, viewsets

from portal.tenancy import membership_of
from quotas.models import Flavor, Quota


class FlavorSerializer(serializers.ModelSerializer):
    total_gpus = serializers.IntegerField(read_only=True)
    nodes = serializers.IntegerField(read_only=True)

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
        return Flavor.objects.annotate(total_gpus=Sum("nodes__gpus"), nodes=Count("nodes")).order_by("name")


class QuotaSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    flavor = serializers.SlugRelatedField(slug_field="name", read_only=True)
    in_use = serializers.SerializerMethodField()

    class Meta:
        model = Quota
        fields = ["id", "department", "flavor", "nominal", "borrowing_limit", "lending_limit", "in_use"]

    def get_in_use(self, quota) -> int:
        return self.context.get("usage", {}).get((quota.department_id, quota.flavor_id), 0)


class QuotaViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = QuotaSerializer

    def get_queryset(self):
        m = membership_of(self.request.user)
        qs = Quota.objects.select_related("department", "flavor")
        if m is None:
            return qs.none()
        return qs if m.is_platform_admin else qs.filter(department_id=m.department_id)

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
