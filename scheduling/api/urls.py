"""Scheduling endpoints (mounted under /api/v1/): jobs, the policy, the cluster. Trailing slashes optional."""

from django.urls import include, path, re_path
from rest_framework.routers import DefaultRouter

from scheduling.api import clusters, policy, templates, views

router = DefaultRouter()
router.trailing_slash = "/?"  # /api/v1/jobs and /api/v1/jobs/ both work (notebook users type either)
router.include_root_view = False
router.register("jobs", views.JobViewSet, basename="job")
router.register("templates", templates.JobTemplateViewSet, basename="template")

urlpatterns = [
    path("", include(router.urls)),
    path("policy", policy.PolicyView.as_view(), name="policy"),
    path("policy/versions", policy.PolicyVersionsView.as_view(), name="policy-versions"),
    path("cluster", policy.ClusterView.as_view(), name="cluster"),
    re_path(r"^clusters/?$", clusters.ClusterListView.as_view(), name="cluster-list"),
    re_path(r"^clusters/(?P<name>[-a-zA-Z0-9_]+)/?$", clusters.ClusterDetailView.as_view(), name="cluster-detail"),
    re_path(r"^clusters/(?P<name>[-a-zA-Z0-9_]+)/node-groups/(?P<group>[-a-z0-9]+)/?$",
            clusters.NodeGroupView.as_view(), name="cluster-node-group"),
]
