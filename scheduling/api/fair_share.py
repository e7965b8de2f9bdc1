"""``GET /api/v1/fair-share``: each department's fair-share statement (``scheduling.services.fair_share``): your
own department's, every department's for platform admins."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.serializers import StrictSerializer, validated
from portal.tenancy import member
from scheduling.services.fair_share import statements_for


class FairShareQuerySerializer(StrictSerializer):
    department = serializers.SlugField(required=False, help_text="one department (of those you may see)")


class ScopeSerializer(serializers.Serializer):
    scope = serializers.CharField(help_text="the flavor, or flavor@cluster for a per-cluster quota")
    guaranteed = serializers.IntegerField(help_text="the nominal quota")
    borrowing_limit = serializers.IntegerField(allow_null=True, help_text="null: no limit")
    lending_limit = serializers.IntegerField(allow_null=True, help_text="null: lends all of its idle nominal")
    used = serializers.IntegerField(help_text="GPUs its admitted and running jobs hold")
    borrowed = serializers.IntegerField(help_text="used above the nominal quota")
    lent = serializers.FloatField(help_text="its share of what the others borrow, by its idle lendable GPUs")


class TotalsSerializer(ScopeSerializer):
    """A department's scopes summed: a scope's figures, without what only one scope has."""

    scope = borrowing_limit = lending_limit = None


class HistorySerializer(serializers.Serializer):
    decayed_gpu_hours = serializers.FloatField(help_text="each GPU-hour weighted 2^(-age / half-life)")
    half_life_hours = serializers.FloatField()
    history_share = serializers.FloatField(help_text="of the cohort's decayed GPU-hours (0..1)")
    running_gpus = serializers.IntegerField()
    running_share = serializers.FloatField(help_text="of the GPUs running now (0..1)")
    entitled_share = serializers.FloatField(help_text="of the nominal quotas (0..1)")


class PlaceSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    name = serializers.CharField()
    flavor = serializers.CharField()
    tier = serializers.CharField()
    place = serializers.IntegerField(help_text="1 = next in its flavor's queue")
    place_at_par = serializers.IntegerField(help_text="its place with its department's factor at 1")
    of = serializers.IntegerField(help_text="queued jobs of the flavor")


class TeamLineSerializer(serializers.Serializer):
    team = serializers.CharField()
    nominal = serializers.IntegerField(help_text="its nominal quotas, every flavor together")
    running_gpus = serializers.IntegerField()
    decayed_gpu_hours = serializers.FloatField()
    use_ratio = serializers.FloatField(help_text="inside its department: 1 = exactly its share of the teams' quotas")
    factor = serializers.FloatField(help_text="its own factor; its jobs' is the department's times this")


class StatementSerializer(serializers.Serializer):
    department = serializers.CharField()
    name = serializers.CharField()
    scopes = ScopeSerializer(many=True)
    totals = TotalsSerializer()
    history = HistorySerializer()
    use_ratio = serializers.FloatField(help_text="mean(history share, running share) / entitled share, at most 4")
    factor = serializers.FloatField(help_text="2^(-(fair_share_weight / 100) x (use ratio - 1))")
    fair_share_weight = serializers.FloatField()
    queue = PlaceSerializer(many=True)
    teams = TeamLineSerializer(many=True, help_text="the fair-share tree: its teams (empty without teams)")


class FairShareView(APIView):
    @extend_schema(parameters=[FairShareQuerySerializer], responses=StatementSerializer(many=True),
                   summary="Each department's fair-share statement")
    def get(self, request):
        member(request.user)
        f = validated(FairShareQuerySerializer, request.query_params.dict())
        return Response(StatementSerializer(statements_for(user=request.user, department=f.get("department")),
                                            many=True).data)
