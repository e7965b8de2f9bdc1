"""Sweeps and pipelines: job arrays (one submission, N tasks, each a Job with its index) and the dependencies
between jobs (a job waits for other jobs, or for every task of an array, of its own department)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from engine.sweeps import CONDITIONS
from portal.models import Department
from portal.tenancy import ADMIN, CHANGE, DEPARTMENT, OWNER_OR_ADMIN, PLATFORM, VIEW, TenantQuerySet
from scheduling.models.jobs import Job


class JobArrayQuerySet(TenantQuerySet):
    """Read like jobs: its department's members see it; its owner and the department's admins cancel it."""

    owner_path = "owner"
    rules = {VIEW: DEPARTMENT, CHANGE: OWNER_OR_ADMIN, ADMIN: PLATFORM}


class JobArray(models.Model):
    """One submission of N tasks (``Job.array``): the indices as written (``0-63``) and the throttle, the most
    tasks admitted or running at once (null: no limit)."""

    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="job_arrays")
    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="job_arrays")
    name = models.CharField(max_length=63)
    indices = models.CharField(max_length=500)
    size = models.PositiveIntegerField()
    throttle = models.PositiveIntegerField(null=True, blank=True)
    submitted_at = models.DateTimeField(default=timezone.now)
    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001 - NULL = no key
    request_hash = models.CharField(max_length=64, blank=True)

    objects = JobArrayQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["owner", "idempotency_key"], condition=Q(idempotency_key__isnull=False),
                                    name="jobarray_unique_owner_idempotency_key"),
            models.CheckConstraint(condition=Q(size__gte=1), name="jobarray_size_positive"),
            models.CheckConstraint(condition=Q(throttle__isnull=True) | Q(throttle__gte=1),
                                   name="jobarray_throttle_positive"),
        ]

    def __str__(self) -> str:
        return f"array {self.pk} ({self.name})"


class JobDependencyQuerySet(TenantQuerySet):
    """A job's dependencies are read like the job."""

    department_path = "job__department"


class JobDependency(models.Model):
    """``job`` waits until ``on_job`` (or every task of ``on_array``) ended as ``condition`` asks
    (``engine.sweeps``). Both ends are of one department (submission checks it)."""

    CONDITION_CHOICES = [(c, c) for c in CONDITIONS]

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="dependencies")
    condition = models.CharField(max_length=12, choices=CONDITION_CHOICES)
    on_job = models.ForeignKey(Job, null=True, blank=True, on_delete=models.PROTECT, related_name="dependents")
    on_array = models.ForeignKey(JobArray, null=True, blank=True, on_delete=models.PROTECT, related_name="dependents")

    objects = JobDependencyQuerySet.as_manager()

    class Meta:
        ordering = ["job_id", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(on_job__isnull=False, on_array__isnull=True)
                                   | Q(on_job__isnull=True, on_array__isnull=False), name="jobdependency_one_target"),
            models.CheckConstraint(condition=Q(condition__in=list(CONDITIONS)), name="jobdependency_condition_valid"),
        ]

    def __str__(self) -> str:
        target = f"job {self.on_job_id}" if self.on_job_id else f"array {self.on_array_id}"
        return f"job {self.job_id} {self.condition} {target}"

    @property
    def label(self) -> str:
        return f"job {self.on_job_id}" if self.on_job_id else f"array {self.on_array_id}"
