"""GPU flavors and department quotas (Kueue's vocabulary: nominal quota, borrowing and lending limits)."""

from __future__ import annotations

from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import F, Q

from portal.models import Department

RESOURCE_NAME = RegexValidator(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?$",
    "A Kubernetes extended resource name, e.g. nvidia.com/gpu or nvidia.com/mig-3g.40gb.",
)
FLAVOR_NAME = RegexValidator(r"^[a-z0-9]([a-z0-9.-]{0,38}[a-z0-9])?$", "Lower-case letters, digits, . and -.")


class Flavor(models.Model):
    """A schedulable GPU kind: the Kubernetes resource it is requested as plus the node labels it runs on.

    MIG profiles are flavors of their own (resource ``nvidia.com/mig-3g.40gb``)."""

    name = models.CharField(max_length=40, unique=True, validators=[FLAVOR_NAME])
    resource_name = models.CharField(max_length=120, validators=[RESOURCE_NAME], default="nvidia.com/gpu")
    node_labels = models.JSONField(default=dict, blank=True, help_text='e.g. {"gpu-type": "a100"}')
    gpu_memory_gib = models.PositiveIntegerField(default=0)
    description = models.CharField(max_length=200, blank=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_mig(self) -> bool:
        return "/mig-" in self.resource_name


class Quota(models.Model):
    """One department's share of one flavor inside the cohort.

    nominal: guaranteed GPUs. borrowing_limit: GPUs above nominal it may borrow from idle capacity (null =
    unlimited). lending_limit: GPUs of its unused nominal it lends to others (null = all of it).
    """

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="quotas")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="quotas")
    nominal = models.PositiveIntegerField(default=0)
    borrowing_limit = models.PositiveIntegerField(null=True, blank=True)
    lending_limit = models.PositiveIntegerField(null=True, blank=True)

    class Meta:
        ordering = ["department__slug", "flavor__name"]
        constraints = [
            models.UniqueConstraint(fields=["department", "flavor"], name="quota_unique_department_flavor"),
            models.CheckConstraint(
                condition=Q(lending_limit__isnull=True) | Q(lending_limit__lte=F("nominal")),
                name="quota_lending_within_nominal",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.department}/{self.flavor}: {self.nominal}"


__all__ = ["Flavor", "Quota", "MinValueValidator"]
