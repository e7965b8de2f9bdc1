"""Flavors (public to members; platform admins create, change and delete them), quotas (read through the
tenancy gate: a member sees their department's, platform admins all; platform admins create, change and delete
them, validated against the clusters' capacity and audited through quotas.services.rules) and quota change
requests (a department admin asks, a platform admin approves or rejects)."""

from __future__ import annotations

from django.db.models import Count, Sum
from django.db.models.functions import Coalesce
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response

from portal.api.serializers import StrictSerializer, validated
from portal.errors import NotFound, ValidationFailed
from portal.models import Department
from portal.tenancy import ADMIN, CHANGE, VIEW, membership_of, require_role
from quotas import ports
from quotas.models import Flavor, GpuSharing, Quota, QuotaChangeRequest, QuotaResource
from quotas.services import flavors as flavor_services
from quotas.services import quota_requests, rules


class FlavorSerializer(serializers.ModelSerializer):
    total_gpus = serializers.IntegerField(read_only=True)
    nodes = serializers.IntegerField(source="node_count", read_only=True)
    is_mig = serializers.BooleanField(read_only=True, help_text="a MIG profile (nvidia.com/mig-...)")

    class Meta:
        model = Flavor
        fields = ["name", "resource_name", "node_labels", "gpu_memory_gib", "description", "total_gpus", "nodes",
                  "is_mig", "sharing", "shared_resource_name", "replicas_per_gpu"]


class FlavorInputSerializer(StrictSerializer):
    name = serializers.RegexField(r"^[a-z0-9]([a-z0-9.-]{0,38}[a-z0-9])?$", max_length=40,
                                  error_messages={"invalid": "Lower-case letters, digits, . and -."})
    resource_name = serializers.RegexField(
        r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?$",
        max_length=120, required=False, default="nvidia.com/gpu",
        error_messages={"invalid": "A Kubernetes extended resource name, e.g. nvidia.com/gpu or "
                                   "nvidia.com/mig-3g.40gb."})
    node_labels = serializers.DictField(child=serializers.CharField(max_length=63), required=False, default=dict)
    gpu_memory_gib = serializers.IntegerField(min_value=0, max_value=10_000, required=False, default=0)
    description = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    sharing = serializers.ChoiceField(
        choices=GpuSharing.choices, required=False, allow_blank=True, default="",
        help_text="whether its GPUs may be shared between pods, and how: hami (GPU memory and a compute share) or "
        "replicas (time-slicing / MPS); blank: whole GPUs only (docs/fractions.md)")
    shared_resource_name = serializers.CharField(
        max_length=120, required=False, allow_blank=True, default="",
        help_text="replicas: the resource the device plugin advertises them as, e.g. nvidia.com/gpu.shared")
    replicas_per_gpu = serializers.IntegerField(min_value=0, max_value=64, required=False, default=0,
                                                help_text="replicas: how many each GPU is advertised as")


class FlavorUpdateSerializer(FlavorInputSerializer):
    name = None

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        for f in self.fields.values():  # a PATCH names only what changes
            f.required = False
            f.default = serializers.empty


