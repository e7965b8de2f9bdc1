"""Sessions and services (docs/sessions.md): the lab's list of session images, and the grants that let a
session's owner through its route.

A grant is made when the owner presses Connect: a one-time code (in the redirect's URL, good for a minute)
that the route exchanges for a token (in an HttpOnly cookie scoped to the session's path, never in a URL).
Only the SHA-256 of either is stored."""

from __future__ import annotations

import hashlib
import re

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.utils import timezone

from portal.tenancy import ADMIN, CHANGE, OWNER, PLATFORM, VIEW, TenantQuerySet
from scheduling.models.jobs import Job

SESSION_IMAGE_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$")


class SessionImageQuerySet(TenantQuerySet):
    """The lab's list: every member reads it (it names no department), platform admins change it."""

    department_path = ""

    def restrict(self, user, action=VIEW):
        if str(action) == VIEW and getattr(user, "is_authenticated", False):
            return self.all()
        return super().restrict(user, action)


class SessionImage(models.Model):
    """An image the lab offers for interactive sessions (JupyterLab, a VS Code server, ...): where its app
    listens and the path that answers once it is ready. Declared in the lab file or by a platform admin."""

    name = models.CharField(max_length=63, unique=True)
    label = models.CharField(max_length=100, blank=True)
    image = models.CharField(max_length=512)
    port = models.PositiveIntegerField(validators=[MinValueValidator(1), MaxValueValidator(65535)])
    readiness_path = models.CharField(max_length=200, default="/")
    command = models.JSONField(default=list, blank=True)
    description = models.CharField(max_length=300, blank=True)

    objects = SessionImageQuerySet.as_manager()

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name


class SessionGrantQuerySet(TenantQuerySet):
    """A grant is its owner's alone, like an API token."""

    department_path = "job__department"
    owner_path = "user"
    rules = {VIEW: OWNER, CHANGE: OWNER, ADMIN: PLATFORM}


def digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class SessionGrant(models.Model):
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="session_grants")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="session_grants")
    code_hash = models.CharField(max_length=64, unique=True)
    code_expires_at = models.DateTimeField()
    token_hash = models.CharField(max_length=64, blank=True, db_index=True)
    exchanged_at = models.DateTimeField(null=True, blank=True)
    expires_at = models.DateTimeField()
    # The last request (or open WebSocket, re-checked by the proxy) that came through with it: "a client is
    # connected" for the idle-session policy.
    last_seen_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = SessionGrantQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [models.Index(fields=["job", "last_seen_at"])]

    def __str__(self) -> str:
        return f"grant {self.pk} of job {self.job_id}"
