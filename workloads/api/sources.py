"""Data sources: every member lists those their department may mount; admins declare them."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.response import Response

from portal.api.serializers import StrictSerializer, validated
from portal.errors import ValidationFailed
from portal.models import Department
from portal.tenancy import VIEW, member
from workloads.models import DataSource, SourceKind
from workloads.selectors import data_sources_for
from workloads.services import sources


class DataSourceSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    shared_with = serializers.SlugRelatedField(slug_field="slug", read_only=True, many=True)

    class Meta:
        model = DataSource
        fields = ["id", "name", "kind", "cluster", "department", "shared_with", "shared_with_all", "claim_name",
                  "writable", "sub_path", "description"]
        read_only_fields = fields


class DataSourceInputSerializer(StrictSerializer):
    name = serializers.SlugField(max_length=40)
    cluster = serializers.SlugField(max_length=40)
    kind = serializers.ChoiceField(choices=SourceKind.choices, required=False, default=SourceKind.PVC)
    department = serializers.SlugField(max_length=40, required=False, allow_null=True, default=None,
                                       help_text="owning department; null: platform-owned")
    shared_with = serializers.ListField(child=serializers.SlugField(max_length=40), required=False, default=list,
                                        max_length=500)
    shared_with_all = serializers.BooleanField(required=False, default=False)
    claim_name = serializers.CharField(max_length=253)
    writable = serializers.BooleanField(required=False, default=False)
    sub_path = serializers.CharField(max_length=255, required=False, allow_blank=True, default="")
    description = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


def _departments(slugs: list[str], field: str) -> list[Department]:
    found = {d.slug: d for d in Department.objects.filter(slug__in=slugs)}
    missing = [s for s in slugs if s not in found]
    if missing:
        raise ValidationFailed(fields={field: [{"code": "does_not_exist",
                                                "message": f"No department {', '.join(missing)}."}]})
    return [found[s] for s in slugs]


class DataSourceViewSet(mixins.ListModelMixin, mixins.RetrieveModelMixin, mixins.DestroyModelMixin,
                        viewsets.GenericViewSet):
    """The data sources your department may mount (its own, and those shared with it); platform admins see
    all. ``?cluster=name`` narrows to one cluster."""

    serializer_class = DataSourceSerializer

    def get_queryset(self):
        qs = data_sources_for(self.request.user)
        cluster = self.request.query_params.get("cluster")
        return qs.filter(cluster__name=cluster) if cluster else qs

    @extend_schema(request=DataSourceInputSerializer, responses={201: DataSourceSerializer})
    def create(self, request):
        member(request.user)
        data = dict(validated(DataSourceInputSerializer, request.data))
        # The cluster by the source's own foreign key: workloads sits below scheduling and imports none of it.
        cluster = DataSource._meta.get_field("cluster").related_model.objects.filter(name=data.pop("cluster")).first()
        if cluster is None:  # a name in the body, not the URL: bad input, as the page says it
            raise ValidationFailed(fields={"cluster": [{"code": "does_not_exist", "message": "No such cluster."}]})
        slug = data.pop("department")
        department = _departments([slug], "department")[0] if slug else None
        shared = _departments(data.pop("shared_with"), "shared_with")
        source = sources.data_source_create(actor=request.user, cluster=cluster, department=department,
                                            shared_with=shared, **data)
        return Response(DataSourceSerializer(source).data, status=status.HTTP_201_CREATED)

    def destroy(self, request, pk=None):
        source = DataSource.objects.get_or_404(request.user, VIEW, pk=pk)
        sources.data_source_delete(actor=request.user, source=source)
        return Response(status=status.HTTP_204_NO_CONTENT)
