"""Quotas and budgets in the Django admin: read-only (see portal/admin.py for why)."""

from django.contrib import admin

from portal.admin import ReadOnlyAdmin
from quotas.models import (
    Allowance,
    ApprovalRule,
    Flavor,
    LedgerEntry,
    PreemptionLimit,
    Price,
    Quota,
    QuotaChangeRequest,
    RefillRecord,
    RefillRule,
    TeamQuota,
    UserLimit,
    Wallet,
)


@admin.register(Flavor)
class FlavorAdmin(ReadOnlyAdmin):
    list_display = ("name", "resource_name", "gpu_memory_gib", "is_mig", "description")
    search_fields = ("name", "resource_name", "description")

    @admin.display(boolean=True, description="MIG")
    def is_mig(self, obj):
        return obj.is_mig


@admin.register(Quota)
class QuotaAdmin(ReadOnlyAdmin):
    list_display = ("department", "flavor", "scope", "nominal", "borrowing_limit", "lending_limit")
    list_filter = ("flavor", "department", "cluster")
    search_fields = ("department__slug", "flavor__name", "cluster__name")
    list_select_related = ("department", "flavor", "cluster")


@admin.register(TeamQuota)
class TeamQuotaAdmin(ReadOnlyAdmin):
    list_display = ("team", "flavor", "nominal", "borrowing_limit", "lending_limit")
    list_filter = ("flavor", "team__department")
    search_fields = ("team__slug", "team__department__slug", "flavor__name")
    list_select_related = ("team__department", "flavor")


@admin.register(QuotaChangeRequest)
class QuotaChangeRequestAdmin(ReadOnlyAdmin):
    list_display = ("id", "department", "flavor", "nominal", "borrowing_limit", "lending_limit", "state",
                    "requested_by", "requested_at", "decided_by", "decided_at")
    list_filter = ("state", "department", "flavor")
    search_fields = ("department__slug", "reason", "requested_by__username")
    list_select_related = ("department", "flavor", "requested_by", "decided_by")


@admin.register(Wallet)
class WalletAdmin(ReadOnlyAdmin):
    list_display = ("department", "balance", "held", "available", "updated_at")
    search_fields = ("department__slug",)
    list_select_related = ("department",)


@admin.register(Allowance)
class AllowanceAdmin(ReadOnlyAdmin):
    list_display = ("user", "wallet", "limit", "period")
    list_filter = ("period",)
    search_fields = ("user__username", "wallet__department__slug")
    list_select_related = ("user", "wallet__department")


@admin.register(UserLimit)
class UserLimitAdmin(ReadOnlyAdmin):
    list_display = ("department", "user", "max_gpus", "max_queued", "updated_at")
    list_filter = ("department",)
    search_fields = ("user__username", "department__slug")
    list_select_related = ("department", "user")


@admin.register(LedgerEntry)
class LedgerEntryAdmin(ReadOnlyAdmin):
    list_display = ("created_at", "wallet", "kind", "amount", "held_change", "balance_after", "held_after", "job",
                    "user", "actor", "memo")
    list_filter = ("kind", "wallet__department", "outcome")
    search_fields = ("idempotency_key", "memo", "user__username", "job__name")
    date_hierarchy = "created_at"
    list_select_related = ("wallet__department", "job", "user", "actor")


@admin.register(Price)
class PriceAdmin(ReadOnlyAdmin):
    list_display = ("flavor", "tier", "per_gpu_hour", "updated_at")
    list_filter = ("tier", "flavor")
    list_select_related = ("flavor",)


@admin.register(RefillRule)
class RefillRuleAdmin(ReadOnlyAdmin):
    list_display = ("department", "mode", "amount", "period", "active", "updated_at")
    list_filter = ("mode", "period", "active")
    search_fields = ("department__slug",)


@admin.register(RefillRecord)
class RefillRecordAdmin(ReadOnlyAdmin):
    list_display = ("department", "period", "amount", "created_at")
    list_filter = ("department",)
    search_fields = ("department__slug", "period")


@admin.register(PreemptionLimit)
class PreemptionLimitAdmin(ReadOnlyAdmin):
    list_display = ("department", "tier", "non_preemptible", "user_tiers", "max_runtime_s", "surcharge_pct",
                    "sessions_preemptible", "updated_at")
    list_filter = ("tier", "non_preemptible", "sessions_preemptible")
    search_fields = ("department__slug",)


@admin.register(ApprovalRule)
class ApprovalRuleAdmin(ReadOnlyAdmin):
    list_display = ("department", "gpus_above", "cost_above", "realtime", "updated_at")
    search_fields = ("department__slug",)
