"""The policy tuner's records: the lab's tuner configuration (one row) and each run's result, a proposal or the
reason there is none (``scheduling.services.tuning``; the search is ``simulator.tuner``)."""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.utils import timezone


class TunerSettings(models.Model):
    """The lab's targets, the search's bounds and automatic application (``simulator.tuner.config_to_dict``'s
    form); one row, absent until an admin first saves it (the defaults apply)."""

    config = models.JSONField(default=dict)
    updated_at = models.DateTimeField(default=timezone.now)
    updated_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")

    def __str__(self) -> str:
        return "tuner settings"


class PolicyProposal(models.Model):
    """One run of the tuner over the last week: the figures of the policy in force (as the week happened and as
    replayed) and, when the search found one, the proposed policy with its diff and predicted figures."""

    class Status(models.TextChoices):
        PROPOSED = "proposed"  # waits for an admin
        NONE = "none"  # nothing to propose (``reason``)
        APPLIED = "applied"  # made a policy version (``applied_version``)
        DISMISSED = "dismissed"
        SUPERSEDED = "superseded"  # a later run, or another policy version, replaced it
        FAILED = "failed"  # the replay could not run (``reason``)

    class Trigger(models.TextChoices):
        SCHEDULE = "schedule"
        DEMAND = "demand"

    created_at = models.DateTimeField(default=timezone.now, db_index=True)
    trigger = models.CharField(max_length=10, choices=Trigger.choices)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                     related_name="+")
    status = models.CharField(max_length=10, choices=Status.choices)
    base_version = models.PositiveIntegerField()  # the policy version the run started from
    config = models.JSONField(default=dict)
    days = models.FloatField()
    jobs = models.PositiveIntegerField(default=0)  # replayed
    measured = models.JSONField(default=dict)  # each target's figure as the week happened
    current = models.JSONField(default=dict)  # ... as the replay of the policy in force gives it
    limits = models.JSONField(default=dict)
    proposal = models.JSONField(null=True, blank=True)
    predicted = models.JSONField(null=True, blank=True)
    diff = models.JSONField(default=list)
    improves = models.JSONField(default=list)
    costs = models.JSONField(default=list)
    reason = models.TextField(blank=True)
    replays = models.PositiveIntegerField(default=0)
    cpu_s = models.FloatField(default=0.0)
    auto_applied = models.BooleanField(default=False)
    applied_version = models.PositiveIntegerField(null=True, blank=True)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"policy proposal {self.pk} ({self.status})"


__all__ = ["PolicyProposal", "TunerSettings"]
