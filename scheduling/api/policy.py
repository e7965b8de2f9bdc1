"""The scheduling policy (read by members, edited by platform admins) and the cluster view."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.serializers import StrictSerializer, validated
from portal.tenancy import ADMIN, member, require_role
from scheduling.models import PolicyVersion
from scheduling.selectors import cluster_summary
from scheduling.services.policy import current_policy, policy_as_dict, policy_update


class PolicyVersionSerializer(serializers.ModelSerializer):
    author = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = PolicyVersion
        fields = ["version", "data", "author", "created_at", "comment"]


class PolicyUpdateSerializer(StrictSerializer):
    policy = serializers.DictField()
    comment = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class PolicyView(APIView):
    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request):
        member(request.user)
        policy, version = current_policy()
        return Response({"version": version, "policy": policy_as_dict(policy)})

    @extend_schema(request=PolicyUpdateSerializer, responses={201: PolicyVersionSerializer})
    def put(self, request):
        require_role(request.user, ADMIN, "Only platform admins change the scheduling policy.")
        body = validated(PolicyUpdateSerializer, request.data)
        row = policy_update(user=request.user, data=body["policy"], comment=body["comment"])
        return Response(PolicyVersionSerializer(row).data, status=status.HTTP_201_CREATED)


class PolicyVersionsView(APIView):
    @extend_schema(responses=PolicyVersionSerializer(many=True))
    def get(self, request):
        require_role(request.user, ADMIN, "Only platform admins see the policy history.")
        rows = PolicyVersion.objects.select_related("author").order_by("-version")[:200]
        return Response(PolicyVersionSerializer(rows, many=True).data)


class ClusterView(APIView):
    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request):
        m = member(request.user)
        data = cluster_summary()
        if not m.is_platform_admin:
            data.pop("nodes")  # node-level detail is for platform admins
        return Response(data)
