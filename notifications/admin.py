"""The notifications outbox, deliveries, preferences and webhooks in the Django admin: read-only, like every
model of the portal (portal/admin.py says why). A webhook's secret is never shown."""

from django.contrib import admin

from notifications.models import Delivery, DepartmentSettings, Event, Preference, Webhook
from portal.admin import ReadOnlyAdmin


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ("id", "kind", "department", "to_admins", "created_at", "expanded_at")
    list_filter = ("kind", "department")
    search_fields = ("kind", "dedupe_key", "department__slug")
    date_hierarchy = "created_at"
    list_select_related = ("department",)


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = ("id", "event", "channel", "user", "webhook", "status", "attempts", "next_attempt_at",
                    "sent_at", "last_error")
    list_filter = ("channel", "status", "department")
    search_fields = ("key", "user__username", "last_error")
    list_select_related = ("event", "user", "webhook")


@admin.register(Preference)
class PreferenceAdmin(ReadOnlyAdmin):
    list_display = ("user", "kind", "email", "webhook", "updated_at")
    list_filter = ("kind", "email", "webhook")
    search_fields = ("user__username", "kind")
    list_select_related = ("user",)


@admin.register(Webhook)
class WebhookAdmin(ReadOnlyAdmin):
    list_display = ("id", "department", "user", "url", "active", "created_by", "created_at")
    list_filter = ("active", "department")
    search_fields = ("url", "user__username", "department__slug")
    exclude = ("secret",)
    list_select_related = ("department", "user", "created_by")


@admin.register(DepartmentSettings)
class DepartmentSettingsAdmin(ReadOnlyAdmin):
    list_display = ("department", "budget_low_threshold")
    search_fields = ("department__slug",)
    list_select_related = ("department",)
