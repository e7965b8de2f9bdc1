"""Scheduling endpoints (mounted under /api/v1/): jobs, the policy, the cluster. Trailing slashes optional."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from scheduling.api import policy, views

router = DefaultRouter()
router.trailing_slash = "/?"  # /api/v1/jobs and /api/v1/jobs/ both work (notebook users type either)
router.include_root_view = False
router.register("jobs", views.JobViewSet, basename="job")

urlpatterns = [
    path("", include(router.urls)),
    path("policy", policy.PolicyView.as_view(), name="policy"),
    path("policy/versions", policy.PolicyVersionsView.as_view(), name="policy-versions"),
    path("cluster", policy.ClusterView.as_view(), name="cluster"),
]
