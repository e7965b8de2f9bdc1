"""Tenancy: departments, memberships (role + user tier) and API tokens."""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import RegexValidator
from django.db import models
from django.utils import timezone

from portal.tenancy import CHANGE, DEPARTMENT_ADMIN, OWNER, VIEW, TenantQuerySet, remember_membership

SLUG = RegexValidator(r"^[a-z0-9]([a-z0-9-]{0,38}[a-z0-9])?$", "Lower-case letters, digits and dashes.")


def reserved_slugs() -> frozenset[str]:
    """Every fixed word of the URLconf (``approvals``, ``prices``, ``allowances``, ``jobs``, ...).

    Pages like ``/budgets/<slug>/`` share their first segment with fixed pages (``/budgets/approvals/``), so
    a department named after one of those words would be unreachable. Derived from the resolver at call time
    (not imported: the URLconf imports every app), so a new page reserves its word by existing."""
    from django.urls import URLResolver, get_resolver

    words: set[str] = set()

    def walk(patterns):
        for p in patterns:
            route = str(p.pattern)
            for part in re.split(r"[/^$?]+", route):
                if re.fullmatch(r"[a-z0-9][a-z0-9-]*", part):
                    words.add(part)
            # The admin's own model URLs live under /admin/ only, which is reserved as a whole.
            if isinstance(p, URLResolver) and getattr(p, "app_name", None) != "admin":
                walk(p.url_patterns)

    walk(get_resolver().url_patterns)
    return frozenset(words)


def not_reserved(value: str) -> None:
    """A department slug must not be a word of the URLconf (see ``reserved_slugs``)."""
    if value in reserved_slugs():
        raise ValidationError(f"{value!r} is a word the portal's URLs use; choose another slug.",
                              code="reserved")


class DepartmentQuerySet(TenantQuerySet):
    department_path = ""  # a department is its own tenant: members see theirs, its admins change it


class Department(models.Model):
    """A tenant. Its slug names its Kubernetes namespace (KUBE_NAMESPACE_TEMPLATE)."""

    slug = models.CharField(max_length=40, unique=True, validators=[SLUG, not_reserved])
    name = models.CharField(max_length=120)
    created_at = models.DateTimeField(auto_now_add=True)
    # Archived: kept with its whole history (jobs, ledger, audit), but it takes no new jobs or members.
    archived_at = models.DateTimeField(null=True, blank=True)

    objects = DepartmentQuerySet.as_manager()

    class Meta:
        ordering = ["slug"]

    def __str__(self) -> str:
        return self.slug

    @property
    def is_archived(self) -> bool:
        return self.archived_at is not None


class TeamQuerySet(TenantQuerySet):
    """Members see their department's teams (pages show a researcher their own); its admins create and change
    them (a team's admins change only its quota limits, ``quotas.services.teams``)."""


class Team(models.Model):
    """A group inside a department (a professor's group, a project): one level, no teams of teams. Its members
    draw on its split of the department's quota (``quotas.TeamQuota``); members of no team on the department's
    unassigned share. ``budget_share_pct``: the share of the department's credits its jobs may hold at once
    (null: no share of its own, the department's budget alone)."""

    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="teams")
    slug = models.CharField(max_length=40, validators=[SLUG])
    name = models.CharField(max_length=120, blank=True)
    budget_share_pct = models.PositiveSmallIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = TeamQuerySet.as_manager()

    class Meta:
        ordering = ["department__slug", "slug"]
        constraints = [
            models.UniqueConstraint(fields=["department", "slug"], name="team_unique_department_slug"),
            models.CheckConstraint(condition=models.Q(budget_share_pct__isnull=True)
                                   | models.Q(budget_share_pct__lte=100), name="team_budget_share_percent"),
        ]

    def __str__(self) -> str:
        return f"{self.department.slug}/{self.slug}"


class Role(models.TextChoices):
    RESEARCHER = "researcher", "Researcher"
    DEPARTMENT_ADMIN = "department_admin", "Department admin"
    PLATFORM_ADMIN = "platform_admin", "Platform admin"


class UserTier(models.TextChoices):
    STANDARD = "standard", "Standard"
    SENIOR = "senior", "Senior"
    PI = "pi", "Principal investigator"


