"""The scheduling policy (read by members, edited by platform admins) and the cluster view."""

from __future__ import annotations

from collections import defaultdict

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.errors import Forbidden
from portal.tenancy import membership_of
from scheduling.models import ACTIVE_STATES, Job, Node, PolicyVersion
from scheduling.services.policy import current_policy, policy_as_dict, policy_update


class PolicyVersionSerializer(serializers.ModelSerializer):
    author = serializers.SlugRelatedField(slug_field="username", read_only=True)

    class Meta:
        model = PolicyVersion
        fields = ["version", "data", "author", "created_at", "comment"]


class PolicyUpdateSerializer(serializers.Serializer):
    policy = serializers.DictField()
    comment = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class PolicyView(APIView):
    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request):
        if membership_of(request.user) is None:
            raise Forbidden()
        policy, version = current_policy()
        return Response({"version": version, "policy": policy_as_dict(policy)})

    @extend_schema(request=PolicyUpdateSerializer, responses={201: PolicyVersionSerializer})
    def put(self, request):
        m = membership_of(request.user)
        if m is None or not m.is_platform_admin:
            raise Forbidden("Only platform admins change the scheduling policy.")
        s = PolicyUpdateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        row = policy_update(user=request.user, data=s.validated_data["policy"], comment=s.validated_data["comment"])
        return Response(PolicyVersionSerializer(row).data, status=status.HTTP_201_CREATED)


class PolicyVersionsView(APIView):
    @extend_schema(responses=PolicyVersionSerializer(many=True))
    def get(self, request):
        m = membership_of(request.user)
        if m is None or not m.is_platform_admin:
            raise Forbidden("Only platform admins see the policy history.")
        rows = PolicyVersion.objects.select_related("author").order_by("-version")[:200]
        return Response(PolicyVersionSerializer(rows, many=True).data)


def cluster_summary() -> dict:
    """GPUs per flavor: total, used by portal jobs, used by others, free, and fragmentation (free GPUs that
    are not on a completely free node, as a share of free GPUs)."""
    used_on: dict[tuple[str, str], int] = defaultdict(int)
    for placement, gpus in Job.objects.filter(state__in=ACTIVE_STATES).values_list("placement", "gpus"):
        for node in placement or ():
            used_on[node] = used_on.get(node, 0) + gpus
    flavors: dict[str, dict] = {}
    nodes = []
    for n in Node.objects.select_related("flavor", "cluster").order_by("cluster__name", "name"):
        portal_used = used_on.get(n.name, 0)
        free = max(0, n.gpus - n.used_by_others - portal_used) if n.schedulable else 0
        f = flavors.setdefault(n.flavor.name, {"flavor": n.flavor.name, "total": 0, "used_portal": 0,
                                               "used_others": 0, "free": 0, "free_whole_nodes": 0,
                                               "largest_free_block": 0})
        f["total"] += n.gpus
        f["used_portal"] += portal_used
        f["used_others"] += n.used_by_others
        f["free"] += free
        f["largest_free_block"] = max(f["largest_free_block"], free)
        if free == n.gpus:
            f["free_whole_nodes"] += 1
        nodes.append({"cluster": n.cluster.name, "name": n.name, "flavor": n.flavor.name, "gpus": n.gpus,
                      "used_portal": portal_used, "used_others": n.used_by_others, "free": free,
                      "schedulable": n.schedulable, "labels": n.labels})
    for f in flavors.values():
        whole = sum(x["gpus"] for x in nodes if x["flavor"] == f["flavor"] and x["free"] == x["gpus"])
        f["fragmentation"] = round(1 - whole / f["free"], 3) if f["free"] else 0.0
    return {"flavors": sorted(flavors.values(), key=lambda x: x["flavor"]), "nodes": nodes}


class ClusterView(APIView):
    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request):
        m = membership_of(request.user)
        if m is None:
            raise Forbidden()
        data = cluster_summary()
        if not m.is_platform_admin:
            data.pop("nodes")  # node-level detail is for platform admins
        return Response(data)
