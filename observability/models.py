"""GPU use measured per job attempt, and the right-sizing history built from finished attempts.

Rows about a job are read like the job (its department's members see them); right-sizing history is its owner's
alone, like API tokens.
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from portal.models import AppendOnlyModel, Department
from portal.tenancy import ADMIN, CHANGE, DEPARTMENT, OWNER, OWNER_OR_ADMIN, PLATFORM, VIEW, TenantQuerySet
from scheduling.models import Job


class AttemptUsageQuerySet(TenantQuerySet):
    department_path = "job__department"
    owner_path = "job__owner"
    rules = {VIEW: DEPARTMENT, CHANGE: OWNER_OR_ADMIN, ADMIN: PLATFORM}


class AttemptUsage(models.Model):
    """One attempt's GPU use, recomputed from its whole series at every collector run until the attempt ends
    (``final``). Compact aggregates plus at most ``SERIES_POINTS`` points for the job page's chart."""

    SERIES_POINTS = 120

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="gpu_usage")
    attempt = models.PositiveIntegerField()
    source = models.CharField(max_length=20)  # prometheus | simulated
    profile = models.CharField(max_length=20, blank=True)  # the simulated series' shape
    gpus = models.PositiveIntegerField(help_text="GPUs the attempt held")
    gpus_seen = models.PositiveIntegerField(default=0, help_text="GPUs that reported a series")
    started_at = models.DateTimeField()
    ended_at = models.DateTimeField(null=True, blank=True)
    step_s = models.PositiveIntegerField(default=60)
    samples = models.PositiveIntegerField(default=0)
    mean_util = models.FloatField(null=True, blank=True, help_text="percent, over every GPU and sample")
    p95_util = models.FloatField(null=True, blank=True, help_text="percent, of the per-sample mean over GPUs")
    busy_gpus = models.FloatField(null=True, blank=True, help_text="mean GPUs busy: sum of utilisation / 100")
    engine_active = models.FloatField(null=True, blank=True, help_text="mean graphics-engine activity, 0-1")
    peak_memory_mib = models.FloatField(null=True, blank=True, help_text="highest GPU memory of one GPU")
    memory_total_mib = models.FloatField(null=True, blank=True, help_text="one GPU's memory (used + free)")
    host_memory_peak_mib = models.FloatField(null=True, blank=True, help_text="container memory, when read")
    shape = models.JSONField(default=dict, blank=True, help_text="share of low and high samples, swings between")
    idle_minutes = models.FloatField(default=0, help_text="minutes every GPU of the attempt was idle")
    idle_streak_minutes = models.FloatField(default=0, help_text="idle minutes up to the last sample")
    idle_flagged_at = models.DateTimeField(null=True, blank=True)
    idle_stopped_at = models.DateTimeField(null=True, blank=True)
    series = models.JSONField(default=list, blank=True, help_text="[[unix s, mean util %, peak memory MiB]]")
    tensorboard_peak_mib = models.FloatField(null=True, blank=True,
                                             help_text="peak GPU memory the job logged as a TensorBoard scalar")
    tensorboard_note = models.CharField(max_length=300, blank=True,
                                        help_text="what was read from TensorBoard, or why it was not")
    final = models.BooleanField(default=False)
    collected_at = models.DateTimeField(default=timezone.now)

    objects = AttemptUsageQuerySet.as_manager()

    class Meta:
        ordering = ["job_id", "attempt"]
        constraints = [models.UniqueConstraint(fields=["job", "attempt"], name="usage_unique_job_attempt")]
        indexes = [models.Index(fields=["final", "job"])]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt}: {self.mean_util}%"

    @property
    def idle(self) -> bool:
        return self.idle_flagged_at is not None and not self.final


class HistoryQuerySet(TenantQuerySet):
    """Right-sizing history is its owner's alone (platform admins read all of it for the error page)."""

    owner_path = "owner"
    rules = {VIEW: OWNER, CHANGE: OWNER, ADMIN: PLATFORM}


class UsageHistory(models.Model):
    """EWMA (alpha 0.3) of finished attempts of one owner's jobs of one family (``name:resnet-*``) or image
    (``image:nvcr.io/...``): GPUs actually busy, peak GPU memory, run time."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="usage_history")
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="usage_history")
    key = models.CharField(max_length=560)
    runs = models.PositiveIntegerField(default=0)
    gpus_requested = models.FloatField(default=0, help_text="EWMA of GPUs asked for")
    busy_gpus = models.FloatField(null=True, blank=True)
    peak_memory_mib = models.FloatField(null=True, blank=True)
    # what measured the last peak folded in: dcgm, hami, tensorboard or simulated (rightsizing.peak_of)
    peak_memory_source = models.CharField(max_length=20, blank=True)
    runtime_s = models.FloatField(null=True, blank=True, help_text="EWMA of succeeded attempts' run time")
    runtime_runs = models.PositiveIntegerField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    objects = HistoryQuerySet.as_manager()

    class Meta:
        ordering = ["owner_id", "key"]
        constraints = [models.UniqueConstraint(fields=["owner", "department", "key"], name="history_unique_key")]

    def __str__(self) -> str:
        return f"{self.owner_id} {self.key}: {self.runs} runs"


class PredictionOutcome(AppendOnlyModel):
    """What the history predicted for an attempt before it ran, and what the attempt then used: the error of
    the recommendations, kept for the admin page and the docs."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="predictions")
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="predictions")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="predictions")
    attempt = models.PositiveIntegerField()
    key = models.CharField(max_length=560)
    runs_before = models.PositiveIntegerField()
    predicted_busy_gpus = models.FloatField(null=True, blank=True)
    actual_busy_gpus = models.FloatField(null=True, blank=True)
    predicted_peak_memory_mib = models.FloatField(null=True, blank=True)
    actual_peak_memory_mib = models.FloatField(null=True, blank=True)
    predicted_runtime_s = models.FloatField(null=True, blank=True)
    actual_runtime_s = models.FloatField(null=True, blank=True)
    recorded_at = models.DateTimeField(default=timezone.now)

    objects = HistoryQuerySet.as_manager()

    class Meta:
        ordering = ["-recorded_at", "-id"]
        constraints = [models.UniqueConstraint(fields=["job", "attempt", "key"], name="prediction_unique")]

    def __str__(self) -> str:
        return f"{self.key} job {self.job_id}/{self.attempt}"
