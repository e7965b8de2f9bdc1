"""The pages under /budgets/ (namespace ``budgets``): the approvals inbox, which is scheduling's (a decision on a
job, scheduling/views/job_approvals.py), beside quotas' budget pages (quotas/urls.py). Composed here, in the app
above, so quotas never names a scheduling page; the inbox comes first, before ``<slug>/`` would take
"approvals" for a department."""

from django.urls import path

from quotas import urls as quotas_urls
from scheduling.views import job_approvals

app_name = "budgets"

urlpatterns = [
    path("approvals/", job_approvals.approvals, name="approvals"),
    path("approvals/<int:pk>/approve", job_approvals.approve, name="approve"),
    path("approvals/<int:pk>/reject", job_approvals.reject, name="reject"),
    *quotas_urls.urlpatterns,
]
