"""Data sources and department secrets (see the package docstring).

A data source is a volume a cluster already has, declared once by an admin and mounted by jobs by name. The
portal never creates PersistentVolumes: every kind reaches the pod as a ``persistentVolumeClaim`` volume (the
restricted Pod Security profile forbids inline ``nfs`` volumes), whose claim the cluster's admin made in each
department namespace that may mount it (docs/workloads.md has the manifests and the RBAC).

A department secret is a credential a job uses as environment or files, or to pull its image: a reference
to a Kubernetes Secret of the namespace, or values the portal keeps encrypted and writes into a Secret it
owns. Its values are never shown back.
"""

from __future__ import annotations

import json

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from portal.crypto import EncryptedCharField
from portal.models import Department
from portal.tenancy import (
    ADMIN,
    APPROVE,
    CHANGE,
    DEPARTMENT,
    DEPARTMENT_ADMIN,
    PLATFORM,
    VIEW,
    TenantQuerySet,
    scope,
)

# A claim name is a DNS-1123 subdomain; a source's sub-path is relative, with no ".." and no empty parts.
CLAIM_NAME = RegexValidator(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$",
                            "A claim name is lower-case letters, digits, '-' and '.' (a DNS-1123 subdomain).")
SUB_PATH = RegexValidator(r"^$|^(?!.*(^|/)\.\.?(/|$))[A-Za-z0-9_.-]+(/[A-Za-z0-9_.-]+)*$",
                          "A relative path of letters, digits, '_', '.', '-' (no '..', no leading '/').")


class SourceKind(models.TextChoices):
    PVC = "pvc", "Existing claim in the department's namespace"
    NFS = "nfs", "NFS export (through a PersistentVolume and a claim per namespace)"
    DATASET = "dataset", "Read-only dataset shared by several departments"


class DataSourceQuerySet(TenantQuerySet):
    """A source is seen by its own department's members, by the departments it is shared with (or all of
    them), and by platform admins; it is changed by its department's admins (platform-owned sources: platform
    admins only)."""

    rules = {VIEW: DEPARTMENT, CHANGE: DEPARTMENT_ADMIN, APPROVE: PLATFORM, ADMIN: PLATFORM}

    def restrict(self, user, action=VIEW):
        if str(action) != str(VIEW):
            return super().restrict(user, action)
        s = scope(user, DEPARTMENT)
        if s.everything:
            return self
        if s.nothing:
            return self.none()
        return self.usable_by(s.department_id)

    def usable_by(self, department_id: int):
        """The sources a job of ``department_id`` may mount: its own, and those shared with it or with all."""
        shared = DataSource.shared_with.through.objects.filter(department_id=department_id).values("datasource_id")
        return self.filter(Q(department_id=department_id) | Q(shared_with_all=True) | Q(pk__in=shared))


class DataSource(models.Model):
    name = models.SlugField(max_length=40)
    kind = models.CharField(max_length=10, choices=SourceKind.choices, default=SourceKind.PVC)
    cluster = models.ForeignKey("scheduling.Cluster", on_delete=models.CASCADE, related_name="data_sources")
    # The owning department; null: platform-owned (a shared dataset, an NFS export for several departments).
    department = models.ForeignKey(Department, null=True, blank=True, on_delete=models.CASCADE,
                                   related_name="data_sources")
    shared_with = models.ManyToManyField(Department, blank=True, related_name="shared_data_sources")
    shared_with_all = models.BooleanField(default=False)
    # The PersistentVolumeClaim, of this name, in the namespace of every department that mounts the source.
    claim_name = models.CharField(max_length=253, validators=[CLAIM_NAME])
    writable = models.BooleanField(default=False)
    sub_path = models.CharField(max_length=255, blank=True, validators=[SUB_PATH])
    description = models.CharField(max_length=300, blank=True)
    created_at = models.DateTimeField(default=timezone.now)

    objects = DataSourceQuerySet.as_manager()

    class Meta:
        ordering = ["name", "cluster__name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name"], name="datasource_unique_cluster_name"),
            models.CheckConstraint(condition=Q(kind__in=SourceKind.values), name="datasource_kind_valid"),
            # A shared dataset is read-only whoever mounts it.
            models.CheckConstraint(condition=~Q(kind=SourceKind.DATASET, writable=True),
                                   name="datasource_dataset_read_only"),
        ]

    def __str__(self) -> str:
        return f"{self.name}@{self.cluster_id}"


class CheckpointDirQuerySet(TenantQuerySet):
    department_path = "job__department"


class CheckpointDir(models.Model):
    """One job's checkpoint directory: ``sub_path`` on ``source``, the same for every attempt. Kept
    CHECKPOINT_RETENTION_DAYS after the job ends, then deleted by the cluster (``deleted_at``)."""

    job = models.OneToOneField("scheduling.Job", on_delete=models.CASCADE, related_name="checkpoint_dir")
    # Deleting a source is refused while it holds a directory not yet deleted (the service); once every one
    # is gone, the rows stay as the jobs' record (sub-path, deleted_at) without the source.
    source = models.ForeignKey(DataSource, null=True, on_delete=models.SET_NULL, related_name="checkpoints")
    sub_path = models.CharField(max_length=400)
    mount_path = models.CharField(max_length=255, default="/checkpoint")
    created_at = models.DateTimeField(default=timezone.now)
    deleted_at = models.DateTimeField(null=True, blank=True)
    delete_error = models.CharField(max_length=300, blank=True)

    objects = CheckpointDirQuerySet.as_manager()

    def __str__(self) -> str:
        return f"{self.source.name if self.source else '(deleted source)'}:{self.sub_path}"

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
