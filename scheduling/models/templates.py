"""Job templates: saved submission specs, personal or for a department."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import RegexValidator
from django.db import models
from django.db.models import Q
from django.utils import timezone

from portal.models import Department
from portal.tenancy import (
    ADMIN,
    CHANGE,
    DEPARTMENT,
    DEPARTMENT_ADMIN,
    OWNER,
    PLATFORM,
    VIEW,
    TenantQuerySet,
)
from portal.tenancy import scope as tenant_scope


class TemplateScope(models.TextChoices):
    PERSONAL = "personal", "Personal"
    DEPARTMENT = "department", "Department"


# A template's name: what `gpup submit --template NAME` and a lab file spell, so no spaces.
TEMPLATE_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}"


class JobTemplateQuerySet(TenantQuerySet):
    """A personal template is its owner's alone (as an API token: not even a platform admin reads it); a
    department template is read by the department's members and changed (edited, deleted) by its admins and
    by platform admins. Creating one is the same rule: only a department admin publishes to the department.

    Two rules in one table, so ``restrict`` and ``permits`` are the union of the two scopes, each decided by
    ``portal.tenancy.scope`` like every other rule."""

    owner_path = "owner"
    rules = {VIEW: DEPARTMENT, CHANGE: DEPARTMENT_ADMIN, ADMIN: PLATFORM}

    def _department_rule(self, action) -> str:
        return self.rules.get(str(action), PLATFORM)

    def restrict(self, user, action=VIEW):
        personal = tenant_scope(user, OWNER)
        shared = tenant_scope(user, self._department_rule(action))
        q = Q(pk__in=[])
        if personal.owner_id is not None:
            q |= Q(scope=TemplateScope.PERSONAL, owner_id=personal.owner_id)
        if shared.everything:
            q |= Q(scope=TemplateScope.DEPARTMENT)
        elif shared.department_id is not None:
            q |= Q(scope=TemplateScope.DEPARTMENT, department_id=shared.department_id)
        return self.filter(q)

    def permits(self, user, obj, action) -> bool:
        if obj.scope == TemplateScope.PERSONAL:
            owner_id = tenant_scope(user, OWNER).owner_id
            return owner_id is not None and owner_id == obj.owner_id
        shared = tenant_scope(user, self._department_rule(action))
        return shared.everything or (shared.department_id is not None and shared.department_id == obj.department_id)


class JobTemplate(models.Model):
    """A saved job submission with a name: personal (its owner's) or the department's.

    ``spec`` holds exactly the fields of a job submission (POST /api/v1/jobs), validated by the same serializer
    when saved and again, merged with the submission's own fields, when a job is submitted from it."""

    name = models.CharField(max_length=63, validators=[RegexValidator(f"^{TEMPLATE_NAME}$")])
    scope = models.CharField(max_length=10, choices=TemplateScope.choices, default=TemplateScope.PERSONAL)
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="job_templates")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                              related_name="job_templates", help_text="personal templates only")
    description = models.CharField(max_length=500, blank=True)
    spec = models.JSONField(default=dict)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    objects = JobTemplateQuerySet.as_manager()

    class Meta:
        ordering = ["scope", "name", "id"]
        constraints = [
            # NULL owners never collide in a unique index, so each scope gets its own constraint.
            models.UniqueConstraint(fields=["department", "owner", "name"], condition=Q(scope="personal"),
                                    name="jobtemplate_unique_personal_name"),
            models.UniqueConstraint(fields=["department", "name"], condition=Q(scope="department"),
                                    name="jobtemplate_unique_department_name"),
            models.CheckConstraint(
                condition=(Q(scope="personal") & Q(owner__isnull=False)) | (Q(scope="department") & Q(owner__isnull=True)),
                name="jobtemplate_owner_matches_scope"),
        ]

    def __str__(self) -> str:
        return f"template {self.name} ({self.scope})"
