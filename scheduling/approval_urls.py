"""The approvals inbox pages (mounted at /budgets/approvals/, namespace ``approvals``, by portal/urls.py before
the budget pages: the inbox sits beside the wallets it spends from, but its use case is scheduling's)."""

from django.urls import path

from scheduling.views import approvals

app_name = "approvals"

urlpatterns = [
    path("", approvals.approvals, name="inbox"),
    path("<int:pk>/approve", approvals.approve, name="approve"),
    path("<int:pk>/reject", approvals.reject, name="reject"),
]
