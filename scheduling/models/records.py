"""What happened to jobs, kept: each attempt's log, the charts' samples, the policy's versions and the preemption audit trail."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone

from portal.models import Department
from portal.tenancy import (
    ADMIN,
    APPROVE,
    CHANGE,
    DEPARTMENT_ADMIN,
    OWNER_OR_ADMIN,
    PLATFORM,
    VIEW,
    TenantQuerySet,
)
from scheduling.models.jobs import Job, JobRelatedQuerySet


class AttemptLogQuerySet(TenantQuerySet):
    """A kept log is read like the job's live log: its owner and its department's admins (``change``)."""

    department_path = "job__department"
    owner_path = "job__owner"
    rules = {VIEW: OWNER_OR_ADMIN, CHANGE: OWNER_OR_ADMIN, APPROVE: DEPARTMENT_ADMIN, ADMIN: PLATFORM}


class AttemptLog(models.Model):
    """The tail of one pod's log of one attempt, kept when the attempt ends (its pods, and the cluster's copy of the
    log, go soon after). At most LOG_KEEP_KB of the end of the log; deleted LOG_RETENTION_DAYS after."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="logs")
    attempt = models.PositiveIntegerField()
    pod = models.PositiveIntegerField(default=0)  # the pod's index in its gang
    text = models.TextField(blank=True)
    truncated = models.BooleanField(default=False)  # the log was longer than what was kept
    stamped = models.BooleanField(default=False)  # each line starts with its time stamp (logs kept before: not)
    kept_at = models.DateTimeField(default=timezone.now, db_index=True)

    objects = AttemptLogQuerySet.as_manager()

    class Meta:
        ordering = ["job", "attempt", "pod"]
        constraints = [models.UniqueConstraint(fields=["job", "attempt", "pod"],
                                               name="attemptlog_unique_job_attempt_pod")]

    def __str__(self) -> str:
        return f"log of job {self.job_id} attempt {self.attempt} pod {self.pod}"


# Upper bounds (seconds) of the wait-time histogram's bins; the last bin has no upper bound.
WAIT_BINS_S = (60, 300, 900, 3600, 4 * 3600)
WAIT_BIN_LABELS = ("< 1 min", "1-5 min", "5-15 min", "15-60 min", "1-4 h", "> 4 h")


class ClusterSample(models.Model):
    """One flavor at one instant of the stored time series (written every STATS_INTERVAL_S by a periodic
    task): charts read these rows instead of recomputing history from every job. Whole-cluster figures,
    no department's data."""

    at = models.DateTimeField(db_index=True)
    flavor = models.ForeignKey("quotas.Flavor", on_delete=models.CASCADE, related_name="+")
    total_gpus = models.PositiveIntegerField(default=0)
    busy_gpus = models.PositiveIntegerField(default=0)  # held by admitted and running portal jobs
    free_gpus = models.PositiveIntegerField(default=0)  # on schedulable nodes, used by nobody
    queued = models.JSONField(default=dict)  # tier -> queued jobs
    # tier -> jobs started since the previous sample, counted per bin of WAIT_BINS_S (queued -> started)
    waits = models.JSONField(default=dict)
    preemptions = models.PositiveIntegerField(default=0)  # victims decided since the previous sample

    class Meta:
        ordering = ["at", "flavor"]
        constraints = [models.UniqueConstraint(fields=["at", "flavor"], name="clustersample_unique_at_flavor")]

    def __str__(self) -> str:
        return f"{self.flavor_id} at {self.at:%Y-%m-%d %H:%M}"


class DepartmentSampleQuerySet(TenantQuerySet):
    """A department's samples are read by its members (and platform admins)."""

    department_path = "department"


class DepartmentSample(models.Model):
    """One department's use of one flavor at one instant of the stored time series."""

    at = models.DateTimeField(db_index=True)
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="+")
    flavor = models.ForeignKey("quotas.Flavor", on_delete=models.CASCADE, related_name="+")
    nominal = models.PositiveIntegerField(default=0)
    busy_gpus = models.PositiveIntegerField(default=0)
    borrowed_gpus = models.PositiveIntegerField(default=0)  # beyond its nominal quota
    lent_gpus = models.PositiveIntegerField(default=0)  # of its idle nominal, in use by other departments
    queued_jobs = models.PositiveIntegerField(default=0)

    objects = DepartmentSampleQuerySet.as_manager()

    class Meta:
        ordering = ["at", "department", "flavor"]
        constraints = [models.UniqueConstraint(fields=["at", "department", "flavor"],
                                               name="departmentsample_unique_at_department_flavor")]

    def __str__(self) -> str:
        return f"{self.department_id}/{self.flavor_id} at {self.at:%Y-%m-%d %H:%M}"


class PolicyVersion(models.Model):
    """Every version of the scheduling policy is kept; the highest version is in force."""

    version = models.PositiveIntegerField(unique=True)
    data = models.JSONField()
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    comment = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-version"]

    def __str__(self) -> str:
        return f"policy v{self.version}"


class Preemption(models.Model):
    """The durable audit record of one preemption decision and what became of it."""

    preemptor = models.ForeignKey(Job, null=True, on_delete=models.SET_NULL, related_name="preemptions_caused")
    reason = models.CharField(max_length=20)  # priority | reclaim
    message = models.CharField(max_length=500, blank=True)
    policy_version = models.PositiveIntegerField(default=0)
    decided_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-decided_at", "-id"]

    def __str__(self) -> str:
        return f"preemption {self.pk} ({self.reason}) for job {self.preemptor_id}"


class PreemptionVictim(models.Model):
    class Status(models.TextChoices):
        DECIDED = "decided"
        REQUESTED = "requested"
        BLOCKED = "blocked"  # 429: a PodDisruptionBudget forbade the eviction
        EVICTED = "evicted"
        REQUEUED = "requeued"
        RESTARTED = "restarted"

    preemption = models.ForeignKey(Preemption, on_delete=models.CASCADE, related_name="victims")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="preempted_by")
    attempt = models.PositiveIntegerField()
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.DECIDED)
    gpu_seconds_lost = models.PositiveIntegerField(default=0)
    eviction_requested_at = models.DateTimeField(null=True, blank=True)
    evicted_at = models.DateTimeField(null=True, blank=True)
    requeued_at = models.DateTimeField(null=True, blank=True)
    restarted_at = models.DateTimeField(null=True, blank=True)
    # Notice before preemption: the attempt's notice when it was decided (0: none), when its pods were told and
    # until when the eviction waits, and when the job answered "checkpoint written" (its lost work counts from
    # there). The eviction is requested at the answer, else at ``notice_ends_at``.
    notice_s = models.PositiveIntegerField(default=0)
    notice_sent_at = models.DateTimeField(null=True, blank=True)
    notice_ends_at = models.DateTimeField(null=True, blank=True, db_index=True)
    checkpoint_at = models.DateTimeField(null=True, blank=True)

    objects = JobRelatedQuerySet.as_manager()

    class Meta:
        ordering = ["preemption_id", "job_id"]
        constraints = [
            models.UniqueConstraint(fields=["preemption", "job"], name="victim_unique_preemption_job"),
        ]

    def __str__(self) -> str:
        return f"victim job {self.job_id} a{self.attempt}: {self.status}"


# A victim whose eviction is decided, requested or accepted and whose pods may still hold their GPUs.
IN_FLIGHT = (PreemptionVictim.Status.DECIDED, PreemptionVictim.Status.REQUESTED, PreemptionVictim.Status.EVICTED)
