"""The approvals inbox pages (mounted at /budgets/approvals/, namespace ``approvals``, by portal/urls.py before
the budget pages: the inbox sits beside the wallets it spends from, but the decision on a job is scheduling's: scheduling/views/job_approvals.py)."""

from django.urls import path

from scheduling.views import job_approvals

app_name = "approvals"

urlpatterns = [
    path("", job_approvals.approvals, name="inbox"),
    path("<int:pk>/approve", job_approvals.approve, name="approve"),
    path("<int:pk>/reject", job_approvals.reject, name="reject"),
]
