"""The policy tuner (platform admins only): its proposals (run on demand, apply, dismiss) and the lab's tuner
configuration (targets, search bounds, automatic application)."""

from __future__ import annotations

from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from portal import dispatch
from portal.api.serializers import StrictSerializer, validated
from portal.errors import NotFound
from portal.tenancy import ADMIN, require_role
from scheduling.models import PolicyProposal
from scheduling.services import tuning
from simulator.tuner import config_to_dict

ONLY_ADMINS = "Only platform admins see and decide the policy tuner's proposals."


class PolicyProposalSerializer(serializers.ModelSerializer):
    requested_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    decided_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)

    class Meta:
        model = PolicyProposal
        fields = ["id", "created_at", "trigger", "requested_by", "status", "base_version", "days", "jobs",
                  "measured", "current", "limits", "diff", "predicted", "improves", "costs", "proposal", "reason",
                  "replays", "cpu_s", "auto_applied", "applied_version", "decided_by", "decided_at", "config"]


class ProposalDecisionSerializer(StrictSerializer):
    comment = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class TunerConfigSerializer(StrictSerializer):
    config = serializers.DictField()


class ProposalListView(APIView):
    @extend_schema(responses=PolicyProposalSerializer(many=True))
    def get(self, request):
        require_role(request.user, ADMIN, ONLY_ADMINS)
        rows = PolicyProposal.objects.select_related("requested_by", "decided_by")[:50]
        return Response(PolicyProposalSerializer(rows, many=True).data)

    @extend_schema(request=None, responses={202: OpenApiTypes.OBJECT})
    def post(self, request):
        """Run the tuner now (in the background: a week's replays take minutes); its proposal then heads the
        list."""
        require_role(request.user, ADMIN, ONLY_ADMINS)
        dispatch.send_now("scheduling.tuning.run", PolicyProposal.Trigger.DEMAND, request.user.pk)
        return Response({"status": "queued"}, status=status.HTTP_202_ACCEPTED)


class ProposalDetailView(APIView):
    @extend_schema(responses=PolicyProposalSerializer)
    def get(self, request, pk: int):
        require_role(request.user, ADMIN, ONLY_ADMINS)
        p = PolicyProposal.objects.select_related("requested_by", "decided_by").filter(pk=pk).first()
        if p is None:
            raise NotFound("No such policy proposal.")
        return Response(PolicyProposalSerializer(p).data)


class ProposalDecisionView(APIView):
    decision = "apply"

    @extend_schema(request=ProposalDecisionSerializer, responses=PolicyProposalSerializer)
    def post(self, request, pk: int):
        require_role(request.user, ADMIN, ONLY_ADMINS)
        body = validated(ProposalDecisionSerializer, request.data or {})
        if self.decision == "apply":
            p = tuning.apply_proposal(int(pk), user=request.user)
        else:
            p = tuning.dismiss_proposal(int(pk), user=request.user, comment=body["comment"])
        return Response(PolicyProposalSerializer(p).data)


class TunerConfigView(APIView):
    @extend_schema(responses=OpenApiTypes.OBJECT)
    def get(self, request):
        require_role(request.user, ADMIN, ONLY_ADMINS)
        return Response({"config": config_to_dict(tuning.tuner_config())})

    @extend_schema(request=TunerConfigSerializer, responses=OpenApiTypes.OBJECT)
    def put(self, request):
        require_role(request.user, ADMIN, "Only platform admins change the policy tuner's configuration.")
        body = validated(TunerConfigSerializer, request.data)
        return Response({"config": config_to_dict(tuning.tuner_config_update(user=request.user,
                                                                             data=body["config"]))})
