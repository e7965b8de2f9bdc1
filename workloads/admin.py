"""Department secrets in the Django admin: read-only like every model (portal/admin.py says why), and the
values are never shown (the encrypted column is left out of every view)."""

from django.contrib import admin

from portal.admin import ReadOnlyAdmin
from workloads.models import DepartmentSecret


@admin.register(DepartmentSecret)
class DepartmentSecretAdmin(ReadOnlyAdmin):
    list_display = ("name", "department", "kind", "purpose", "reference_name", "version", "updated_at")
    list_filter = ("kind", "purpose", "department")
    search_fields = ("name", "reference_name", "department__slug")
    list_select_related = ("department",)
    exclude = ("values_encrypted",)
