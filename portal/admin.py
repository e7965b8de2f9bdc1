"""The Django admin: every model, to look things up (search, filters, sensible columns).

It is read-only on purpose. Every change to the lab goes through a service that validates it and writes an
audit entry (the Lab pages, the API, ``manage.py lab apply``); an admin form would bypass both, and for
money (wallets, ledger) and job states it would break the invariants the services keep. Append-only rows
(audit entries, ledger entries, job timelines, preemptions) could not be changed anyway. Users and groups
stay editable in Django's own admin (break-glass passwords).
"""

from django.contrib import admin

from portal.models import (
    ApiToken,
    AuditEntry,
    Department,
    ExternalIdentity,
    Installation,
    Membership,
    MetricValue,
    SsoGroupMapping,
    Team,
)


class ReadOnly:
    """No add, change or delete: view, search and filter only."""

    def has_add_permission(self, request, obj=None):
        return False

    def has_change_permission(self, request, obj=None):
        return False

    def has_delete_permission(self, request, obj=None):
        return False


class ReadOnlyAdmin(ReadOnly, admin.ModelAdmin):
    list_per_page = 50


class ReadOnlyInline(ReadOnly, admin.TabularInline):
    """A parent's rows (a job's timeline, a preemption's victims) listed on its page, read-only too."""

    extra = 0
    can_delete = False


@admin.register(Department)
class DepartmentAdmin(ReadOnlyAdmin):
    list_display = ("slug", "name", "created_at", "archived_at")
    list_filter = (("archived_at", admin.EmptyFieldListFilter),)
    search_fields = ("slug", "name")


@admin.register(Team)
class TeamAdmin(ReadOnlyAdmin):
    list_display = ("slug", "department", "name", "budget_share_pct", "created_at")
    list_filter = ("department",)
    search_fields = ("slug", "name", "department__slug")
    list_select_related = ("department",)


@admin.register(Membership)
class MembershipAdmin(ReadOnlyAdmin):
    list_display = ("user", "department", "role", "user_tier", "team", "team_admin")
    list_filter = ("role", "user_tier", "department")
    search_fields = ("user__username", "user__email", "department__slug")
    list_select_related = ("user", "department")


@admin.register(ApiToken)
class ApiTokenAdmin(ReadOnlyAdmin):
    list_display = ("user", "name", "key_id", "created_at", "expires_at", "last_used_at", "revoked_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter), "expires_at")
    search_fields = ("user__username", "name", "key_id")
    exclude = ("key_hash",)
    list_select_related = ("user",)


@admin.register(AuditEntry)
class AuditEntryAdmin(ReadOnlyAdmin):
    list_display = ("at", "actor", "action", "object_type", "object_id", "department", "comment")
    list_filter = ("action", "object_type", "department")
    search_fields = ("action", "object_type", "object_id", "comment", "actor__username")
    date_hierarchy = "at"
    list_select_related = ("actor", "department")


@admin.register(MetricValue)
class MetricValueAdmin(ReadOnlyAdmin):
    list_display = ("name", "labels", "value", "updated_at")
    search_fields = ("name", "labels")


@admin.register(SsoGroupMapping)
class SsoGroupMappingAdmin(ReadOnlyAdmin):
    list_display = ("group", "department", "role", "user_tier")
    list_filter = ("role", "department")
    search_fields = ("group", "department__slug")
    list_select_related = ("department",)


@admin.register(ExternalIdentity)
class ExternalIdentityAdmin(ReadOnlyAdmin):
    list_display = ("user", "preferred_username", "issuer", "subject", "last_login_at")
    search_fields = ("user__username", "preferred_username", "subject")
    list_select_related = ("user",)


@admin.register(Installation)
class InstallationAdmin(ReadOnlyAdmin):
    list_display = ("key", "created_at")
    search_fields = ("key",)
