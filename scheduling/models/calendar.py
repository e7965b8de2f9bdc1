"""The calendar: GPUs booked ahead for a department or some of its members, and maintenance windows of nodes
(``scheduling.services.calendar`` validates and audits them; the engine's ``bookings`` applies them)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from portal.models import Department, Team
from portal.tenancy import DEPARTMENT, DEPARTMENT_ADMIN, PLATFORM, TenantQuerySet
from quotas.models import Flavor
from scheduling.models.clusters import Cluster


class BookingQuerySet(TenantQuerySet):
    """A department's members read its bookings in full (owners, purpose); its admins change them (within
    its quota). The calendar shows everyone else's as capacity booked by another department
    (``scheduling.selectors``, read without the restriction and without their owners)."""

    rules = {"view": DEPARTMENT, "change": DEPARTMENT_ADMIN, "approve": DEPARTMENT_ADMIN, "admin": PLATFORM}

    def live(self):
        return self.filter(cancelled_at__isnull=True)

    def overlapping(self, start, end):
        return self.live().filter(start__lt=end, end__gt=start)


class Booking(models.Model):
    """``gpus`` GPUs of ``flavor`` on ``cluster`` for ``department`` from ``start`` to ``end``: for every member,
    only for the members of ``team`` (one of the department's) when it names one, or only for ``users`` when it
    names some. ``purpose`` is what its owners and the reasons read ("NLP course")."""

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="bookings")
    # Protected: a team's bookings stay on record with it, as its jobs do (``team_delete`` refuses first).
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.PROTECT, related_name="bookings")
    users = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="bookings")
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="bookings")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="bookings")
    gpus = models.PositiveIntegerField()
    start = models.DateTimeField()
    end = models.DateTimeField()
    purpose = models.CharField(max_length=120)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    started_notified_at = models.DateTimeField(null=True, blank=True)  # its owners were told it began

    objects = BookingQuerySet.as_manager()

    class Meta:
        ordering = ["start", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(end__gt=F("start")), name="booking_ends_after_start"),
            models.CheckConstraint(condition=Q(gpus__gte=1), name="booking_has_gpus"),
        ]

    def __str__(self) -> str:
        return f"booking {self.pk}: {self.gpus}x {self.flavor_id} for {self.purpose}"


class MaintenanceQuerySet(models.QuerySet):
    """No tenant's data: every member reads the maintenance windows (their jobs may be affected); platform
    admins change them (``scheduling.services.calendar``)."""

    def live(self):
        return self.filter(cancelled_at__isnull=True)

    def overlapping(self, start, end):
        return self.live().filter(start__lt=end, end__gt=start)


class MaintenanceWindow(models.Model):
    """Nodes of ``cluster`` out of service from ``start`` to ``end``: the nodes named, the nodes carrying every
    label of ``selector`` (a rack), or the whole cluster when neither is given."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="maintenance_windows")
    nodes = models.JSONField(default=list, blank=True)
    selector = models.JSONField(default=dict, blank=True)
    start = models.DateTimeField()
    end = models.DateTimeField()
    reason = models.CharField(max_length=200)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    cancelled_at = models.DateTimeField(null=True, blank=True)
    affected_notified_at = models.DateTimeField(null=True, blank=True)  # the owners of affected jobs were told

    objects = MaintenanceQuerySet.as_manager()

    class Meta:
        ordering = ["start", "id"]
        constraints = [
            models.CheckConstraint(condition=Q(end__gt=F("start")), name="maintenance_ends_after_start"),
        ]

    def __str__(self) -> str:
        return f"maintenance {self.pk} on {self.cluster_id}: {self.reason}"
