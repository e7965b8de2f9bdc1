"""GPU use, right-sizing history and its prediction errors in the Django admin: read-only, like every model of
the portal (portal/admin.py says why)."""

from django.contrib import admin

from observability.models import AttemptUsage, PredictionOutcome, UsageHistory
from portal.admin import ReadOnlyAdmin


@admin.register(AttemptUsage)
class AttemptUsageAdmin(ReadOnlyAdmin):
    list_display = ("job", "attempt", "source", "gpus", "mean_util", "p95_util", "busy_gpus", "peak_memory_mib",
                    "idle_minutes", "idle_flagged_at", "final", "collected_at")
    list_filter = ("source", "final", ("idle_flagged_at", admin.EmptyFieldListFilter))
    search_fields = ("job__name", "job__department__slug")
    exclude = ("series",)
    list_select_related = ("job",)


@admin.register(UsageHistory)
class UsageHistoryAdmin(ReadOnlyAdmin):
    list_display = ("key", "owner", "department", "runs", "gpus_requested", "busy_gpus", "peak_memory_mib",
                    "runtime_s", "updated_at")
    list_filter = ("department",)
    search_fields = ("key", "owner__username", "department__slug")
    list_select_related = ("owner", "department")


@admin.register(PredictionOutcome)
class PredictionOutcomeAdmin(ReadOnlyAdmin):
    list_display = ("key", "owner", "job", "attempt", "predicted_busy_gpus", "actual_busy_gpus",
                    "predicted_runtime_s", "actual_runtime_s", "recorded_at")
    list_filter = ("department",)
    search_fields = ("key", "owner__username", "department__slug")
    list_select_related = ("owner", "job")