class FlavorViewSet(mixins.CreateModelMixin, mixins.UpdateModelMixin, mixins.DestroyModelMixin,
                    viewsets.ReadOnlyModelViewSet):
    """GPU flavors: whole GPUs (``nvidia.com/gpu``) and MIG profiles (``nvidia.com/mig-3g.40gb``). Members
    read them; platform admins create, change (not rename) and delete unused ones."""

    serializer_class = FlavorSerializer
    lookup_field = "name"
    lookup_value_regex = "[^/]+"
    http_method_names = ["get", "post", "patch", "delete", "head", "options"]

    def _flavor(self):
        require_role(self.request.user, ADMIN, "Only platform admins can change flavors.")
        flavor = Flavor.objects.filter(name=self.kwargs["name"]).first()
        if flavor is None:
            raise NotFound("No such flavor.")
        return flavor

    @extend_schema(request=FlavorInputSerializer, responses={201: FlavorSerializer})
    def create(self, request, *args, **kwargs):
        require_role(request.user, ADMIN, "Only platform admins can create flavors.")
        body = validated(FlavorInputSerializer, request.data)
        flavor = flavor_services.flavor_create(actor=request.user, **body)
        return Response(self.get_serializer(self.get_queryset().get(pk=flavor.pk)).data,
                        status=status.HTTP_201_CREATED)

    @extend_schema(request=FlavorUpdateSerializer, responses=FlavorSerializer)
    def partial_update(self, request, *args, **kwargs):
        flavor = self._flavor()
        body = validated(FlavorUpdateSerializer, request.data)
        flavor = flavor_services.flavor_update(flavor=flavor, actor=request.user, **body)
        return Response(self.get_serializer(self.get_queryset().get(pk=flavor.pk)).data)

    def update(self, request, *args, **kwargs):
        return self.partial_update(request, *args, **kwargs)

    @extend_schema(request=None, responses={204: None})
    def destroy(self, request, *args, **kwargs):
        flavor_services.flavor_delete(flavor=self._flavor(), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)

    def get_queryset(self):
        if membership_of(self.request.user) is None:  # flavors belong to no department: any member sees them
            return Flavor.objects.none()
        # Coalesce: a flavor no node offers has 0 GPUs, not null (the schema promises an integer).
        return Flavor.objects.annotate(total_gpus=Coalesce(Sum("nodes__gpus"), 0),
                                       node_count=Count("nodes")).order_by("name")


class QuotaSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    flavor = serializers.SlugRelatedField(slug_field="name", read_only=True)
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True,
                                           help_text="the cluster of a per-cluster quota; null: all clusters")
    resource = serializers.ChoiceField(choices=QuotaResource.choices, read_only=True,
                                       help_text="what the numbers count: gpus, or a CPU pool's cpu (cores) or "
                                       "memory (GiB)")
    in_use = serializers.SerializerMethodField()

    class Meta:
        model = Quota
        fields = ["id", "department", "flavor", "cluster", "resource", "nominal", "borrowing_limit", "lending_limit",
                  "in_use"]

    def get_in_use(self, quota) -> int:
        """What the department's admitted and running jobs hold in the quota's scope: GPUs, or the cores or
        GiB of a CPU pool (rounded up)."""
        if quota.resource != QuotaResource.GPUS:
            milli, mib = self.context.get("cpu_usage", {}).get((quota.department_id, quota.flavor_id), (0, 0))
            return -(-milli // 1000) if quota.resource == QuotaResource.CPU else -(-mib // 1024)
        usage = self.context.get("usage", {})
        if quota.cluster_id is None:
            return sum(n for (d, f, _), n in usage.items() if (d, f) == (quota.department_id, quota.flavor_id))
        return usage.get((quota.department_id, quota.flavor_id, quota.cluster_id), 0)


class QuotaUpdateSerializer(StrictSerializer):
    nominal = serializers.IntegerField(min_value=0, max_value=100_000, required=False)
    borrowing_limit = serializers.IntegerField(min_value=0, max_value=100_000, required=False, allow_null=True)
    lending_limit = serializers.IntegerField(min_value=0, max_value=100_000, required=False, allow_null=True)
    oversubscribe = serializers.BooleanField(required=False, default=False,
                                             help_text="accept nominal quotas above the installed GPUs")
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="",
                                    help_text="why (kept in the audit entry)")


class QuotaCreateSerializer(QuotaUpdateSerializer):
    department = serializers.SlugField(max_length=40)
    flavor = serializers.CharField(max_length=40)
    cluster = serializers.CharField(max_length=40, required=False, allow_null=True, default=None,
                                    help_text="a cluster's name for a per-cluster quota; null: all clusters")
    nominal = serializers.IntegerField(min_value=0, max_value=100_000)
    resource = serializers.ChoiceField(choices=QuotaResource.choices, required=False, default=QuotaResource.GPUS,
                                       help_text="gpus (a GPU flavor), or cpu (cores) or memory (GiB) of a CPU pool")


class QuotaOutSerializer(QuotaSerializer):
    warnings = serializers.SerializerMethodField()

    class Meta(QuotaSerializer.Meta):
        fields = [*QuotaSerializer.Meta.fields, "warnings"]

    def get_warnings(self, quota) -> list[str]:
        return list(getattr(quota, "warnings", []))


