"""Quota and budget endpoints (mounted under /api/v1/): flavors, quotas, wallets, allowances, per-user limits,
prices, the ledger and usage reports. Trailing slashes optional. (The approvals inbox and a job's cost are scheduling's
endpoints: scheduling/api/urls.py.)"""

from django.urls import include, path, re_path

from portal.api.routers import Router
from quotas.api import budgets as v
from quotas.api import preemption_limits, teams, user_limits, views

router = Router()
router.register("flavors", views.FlavorViewSet, basename="flavor")
router.register("quotas", views.QuotaViewSet, basename="quota")
router.register("quota-requests", views.QuotaRequestViewSet, basename="quota-request")

SLUG = r"(?P<slug>[a-z0-9-]+)"

urlpatterns = [
    path("", include(router.urls)),
    re_path(r"^wallets/?$", v.WalletListView.as_view(), name="wallet-list"),
    re_path(rf"^wallets/{SLUG}/?$", v.WalletDetailView.as_view(), name="wallet-detail"),
    re_path(rf"^wallets/{SLUG}/adjust/?$", v.WalletAdjustView.as_view(), name="wallet-adjust"),
    re_path(rf"^wallets/{SLUG}/refill-rule/?$", v.RefillRuleView.as_view(), name="wallet-refill-rule"),
    re_path(rf"^wallets/{SLUG}/approval-rule/?$", v.ApprovalRuleView.as_view(), name="wallet-approval-rule"),
    re_path(r"^allowances/?$", v.AllowanceListView.as_view(), name="allowance-list"),
    re_path(r"^allowances/(?P<username>[\w.@+-]+)/?$", v.AllowanceDetailView.as_view(), name="allowance-detail"),
    re_path(r"^user-limits/?$", user_limits.UserLimitListView.as_view(), name="user-limit-list"),
    re_path(r"^user-limits/(?P<username>[\w.@+-]+)/?$", user_limits.MemberLimitView.as_view(),
            name="user-limit-detail"),
    re_path(rf"^departments/{SLUG}/user-limit/?$", user_limits.DepartmentLimitView.as_view(),
            name="department-user-limit"),
    re_path(r"^teams/?$", teams.TeamListView.as_view(), name="team-list"),
    re_path(rf"^teams/{teams.TEAM}/?$", teams.TeamDetailView.as_view(), name="team-detail"),
    re_path(rf"^teams/{teams.TEAM}/quotas/(?P<flavor>[a-z0-9.-]+)/?$", teams.TeamQuotaView.as_view(),
            name="team-quota"),
    re_path(rf"^teams/{teams.TEAM}/members/(?P<username>[\w.@+-]+)/?$", teams.TeamMemberView.as_view(),
            name="team-member"),
    re_path(r"^preemption-limits/?$", preemption_limits.PreemptionLimitListView.as_view(),
            name="preemption-limit-list"),
    re_path(r"^prices/?$", v.PriceListView.as_view(), name="price-list"),
    re_path(r"^prices/(?P<pk>[0-9]+)/?$", v.PriceDetailView.as_view(), name="price-detail"),
    re_path(r"^ledger/?$", v.LedgerListView.as_view(), name="ledger-list"),
    re_path(r"^reports/usage/?$", v.UsageReportView.as_view(), name="report-usage"),
]
