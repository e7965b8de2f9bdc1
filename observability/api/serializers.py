"""Shapes of the observability endpoints: a job's GPU use and hints, a right-sizing recommendation."""

from __future__ import annotations

from rest_framework import serializers

from engine.types import TIERS
from portal.api.serializers import StrictSerializer
from quotas.models import Flavor


class AttemptUsageSerializer(serializers.Serializer):
    attempt = serializers.IntegerField()
    source = serializers.CharField()
    profile = serializers.CharField()
    gpus = serializers.IntegerField()
    gpus_seen = serializers.IntegerField()
    started_at = serializers.DateTimeField()
    ended_at = serializers.DateTimeField(allow_null=True)
    final = serializers.BooleanField()
    step_s = serializers.IntegerField()
    samples = serializers.IntegerField()
    mean_util = serializers.FloatField(allow_null=True, help_text="percent")
    p95_util = serializers.FloatField(allow_null=True, help_text="percent")
    busy_gpus = serializers.FloatField(allow_null=True)
    engine_active = serializers.FloatField(allow_null=True)
    peak_memory_mib = serializers.FloatField(allow_null=True)
    memory_total_mib = serializers.FloatField(allow_null=True)
    host_memory_peak_mib = serializers.FloatField(allow_null=True)
    idle_minutes = serializers.FloatField()
    idle_streak_minutes = serializers.FloatField()
    idle = serializers.BooleanField()
    idle_flagged_at = serializers.DateTimeField(allow_null=True)
    idle_stopped_at = serializers.DateTimeField(allow_null=True)
    series = serializers.ListField(child=serializers.ListField(child=serializers.FloatField(allow_null=True)),
                                   help_text="[seconds since the attempt started, mean utilisation %, peak GPU "
                                             "memory MiB], at most 120 points")
    tensorboard_peak_mib = serializers.FloatField(
        allow_null=True, help_text="peak GPU memory the job logged as a TensorBoard scalar in its checkpoint "
                                   "directory, read when the attempt ended")
    tensorboard_note = serializers.CharField(help_text="what was read from TensorBoard, or why it could not be "
                                                       "(empty: the job has no checkpoint directory)")
    collected_at = serializers.DateTimeField()


class HintSerializer(serializers.Serializer):
    code = serializers.CharField()
    title = serializers.CharField()
    advice = serializers.CharField()
    data = serializers.DictField()


class GpuUsageSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    attempt = serializers.IntegerField(help_text="the job's current attempt")
    has_data = serializers.BooleanField(help_text="false: no measurement yet, or Prometheus unreachable")
    idle = serializers.BooleanField(help_text="the current attempt is flagged idle")
    idle_threshold_pct = serializers.FloatField()
    idle_minutes = serializers.FloatField()
    attempts = AttemptUsageSerializer(many=True)
    hints = HintSerializer(many=True)


class RecommendationQuerySerializer(StrictSerializer):
    name = serializers.CharField(required=False, allow_blank=True, max_length=63, default="")
    image = serializers.CharField(required=False, allow_blank=True, max_length=512, default="")
    flavor = serializers.SlugRelatedField(
        slug_field="name", queryset=Flavor.objects.all(), required=False, allow_null=True, default=None,
        help_text="a flavor that shares its GPUs: the recommendation then says which fraction of one fits")
    tier = serializers.ChoiceField(choices=TIERS, required=False, default="",
                                   help_text="the tier the fraction is priced at (default: a job's default)")

    def validate(self, attrs):
        if not attrs.get("name", "").strip() and not attrs.get("image", "").strip():
            raise serializers.ValidationError({"name": ["Give a job name or an image (or both)."]})
        return attrs


class FractionAdviceSerializer(serializers.Serializer):
    source = serializers.CharField(help_text="where the measured use came from: dcgm, sharing or tensorboard")
    mechanism = serializers.CharField(help_text="hami or replicas")
    share = serializers.FloatField(help_text="the part of one GPU, as quotas and prices count it")
    gpu_memory_gib = serializers.IntegerField(allow_null=True, help_text="HAMi: peak x 1.2, rounded up")
    gpu_cores = serializers.IntegerField(allow_null=True)
    gpu_replicas = serializers.IntegerField(allow_null=True)
    flavor = serializers.CharField()
    tier = serializers.CharField()
    credits_per_hour = serializers.FloatField()
    whole_credits_per_hour = serializers.FloatField()
    text = serializers.CharField()


class RecommendationSerializer(serializers.Serializer):
    found = serializers.BooleanField()
    key = serializers.CharField(allow_null=True)
    runs = serializers.IntegerField()
    gpus_requested = serializers.FloatField(allow_null=True, help_text="EWMA of GPUs asked for")
    busy_gpus = serializers.FloatField(allow_null=True, help_text="EWMA of GPUs actually busy")
    peak_memory_mib = serializers.FloatField(allow_null=True, help_text="EWMA of peak GPU memory of one GPU")
    runtime_s = serializers.FloatField(allow_null=True, help_text="EWMA of succeeded attempts' run time")
    gpus = serializers.IntegerField(allow_null=True, help_text="recommended GPUs: the fewest whole GPUs that hold the busy ones (ceil(busy - 0.05)), at most those held")
    memory_gib = serializers.FloatField(allow_null=True, help_text="recommended GPU memory (peak x 1.2)")
    max_runtime_s = serializers.IntegerField(allow_null=True, help_text="recommended max_runtime_s (x 1.2)")
    text = serializers.CharField()
    fraction = FractionAdviceSerializer(allow_null=True, required=False,
                                        help_text="the fraction of a GPU of ``flavor`` the job fits in, priced")


class EfficiencyQuerySerializer(StrictSerializer):
    group_by = serializers.ChoiceField(choices=("user", "department"), default="user")
    weeks = serializers.IntegerField(min_value=1, max_value=104, default=8)
    department = serializers.SlugField(required=False)
    format = serializers.ChoiceField(choices=("json", "csv"), required=False)


class EfficiencyRowSerializer(serializers.Serializer):
    week = serializers.CharField(help_text="the ISO week's Monday (UTC)")
    department = serializers.CharField()
    user = serializers.CharField(allow_null=True, help_text="null when grouped by department")
    attempts = serializers.IntegerField()
    held_gpu_hours = serializers.FloatField()
    used_gpu_hours = serializers.FloatField(help_text="mean busy GPUs x the time held (DCGM utilisation)")
    efficiency = serializers.FloatField(allow_null=True, help_text="used / held")
    idle_gpu_hours = serializers.FloatField(help_text="GPU-hours while every GPU of the attempt was idle")
    savings_gpu_hours = serializers.FloatField(help_text="GPU-hours right-sizing's GPU count would have freed")


class EfficiencyReportSerializer(serializers.Serializer):
    group_by = serializers.CharField()
    weeks = serializers.IntegerField()
    rows = EfficiencyRowSerializer(many=True)
