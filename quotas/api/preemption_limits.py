"""Preemption limits (mounted under /api/v1/): what each tier's jobs may ask of preemptibility apart from their
tier, per department or lab-wide (docs/scheduling.md, "Preemptibility apart from the tier"). Read-only here:
the lab file (``preemption_limits:``, docs/lab-as-code.md) is where they are set, so the file stays the one
declaration of the lab and an export never loses an edit made elsewhere. Platform admins only: a limit names
other departments' terms. The input serializer is the lab file's reader of a row."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from engine import tiers
from engine.types import TIERS
from portal.api.serializers import StrictSerializer
from portal.models import UserTier
from portal.tenancy import ADMIN, require_role
from quotas import selectors
from quotas.models import DEFAULT_MAX_NOTICE_S, PreemptionLimit

ADMINS_ONLY = "Only platform admins read the preemption limits."


class PreemptionLimitSerializer(StrictSerializer):
    tier = serializers.ChoiceField(choices=list(TIERS))
    non_preemptible = serializers.BooleanField(required=False, default=False,
                                               help_text="elastic, backfill: its jobs may ask not to be preemptible")
    user_tiers = serializers.ListField(child=serializers.ChoiceField(choices=UserTier.values), required=False,
                                       default=list, max_length=len(UserTier.values),
                                       help_text="who may ask (empty: every member)")
    max_runtime_s = serializers.IntegerField(min_value=60, max_value=10**8, required=False, allow_null=True,
                                             default=None, help_text="the longest non-preemptible job (null: no limit)")
    surcharge_pct = serializers.IntegerField(min_value=0, max_value=1000, required=False, default=0,
                                             help_text="added to the base price of a non-preemptible job")
    sessions_preemptible = serializers.BooleanField(required=False, default=False,
                                                    help_text="realtime: the department's sessions run preemptible")
    max_notice_s = serializers.IntegerField(min_value=0, max_value=3600, required=False,
                                            default=DEFAULT_MAX_NOTICE_S,
                                            help_text="the longest notice before preemption a job may ask for (a "
                                            "preemptible session's notice)")

    def validate_user_tiers(self, value):
        if len(set(value)) != len(value):
            raise serializers.ValidationError("a user tier is listed twice")
        return value

    def validate(self, attrs):
        preemptible_tier = tiers.preemptible(attrs["tier"])
        if preemptible_tier and attrs.get("sessions_preemptible"):
            raise serializers.ValidationError({"sessions_preemptible": "only a realtime limit says whether "
                                               "sessions run preemptible (the other tiers' jobs are)"})
        if not preemptible_tier and attrs.get("non_preemptible"):
            raise serializers.ValidationError({"non_preemptible": f"{attrs['tier']} jobs are not preemptible anyway"})
        return attrs


class PreemptionLimitOutSerializer(serializers.Serializer):
    department = serializers.CharField(allow_null=True, help_text="null: every department without its own")
    tier = serializers.CharField()
    non_preemptible = serializers.BooleanField()
    user_tiers = serializers.ListField(child=serializers.CharField())
    max_runtime_s = serializers.IntegerField(allow_null=True)
    surcharge_pct = serializers.IntegerField()
    sessions_preemptible = serializers.BooleanField()
    max_notice_s = serializers.IntegerField()
    updated_at = serializers.DateTimeField()


def limit_dict(limit: PreemptionLimit) -> dict:
    return {"department": limit.department.slug if limit.department_id else None, "tier": limit.tier,
            "non_preemptible": limit.non_preemptible, "user_tiers": list(limit.user_tiers),
            "max_runtime_s": limit.max_runtime_s, "surcharge_pct": limit.surcharge_pct,
            "sessions_preemptible": limit.sessions_preemptible, "max_notice_s": limit.max_notice_s,
            "updated_at": limit.updated_at}


class PreemptionLimitListView(APIView):
    """GET (platform admins): every preemption limit. Set them in the lab file (``preemption_limits:``)."""

    @extend_schema(responses=PreemptionLimitOutSerializer(many=True))
    def get(self, request):
        require_role(request.user, ADMIN, ADMINS_ONLY)
        return Response([limit_dict(x) for x in selectors.preemption_limits()])
