"""Data sources, checkpoint directories and department secrets in the Django admin: read-only, like every
model (portal/admin.py says why); they are declared through the API and the lab pages, which check and audit
every change. A secret's values are never shown (the encrypted column is left out of every view)."""

from django.contrib import admin

from portal.admin import ReadOnlyAdmin
from workloads.models import CheckpointDir, DataSource, DepartmentSecret


@admin.register(DataSource)
class DataSourceAdmin(ReadOnlyAdmin):
    list_display = ("name", "kind", "cluster", "department", "shared_with_all", "claim_name", "writable")
    list_filter = ("kind", "writable", "shared_with_all", "cluster")
    search_fields = ("name", "claim_name", "department__slug")
    list_select_related = ("cluster", "department")


@admin.register(CheckpointDir)
class CheckpointDirAdmin(ReadOnlyAdmin):
    list_display = ("job", "source", "sub_path", "mount_path", "created_at", "deleted_at")
    list_filter = ("source",)
    search_fields = ("job__name", "sub_path")
    list_select_related = ("job", "source")


@admin.register(DepartmentSecret)
class DepartmentSecretAdmin(ReadOnlyAdmin):
    list_display = ("name", "department", "kind", "purpose", "reference_name", "version", "updated_at")
    list_filter = ("kind", "purpose", "department")
    search_fields = ("name", "reference_name", "department__slug")
    list_select_related = ("department",)
    exclude = ("values_encrypted",)