class MembershipQuerySet(TenantQuerySet):
    """Members see their department's members; its admins change them (set their allowances)."""

    owner_path = "user"


class Membership(models.Model):
    """A user's one department, role and user tier (the tier weighs in the scheduling score)."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="membership")
    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="members")
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.RESEARCHER)
    user_tier = models.CharField(max_length=20, choices=UserTier.choices, default=UserTier.STANDARD)
    # The member's team inside their department (null: none; their jobs draw on the unassigned share), and
    # whether they are one of its admins (its borrowing and lending limits and its jobs' approvals, nothing else).
    team = models.ForeignKey(Team, null=True, blank=True, on_delete=models.SET_NULL, related_name="members")
    # db_default too: rows written without the column (code of an earlier release during a rolling update, a
    # migration test's historical models) still read as no team admin
    team_admin = models.BooleanField(default=False, db_default=False)

    objects = MembershipQuerySet.as_manager()

    class Meta:
        ordering = ["department__slug", "user__username"]
        constraints = [
            models.CheckConstraint(condition=models.Q(team_admin=False) | models.Q(team__isnull=False),
                                   name="membership_team_admin_has_team"),
        ]

    def __str__(self) -> str:
        return f"{self.user} @ {self.department} ({self.role})"

    @property
    def is_platform_admin(self) -> bool:
        return self.role == Role.PLATFORM_ADMIN

    @property
    def is_department_admin(self) -> bool:
        return self.role in (Role.DEPARTMENT_ADMIN, Role.PLATFORM_ADMIN)


class SsoGroupMapping(models.Model):
    """Single sign-on: a user of this identity-provider group gets this membership at their first login
    (set in the lab file; OIDC_GROUP_MAP in the environment adds more). Platform configuration: only the
    sign-in backend reads it."""

    group = models.CharField(max_length=200)
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="sso_groups")
    role = models.CharField(max_length=20, choices=Role.choices, default=Role.RESEARCHER)
    user_tier = models.CharField(max_length=20, choices=UserTier.choices, default=UserTier.STANDARD)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["group", "department"], name="sso_group_unique_department")]

    def __str__(self) -> str:
        return f"{self.group} -> {self.department} ({self.role})"


class ExternalIdentity(models.Model):
    """Single sign-on: the provider's account (``iss``, ``sub``) that signs in as this user. The pair never
    changes at a provider and is never reused, unlike ``preferred_username``, which users can often edit: it is
    kept here only as the name the provider last gave (a display name), and no sign-in matches on it."""

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="external_identities")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    preferred_username = models.CharField(max_length=150, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    last_login_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="external_identity_unique")]

    def __str__(self) -> str:
        return f"{self.issuer} {self.subject} -> {self.user}"


def _hash(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()


class ApiTokenQuerySet(TenantQuerySet):
    """A token is its owner's alone: nobody else sees or revokes it, platform admins included."""

    owner_path = "user"
    rules = {VIEW: OWNER, CHANGE: OWNER}

    def live(self):
        return self.filter(revoked_at__isnull=True, expires_at__gt=timezone.now())


