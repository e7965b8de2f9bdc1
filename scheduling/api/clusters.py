"""Clusters and node groups (platform admins): declared here, audited through
``scheduling.services.cluster_config``. A cluster whose nodes the Kubernetes inventory sync stores refuses node
groups (its nodes come from the cluster itself)."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.utils import PolymorphicProxySerializer, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.serializers import StrictSerializer, validated
from portal.errors import NotFound, ValidationFailed
from portal.tenancy import ADMIN, PLATFORM, member, require_role, scope
from quotas.models import Flavor
from scheduling.models import BackendKind, Cluster, ClusterState, label_problems
from scheduling.services import cluster_config

ONLY = "Only platform admins manage clusters."


class NodeGroupSerializer(serializers.Serializer):
    name = serializers.CharField()
    flavor = serializers.CharField()
    nodes = serializers.IntegerField()
    gpus_per_node = serializers.IntegerField()
    labels = serializers.DictField(child=serializers.CharField())


class ClusterPublicSerializer(serializers.ModelSerializer):
    """What every member sees of a cluster: enough to write a cluster selector, nothing of how it is reached."""

    class Meta:
        model = Cluster
        fields = ["name", "labels", "topology_levels", "state", "is_default", "reachable"]
        read_only_fields = fields


class ClusterPublicSchema(OpenApiSerializerExtension):
    """A member's view has exactly these fields: saying so keeps it apart from the admin's view in the list's
    ``oneOf`` (an admin's cluster would otherwise match both)."""

    target_class = ClusterPublicSerializer

    def map_serializer(self, auto_schema, direction):
        return {**auto_schema._map_basic_serializer(self.target, direction), "additionalProperties": False}


class ClusterSerializer(serializers.ModelSerializer):
    """A platform admin's view. The connection settings are references (a file path, a variable's name): the
    kubeconfig itself is never read into the database, so it can never appear here."""

    node_groups = serializers.SerializerMethodField()
    nodes = serializers.SerializerMethodField()
    inventory_owned = serializers.SerializerMethodField(help_text="nodes come from the cluster's own inventory")
    cpu_on_gpu_nodes = serializers.SlugRelatedField(
        slug_field="name", read_only=True, allow_null=True,
        help_text="the CPU pool whose pods may run on this cluster's GPU nodes' spare CPU (null: off)")

    class Meta:
        model = Cluster
        fields = ["name", "backend", "is_default", "state", "labels", "topology_levels", "cost_rank", "kubeconfig",
                  "kubeconfig_env",
                  "context", "in_cluster", "namespace_template", "reachable", "last_sync_at", "last_error",
                  "inventory_owned", "nodes", "node_groups", "cpu_on_gpu_nodes", "gpu_reserve_cores",
                  "gpu_reserve_memory_gib"]
        read_only_fields = fields

    def get_node_groups(self, cluster) -> list[dict]:
        return [{"name": k, **v} for k, v in sorted(cluster_config.node_groups(cluster).items())]

    def get_nodes(self, cluster) -> int:
        return cluster.nodes.count()

    def get_inventory_owned(self, cluster) -> bool:
        return cluster_config.inventory_owned(cluster)


class ClusterFieldsSerializer(StrictSerializer):
    """The settings of a cluster; the service checks how they fit together (one way to reach it, a namespace
    template with {department}, Kubernetes label rules)."""

    backend = serializers.ChoiceField(choices=BackendKind.choices, required=False)
    is_default = serializers.BooleanField(required=False)
    state = serializers.ChoiceField(choices=ClusterState.choices, required=False)
    labels = serializers.DictField(child=serializers.CharField(max_length=63, allow_blank=True), required=False)
    topology_levels = serializers.ListField(
        child=serializers.CharField(max_length=317), required=False, max_length=4,
        help_text="node label keys grouping the nodes into network domains, outermost first, e.g. "
        "[\"topology.kubernetes.io/block\", \"topology.kubernetes.io/rack\", \"kubernetes.io/hostname\"]")
    cost_rank = serializers.IntegerField(min_value=cluster_config.COST_RANK_RANGE[0],
                                         max_value=cluster_config.COST_RANK_RANGE[1], required=False)
    kubeconfig = serializers.CharField(max_length=500, required=False, allow_blank=True,
                                       help_text="path of a kubeconfig file on the portal's hosts")
    kubeconfig_env = serializers.CharField(max_length=100, required=False, allow_blank=True,
                                           help_text="name of an environment variable holding a kubeconfig")
    context = serializers.CharField(max_length=253, required=False, allow_blank=True)
    in_cluster = serializers.BooleanField(required=False)
    namespace_template = serializers.CharField(max_length=100, required=False, allow_blank=True)
    cpu_on_gpu_nodes = serializers.CharField(
        max_length=40, required=False, allow_null=True,
        help_text="CPU work on GPU nodes: the CPU pool (a flavor of kind cpu) whose pods may also run on this "
                  "cluster's GPU nodes, in what each has beyond its GPU pods and the reserve per GPU; null: off")
    gpu_reserve_cores = serializers.IntegerField(
        min_value=cluster_config.RESERVE_RANGES["gpu_reserve_cores"][0],
        max_value=cluster_config.RESERVE_RANGES["gpu_reserve_cores"][1], required=False,
        help_text="cores each GPU node keeps per GPU for its GPU pods (default 4)")
    gpu_reserve_memory_gib = serializers.IntegerField(
        min_value=cluster_config.RESERVE_RANGES["gpu_reserve_memory_gib"][0],
        max_value=cluster_config.RESERVE_RANGES["gpu_reserve_memory_gib"][1], required=False,
        help_text="GiB of memory each GPU node keeps per GPU for its GPU pods (default 32)")

    def validate_labels(self, labels):
        problems = label_problems(labels)
        if problems:
            raise serializers.ValidationError(problems)
        return labels


class ClusterCreateSerializer(ClusterFieldsSerializer):
    name = serializers.SlugField(max_length=40)


class ClusterUpdateSerializer(ClusterFieldsSerializer):
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class NodeGroupInputSerializer(StrictSerializer):
    flavor = serializers.CharField(max_length=40)
    nodes = serializers.IntegerField(min_value=0, max_value=10_000)
    gpus_per_node = serializers.IntegerField(min_value=1, max_value=64)
    labels = serializers.DictField(child=serializers.CharField(max_length=63), required=False, allow_null=True,
                                   default=None)
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


def _cluster(user, name: str) -> Cluster:
    require_role(user, ADMIN, ONLY)
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        raise NotFound("No such cluster.")
    return cluster


class ClusterListView(APIView):
    @extend_schema(responses=PolymorphicProxySerializer(
                       component_name="ClusterForRole", serializers=[ClusterSerializer, ClusterPublicSerializer],
                       resource_type_field_name=None, many=True),
                   description="Platform admins get every setting; other members each cluster's name, labels "
                               "and state (to write cluster selectors), never how it is reached.")
    def get(self, request):
        member(request.user)
        clusters = Cluster.objects.order_by("name")
        if scope(request.user, PLATFORM).nothing:
            return Response(ClusterPublicSerializer(clusters, many=True).data)
        return Response(ClusterSerializer(clusters, many=True).data)

    @extend_schema(request=ClusterCreateSerializer, responses={201: ClusterSerializer})
    def post(self, request):
        require_role(request.user, ADMIN, ONLY)
        body = validated(ClusterCreateSerializer, request.data)
        cluster = cluster_config.cluster_create(actor=request.user, **body)
        return Response(ClusterSerializer(cluster).data, status=status.HTTP_201_CREATED)


class ClusterDetailView(APIView):
    @extend_schema(responses=ClusterSerializer)
    def get(self, request, name):
        return Response(ClusterSerializer(_cluster(request.user, name)).data)

    @extend_schema(request=ClusterUpdateSerializer, responses=ClusterSerializer)
    def patch(self, request, name):
        cluster = _cluster(request.user, name)
        body = validated(ClusterUpdateSerializer, request.data)
        cluster = cluster_config.cluster_update(cluster=cluster, actor=request.user, **body)
        return Response(ClusterSerializer(cluster).data)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, name):
        cluster_config.cluster_delete(cluster=_cluster(request.user, name), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class NodeGroupView(APIView):
    """PUT creates or resizes a node group (``<group>-0`` .. ``<group>-<n-1>``); DELETE removes its nodes.
    Nodes a job runs on are never removed."""

    @extend_schema(responses=NodeGroupSerializer)
    def get(self, request, name, group):
        groups = cluster_config.node_groups(_cluster(request.user, name))
        if group not in groups:
            raise NotFound("No such node group.")
        return Response({"name": group, **groups[group]})

    @extend_schema(request=NodeGroupInputSerializer, responses=NodeGroupSerializer)
    def put(self, request, name, group):
        cluster = _cluster(request.user, name)
        data = dict(validated(NodeGroupInputSerializer, request.data))
        flavor = Flavor.objects.filter(name=data.pop("flavor")).first()
        if flavor is None:
            raise ValidationFailed(fields={"flavor": [{"code": "does_not_exist", "message": "No such flavor."}]})
        cluster_config.validate_group_name(group)
        result = cluster_config.node_group_set(cluster=cluster, actor=request.user, name=group, flavor=flavor, **data)
        return Response({"name": group, **result})

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, name, group):
        cluster_config.node_group_delete(cluster=_cluster(request.user, name), actor=request.user, name=group)
        return Response(status=status.HTTP_204_NO_CONTENT)
