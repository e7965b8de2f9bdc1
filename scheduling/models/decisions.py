"""Decisions about a job that are not its state: an admin's approval, and a namespace quota's refusal of an attempt."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from portal.tenancy import (
    TenantQuerySet,
)
from scheduling.models.clusters import Cluster
from scheduling.models.jobs import Job


class ApprovalQuerySet(TenantQuerySet):
    """Decisions on jobs are read like the jobs: by their department's members."""

    department_path = "job__department"


class Approval(models.Model):
    """A department admin's decision on a job that waited in pending_approval.

    Its table keeps the name it had when it lived in quotas (``quotas_approval``): the model moved with its
    use case (``scheduling.services.job_approvals``), the rows did not."""

    DECISIONS = (("approved", "Approved"), ("rejected", "Rejected"))

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="approval")
    decision = models.CharField(max_length=10, choices=DECISIONS)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    comment = models.TextField(blank=True)
    reason = models.CharField(max_length=300, blank=True, help_text="why approval was required")
    decided_at = models.DateTimeField(default=timezone.now)

    objects = ApprovalQuerySet.as_manager()

    class Meta:
        db_table = "quotas_approval"
        ordering = ["-decided_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(decision__in=["approved", "rejected"]), name="approval_valid"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} {self.decision}"



class NamespaceQuotaRefusal(models.Model):
    """A namespace ResourceQuota refused the pods of an admitted attempt (403 "exceeded quota").

    One row per refused attempt. It carries that start's one retry chain (``step`` of the back-off and when the
    next try is due, so a reconciler run or a duplicate task never starts a second chain), and it tells the
    engine that the department's namespace on that cluster does not take a request of this size: such jobs are
    kept off that cluster (reason ``namespace_quota``) until the namespace's quotas change (``quota_version``,
    their ``name@resourceVersion`` as read after the refusal, compared by the sync) or ``expires_at`` passes.
    ``cleared_at`` is set when either happened (or the quota let the attempt's pods in after all)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="quota_refusals")
    attempt = models.PositiveIntegerField()
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=253)
    total_gpus = models.PositiveIntegerField(db_column="gpus", help_text="the GPUs of the refused request (all its pods)")
    request = models.JSONField(default=dict, blank=True, help_text="the refused pods' requests")
    quota_version = models.CharField(max_length=500, blank=True)
    quotas = models.JSONField(default=dict, blank=True, help_text="the namespace's quotas (hard, used) as read")
    message = models.TextField(blank=True)
    refused_at = models.DateTimeField()
    step = models.PositiveIntegerField(default=1)
    next_retry_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    cleared_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "attempt"], name="one_quota_refusal_per_attempt")]
        indexes = [models.Index(fields=["cluster", "cleared_at"], name="quota_refusal_in_force")]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt}: {self.namespace} quota"