class ApiToken(models.Model):
    """A bearer token for notebooks and scripts. Only its SHA-256 is stored; it expires."""

    PREFIX = "gpp"

    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    name = models.CharField(max_length=80)
    key_id = models.CharField(max_length=16, unique=True)
    key_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(auto_now_add=True)
    expires_at = models.DateTimeField()
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    objects = ApiTokenQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]

    def __str__(self) -> str:
        return f"{self.user}:{self.name}"

    @classmethod
    def issue(cls, *, user, name: str, ttl_days: int | None = None) -> tuple[ApiToken, str]:
        """Create a token; returns it and the plain secret, which is shown once and never stored."""
        ttl = ttl_days if ttl_days is not None else settings.API_TOKEN_TTL_DAYS
        key_id = secrets.token_hex(6)
        secret = secrets.token_urlsafe(32)
        token = cls.objects.create(
            user=user,
            name=name,
            key_id=key_id,
            key_hash=_hash(secret),
            expires_at=timezone.now() + timedelta(days=ttl),
        )
        return token, f"{cls.PREFIX}_{key_id}_{secret}"

    def revoke(self) -> None:
        """Revoke the token now (idempotent: a revoked token keeps its first revocation time)."""
        ApiToken.objects.filter(pk=self.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.refresh_from_db(fields=["revoked_at"])

    @property
    def status(self) -> str:
        if self.revoked_at is not None:
            return "revoked"
        return "expired" if self.expires_at <= timezone.now() else "active"

    @classmethod
    def authenticate(cls, raw: str) -> ApiToken | None:
        try:
            prefix, key_id, secret = raw.split("_", 2)
        except ValueError:
            return None
        if prefix != cls.PREFIX:
            return None
        # The user's membership and department come with the token: every request a token makes needs them
        # (``portal.tenancy.member``), and a second read cost as much CPU as the token's own.
        token = (cls.objects.live().select_related("user__membership__department").filter(key_id=key_id)
                 .first())
        if token is None or not secrets.compare_digest(token.key_hash, _hash(secret)):
            return None
        try:
            membership = token.user.membership
        except Membership.DoesNotExist:  # read as missing: no second query
            membership = None
        remember_membership(token.user, membership)
        return token

    @classmethod
    def refusal(cls, raw: str) -> str:
        """Why ``raw`` is refused, for the 401: an expired or revoked token says so (with its secret right only,
        so a guess learns nothing about a key id), anything else is invalid."""
        prefix, _, rest = raw.partition("_")
        key_id, _, secret = rest.partition("_")
        token = cls.objects.filter(key_id=key_id).first() if prefix == cls.PREFIX and secret else None
        if token is None or not secrets.compare_digest(token.key_hash, _hash(secret)):
            return "Invalid API token."
        if token.revoked_at is not None:
            return f"This API token was revoked on {token.revoked_at:%Y-%m-%d}: issue a new one on the Tokens page."
        if token.expires_at <= timezone.now():
            return f"This API token expired on {token.expires_at:%Y-%m-%d}: issue a new one on the Tokens page."
        return "Invalid API token."  # its user is not active


class AppendOnlyModel(models.Model):
    """Rows that are written once and never changed or deleted (timelines, audit logs, ledgers). The guard
    here catches the ORM; a PostgreSQL trigger (see the migrations) catches everything else."""

    class Meta:
        abstract = True

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise ValueError(f"{self._meta.verbose_name_plural} are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise ValueError(f"{self._meta.verbose_name_plural} are append-only")


class AuditEntryQuerySet(TenantQuerySet):
    """Department admins read their department's entries; entries of no department are platform admins'."""

    rules = {VIEW: DEPARTMENT_ADMIN}


class AuditEntry(AppendOnlyModel):
    """Who changed what, when, from which value to which (quotas, budgets, prices, policy, approvals).

    Append-only: the model refuses updates and deletes; on PostgreSQL a trigger refuses them too.
    """

    at = models.DateTimeField(default=timezone.now, db_index=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    action = models.CharField(max_length=60)
    object_type = models.CharField(max_length=60)
    object_id = models.CharField(max_length=64)
    department = models.ForeignKey(Department, null=True, blank=True, on_delete=models.SET_NULL)
    old = models.JSONField(null=True, blank=True)
    new = models.JSONField(null=True, blank=True)
    comment = models.TextField(blank=True)

    objects = AuditEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-at", "-id"]
        indexes = [models.Index(fields=["object_type", "object_id"])]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M} {self.action} {self.object_type}:{self.object_id}"


class MetricValue(models.Model):
    """A metric written by whichever process observes it (the cycle and ledger checks run in Celery
    workers) and read by ``/metrics`` in the web process at scrape time: the database is the one place every
    process shares. Counters and histogram buckets only ever grow (``portal.metrics.add``, ``observe``); gauges
    are set."""

    name = models.CharField(max_length=100)
    labels = models.CharField(max_length=200, blank=True, default="")  # canonical "k=v,k2=v2", sorted
    value = models.FloatField(default=0)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["name", "labels"], name="metricvalue_name_labels_unique")]
        ordering = ["name", "labels", "id"]

    def __str__(self) -> str:
        return f"{self.name}{{{self.labels}}} {self.value}"


class Installation(models.Model):
    """This installation's identity on the clusters it shares (one row, generated on first use when the operator
    sets none): every object the portal writes there carries it, and only objects that carry it are its own
    (``portal.installation``)."""

    key = models.CharField(max_length=63, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    def __str__(self) -> str:
        return self.key
