"""Notifications: the outbox of events, one delivery per channel and recipient, preferences and webhooks.

* ``Event`` is the outbox. A service writes it in the transaction of the change it reports (a job's transition,
  an approval, a ledger entry), so a rolled-back change reports nothing, and a change committed while the
  broker is down is still reported: the periodic sweep finds the rows no message announced.
* ``Delivery`` is one message to one recipient on one channel. Its ``key`` (event, channel, recipient) is unique,
  so an event is delivered at most once per channel and recipient, however many workers expand it; webhooks
  send the key as ``X-Portal-Delivery`` for receivers that want to deduplicate too.
* ``Preference``: a user's choice per kind and channel; a kind without a row uses the kind's defaults.
* ``Webhook``: a URL of a user or of a department, with the HMAC secret the portal generated (shown once).
"""

from __future__ import annotations

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from portal.crypto import EncryptedCharField
from portal.models import Department
from portal.tenancy import (
    CHANGE,
    DEPARTMENT_ADMIN,
    OWNER,
    VIEW,
    TenantQuerySet,
    scope,
)


class Channel(models.TextChoices):
    EMAIL = "email", "E-mail"
    WEBHOOK = "webhook", "Webhook"


class Event(models.Model):
    """An event to report (the outbox row). ``expanded_at`` is set once its deliveries exist."""

    kind = models.CharField(max_length=40)
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="+")
    user_ids = models.JSONField(default=list, blank=True)  # recipients named by the emitter
    to_admins = models.BooleanField(default=False)  # and the department's admins, as they are at delivery
    data = models.JSONField(default=dict, blank=True)
    # Events that must be reported once per something (an allowance per period): a second emit is a no-op.
    dedupe_key = models.CharField(max_length=200, null=True, blank=True, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    expanded_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["created_at"], condition=Q(expanded_at__isnull=True),
                                name="notif_event_unexpanded"),
                   # the retention's hourly pass reads the oldest expanded events
                   models.Index(fields=["created_at"], condition=Q(expanded_at__isnull=False),
                                name="notif_event_expanded")]

    def __str__(self) -> str:
        return f"{self.kind} #{self.pk}"


class DeliveryQuerySet(TenantQuerySet):
    """A user's own notifications, nobody else's (platform admins included: they are personal)."""

    department_path = "department"
    owner_path = "user"
    rules = {VIEW: OWNER, CHANGE: OWNER}


class Delivery(models.Model):
    class Status(models.TextChoices):
        PENDING = "pending", "Pending"  # waiting for its (next) attempt at next_attempt_at
        SENDING = "sending", "Sending"  # claimed by one worker
        SENT = "sent", "Sent"
        FAILED = "failed", "Failed"  # gave up: permanent error, or out of attempts

    event = models.ForeignKey(Event, on_delete=models.CASCADE, related_name="deliveries")
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="+")
    channel = models.CharField(max_length=10, choices=Channel.choices)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="notifications")
    webhook = models.ForeignKey("Webhook", null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="deliveries")
    key = models.CharField(max_length=80, unique=True)  # the idempotency key: event, channel, recipient
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(default=timezone.now)
    claimed_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    last_error = models.CharField(max_length=500, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = DeliveryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        verbose_name_plural = "deliveries"
        indexes = [models.Index(fields=["status", "next_attempt_at"], name="notif_delivery_due")]

    def __str__(self) -> str:
        return self.key


class PreferenceQuerySet(TenantQuerySet):
    department_path = "user__membership__department"
    owner_path = "user"
    rules = {VIEW: OWNER, CHANGE: OWNER}


class Preference(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE,
                             related_name="notification_preferences")
    kind = models.CharField(max_length=40)
    email = models.BooleanField()
    webhook = models.BooleanField()
    updated_at = models.DateTimeField(auto_now=True)

    objects = PreferenceQuerySet.as_manager()

    class Meta:
        ordering = ["user_id", "kind"]
        constraints = [models.UniqueConstraint(fields=["user", "kind"], name="notif_preference_unique")]

    def __str__(self) -> str:
        return f"{self.user_id} {self.kind}: email={self.email} webhook={self.webhook}"


class WebhookQuerySet(TenantQuerySet):
    """A user's own webhook is theirs alone; a department's webhook is its admins' (platform admins: all
    departments'). Nobody sees another user's webhook."""

    department_path = "department"
    owner_path = "user"

    def restrict(self, user, action=VIEW):
        mine = Q(user_id=user.pk) if getattr(user, "is_authenticated", False) else Q(pk__in=[])
        s = scope(user, DEPARTMENT_ADMIN)
        if s.everything:
            department = Q(user__isnull=True)
        elif s.department_id is not None:
            department = Q(user__isnull=True, department_id=s.department_id)
        else:
            department = Q(pk__in=[])
        return self.filter(mine | department)

    def permits(self, user, obj, action) -> bool:
        return self.restrict(user, action).filter(pk=obj.pk).exists()


class Webhook(models.Model):
    """Where a user's (``user`` set) or a department's (``user`` empty) notifications are POSTed, signed with
    ``secret`` (HMAC-SHA256). The secret is generated by the portal and returned once, at creation or
    rotation; the API never shows it again. Signing needs it back, so it is stored encrypted, not hashed
    (``portal.crypto``)."""

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="+")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="+")
    url = models.URLField(max_length=500)
    secret = EncryptedCharField(max_length=255)
    kinds = models.JSONField(default=list, blank=True)  # a department's webhook: the kinds it receives
    active = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    objects = WebhookQuerySet.as_manager()

    class Meta:
        ordering = ["department_id", "user_id", "id"]
        constraints = [
            models.UniqueConstraint(fields=["user"], condition=Q(user__isnull=False), name="notif_one_webhook_per_user"),
            models.UniqueConstraint(fields=["department"], condition=Q(user__isnull=True),
                                    name="notif_one_webhook_per_department"),
        ]

    def __str__(self) -> str:
        return f"webhook {self.pk} ({'user ' + str(self.user_id) if self.user_id else 'department'})"

    @property
    def scope(self) -> str:
        return "user" if self.user_id else "department"


class DepartmentSettingsQuerySet(TenantQuerySet):
    rules = {VIEW: DEPARTMENT_ADMIN, CHANGE: DEPARTMENT_ADMIN}


class DepartmentSettings(models.Model):
    """A department's notification settings: below which balance (mcr) its admins hear that the budget is low.
    Empty: 10% of the refill amount."""

    department = models.OneToOneField(Department, on_delete=models.CASCADE, related_name="+")
    budget_low_threshold = models.PositiveBigIntegerField(null=True, blank=True)

    objects = DepartmentSettingsQuerySet.as_manager()

    class Meta:
        ordering = ["department_id"]
        verbose_name_plural = "department settings"

    def __str__(self) -> str:
        return f"notification settings of {self.department_id}"