def _lookup(user, department: str, flavor: str, cluster: str | None = None) -> tuple[Department, Flavor, object]:
    """The department (through the tenancy gate), the flavor and the cluster (if any) a quota body names, as
    field errors."""
    errors = {}
    cl = None
    if cluster is not None:
        cl = ports.facts().cluster_named(cluster)  # clusters are scheduling's (quotas.ports)
        if cl is None:
            errors["cluster"] = [{"code": "does_not_exist", "message": f"No cluster {cluster}."}]
    dept = Department.objects.restrict(user, VIEW).filter(slug=department).first()
    if dept is None:
        errors["department"] = [{"code": "does_not_exist", "message": f"No department {department}."}]
    fl = Flavor.objects.filter(name=flavor).first()
    if fl is None:
        errors["flavor"] = [{"code": "does_not_exist", "message": f"No flavor {flavor}."}]
    if errors:
        raise ValidationFailed(fields=errors)
    return dept, fl, cl


class QuotaViewSet(mixins.UpdateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Quotas. PATCH (platform admins) validates like every quota change: lending limit <= nominal,
    borrowing limit >= 0, and the nominal quotas of a flavor within its installed GPUs unless
    ``oversubscribe: true`` (the response's ``warnings`` and the audit entry then say so)."""

    serializer_class = QuotaSerializer

    def get_queryset(self):
        return Quota.objects.restrict(self.request.user, VIEW).select_related("department", "flavor", "cluster")

    def get_object(self, action=VIEW):
        return self.get_queryset().get_or_404(self.request.user, action, pk=self.kwargs["pk"],
                                              message="Only platform admins can change quotas.")

    @extend_schema(request=QuotaUpdateSerializer, responses=QuotaOutSerializer)
    def update(self, request, *args, **kwargs):
        quota = self.get_object(CHANGE)
        body = validated(QuotaUpdateSerializer, request.data, partial=kwargs.get("partial", False))
        quota = rules.quota_set(quota=quota, actor=request.user, **body)
        return Response(QuotaOutSerializer(quota, context=self.get_serializer_context()).data)

    @extend_schema(request=QuotaUpdateSerializer, responses=QuotaOutSerializer)
    def partial_update(self, request, *args, **kwargs):
        return self.update(request, *args, partial=True, **kwargs)

    @extend_schema(request=QuotaCreateSerializer, responses={201: QuotaOutSerializer})
    def create(self, request, *args, **kwargs):
        require_role(request.user, ADMIN, "Only platform admins can create quotas.")
        data = dict(validated(QuotaCreateSerializer, request.data))
        dept, flavor, cluster = _lookup(request.user, data.pop("department"), data.pop("flavor"),
                                        data.pop("cluster"))
        quota = rules.quota_create(department=dept, flavor=flavor, cluster=cluster, actor=request.user, **data)
        return Response(QuotaOutSerializer(quota, context=self.get_serializer_context()).data,
                        status=status.HTTP_201_CREATED)

    @extend_schema(request=None, responses={204: None})
    def destroy(self, request, *args, **kwargs):
        quota = self.get_object(CHANGE)
        rules.quota_delete(quota=quota, actor=request.user, comment=request.query_params.get("comment", ""))
        return Response(status=status.HTTP_204_NO_CONTENT)

    def get_serializer_context(self):
        ctx = super().get_serializer_context()
        # GPUs held by jobs, by (department, flavor, cluster): scheduling counts them (quotas.ports).
        ctx["usage"] = ports.facts().gpus_in_use()
        ctx["cpu_usage"] = ports.facts().cpu_in_use()
        return ctx


class QuotaRequestSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    flavor = serializers.SlugRelatedField(slug_field="name", read_only=True)
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True,
                                           help_text="the cluster of a per-cluster quota; null: all clusters")
    # null: the requester's account was deleted; not decided yet
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = QuotaChangeRequest
        fields = ["id", "department", "flavor", "cluster", "resource", "nominal", "borrowing_limit", "lending_limit",
                  "oversubscribe",
                  "reason", "state", "requested_by", "requested_at", "decided_by", "decided_at",
                  "decision_comment"]
        read_only_fields = fields


class QuotaRequestCreateSerializer(StrictSerializer):
    department = serializers.SlugField(max_length=40)
    flavor = serializers.CharField(max_length=40)
    cluster = serializers.CharField(max_length=40, required=False, allow_null=True, default=None,
                                    help_text="a cluster's name to change the quota on that cluster only; null: the "
                                              "global quota (all clusters)")
    resource = serializers.ChoiceField(choices=QuotaResource.choices, required=False, default=QuotaResource.GPUS,
                                       help_text="gpus (a GPU flavor), or cpu (cores) or memory (GiB) of a CPU pool")
    # No defaults: a field left out is the quota in force's (the service fills it in), never "no limit".
    nominal = serializers.IntegerField(min_value=0, max_value=100_000, required=False,
                                       help_text="GPUs guaranteed; omitted: the quota in force's")
    borrowing_limit = serializers.IntegerField(
        min_value=0, max_value=100_000, required=False, allow_null=True,
        help_text="GPUs above nominal it may borrow; null: no limit; omitted: the quota in force's")
    lending_limit = serializers.IntegerField(
        min_value=0, max_value=100_000, required=False, allow_null=True,
        help_text="GPUs of its unused nominal it lends; null: all of it; omitted: the quota in force's")
    oversubscribe = serializers.BooleanField(required=False, default=False)
    reason = serializers.CharField(max_length=2000)


class QuotaRequestDecisionSerializer(StrictSerializer):
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class QuotaRequestViewSet(mixins.CreateModelMixin, viewsets.ReadOnlyModelViewSet):
    """Quota change requests: a department admin files one for their department; a platform admin approves
    it (applied, validated and audited like a direct change) or rejects it. A number left out of the body is
    the quota in force's (stored in the request as such); ``null`` is no limit (lend all, for lending)."""

    serializer_class = QuotaRequestSerializer

    def get_queryset(self):
        qs = QuotaChangeRequest.objects.restrict(self.request.user, VIEW).select_related(
            "department", "flavor", "cluster", "requested_by", "decided_by")
        state = self.request.query_params.get("state")
        return qs.filter(state=state) if state else qs

    def _request(self, action_=VIEW):
        return QuotaChangeRequest.objects.select_related("department", "flavor", "cluster", "requested_by").get_or_404(
            self.request.user, action_, pk=self.kwargs["pk"], missing="No such quota request.",
            message="Only platform admins decide quota requests.")

    def get_object(self):
        return self._request(VIEW)

    @extend_schema(request=QuotaRequestCreateSerializer, responses={201: QuotaRequestSerializer})
    def create(self, request, *args, **kwargs):
        require_role(request.user, CHANGE, "Only department admins can request quota changes.")
        data = dict(validated(QuotaRequestCreateSerializer, request.data))
        slug = data.pop("department")
        dept = Department.objects.get_or_404(request.user, CHANGE, slug=slug,
                                             message="You can request quotas for your own department only.")
        _, flavor, cluster = _lookup(request.user, slug, data.pop("flavor"), data.pop("cluster"))
        req = quota_requests.quota_request_create(department=dept, flavor=flavor, cluster=cluster, actor=request.user,
                                                  **data)
        return Response(QuotaRequestSerializer(req).data, status=status.HTTP_201_CREATED)

    @extend_schema(request=QuotaRequestDecisionSerializer, responses=QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def approve(self, request, pk=None):
        req = self._request(ADMIN)
        body = validated(QuotaRequestDecisionSerializer, request.data)
        req, _ = quota_requests.quota_request_approve(req=req, actor=request.user, **body)
        return Response(QuotaRequestSerializer(req).data)

    @extend_schema(request=QuotaRequestDecisionSerializer, responses=QuotaRequestSerializer)
    @action(detail=True, methods=["post"])
    def reject(self, request, pk=None):
        req = self._request(ADMIN)
        body = validated(QuotaRequestDecisionSerializer, request.data)
        req = quota_requests.quota_request_reject(req=req, actor=request.user, **body)
        return Response(QuotaRequestSerializer(req).data)
