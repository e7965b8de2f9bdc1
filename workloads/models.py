"""Data sources and department secrets (see the package docstring)."""

from __future__ import annotations

import json

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from portal.crypto import EncryptedCharField
from portal.models import Department
from portal.tenancy import ADMIN, CHANGE, DEPARTMENT, DEPARTMENT_ADMIN, PLATFORM, VIEW, TenantQuerySet

# The Kubernetes Secret the portal owns for a "value" secret: a fixed prefix, so it never takes the name of a
# Secret someone else made in the namespace (and the portal never overwrites a Secret without its label).
OWNED_PREFIX = "portal-secret-"
# Plain text of every value of one secret together: tokens, keys and certificates fit; a dataset does not.
MAX_VALUE_BYTES = 32 * 1024


class SecretKind(models.TextChoices):
    REFERENCE = "reference", "A Kubernetes Secret that exists in the department's namespace"
    VALUE = "value", "Values the portal keeps (encrypted) and writes into a Secret it owns"


class SecretPurpose(models.TextChoices):
    ENV = "env", "Environment variables or files of a job"
    IMAGE_PULL = "image-pull", "Credentials of a private registry, used to pull every job's image"


class DepartmentSecretQuerySet(TenantQuerySet):
    """Members see their department's secrets (names and keys, never values) and use them in jobs; its admins
    create, rotate and delete them."""

    rules = {VIEW: DEPARTMENT, CHANGE: DEPARTMENT_ADMIN, ADMIN: PLATFORM}


class DepartmentSecret(models.Model):
    """A secret a department's jobs may use. ``reference``: the Kubernetes Secret ``reference_name`` that the
    department keeps in its namespace itself, expected to hold ``keys``. ``value``: key -> value pairs kept in
    ``values_encrypted`` (a JSON object, encrypted at rest as webhook signing secrets are, ``portal.crypto``)
    and written into the Secret ``portal-secret-<name>`` the portal owns, on the cluster a job using it runs
    on, before its pods are created. Values are write-only: nothing shows them back."""

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="+")
    name = models.CharField(max_length=40)
    kind = models.CharField(max_length=10, choices=SecretKind.choices)
    purpose = models.CharField(max_length=10, choices=SecretPurpose.choices, default=SecretPurpose.ENV)
    reference_name = models.CharField(max_length=253, blank=True)
    keys = models.JSONField(default=list, blank=True)
    # Image pull secrets kept by the portal: the registry and user are not secret (shown), the password is.
    registry = models.CharField(max_length=253, blank=True)
    username = models.CharField(max_length=253, blank=True)
    values_encrypted = EncryptedCharField(max_length=65536, blank=True)
    version = models.PositiveIntegerField(default=1)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = DepartmentSecretQuerySet.as_manager()

    class Meta:
        ordering = ["department_id", "name"]
        constraints = [
            models.UniqueConstraint(fields=["department", "name"], name="workloads_secret_unique_name"),
            models.CheckConstraint(
                condition=(Q(kind="reference") & ~Q(reference_name="")) | (Q(kind="value") & Q(reference_name="")),
                name="workloads_secret_kind_fields"),
        ]

    def __str__(self) -> str:
        return f"secret {self.name} of department {self.department_id}"

    def __repr__(self) -> str:  # never the values, whatever prints the row
        return f"<DepartmentSecret {self.pk} {self.name!r} {self.kind}>"

    @property
    def kube_name(self) -> str:
        """The Kubernetes Secret a pod refers to."""
        return self.reference_name if self.kind == SecretKind.REFERENCE else f"{OWNED_PREFIX}{self.name}"

    @property
    def values(self) -> dict[str, str]:
        """The plain values of a ``value`` secret ({} for a reference or when no key decrypts them)."""
        if not self.values_encrypted:
            return {}
        return json.loads(self.values_encrypted)

    @values.setter
    def values(self, data: dict[str, str]) -> None:
        self.values_encrypted = json.dumps(data, sort_keys=True) if data else ""
