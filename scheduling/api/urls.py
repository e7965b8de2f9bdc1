"""Scheduling endpoints (mounted under /api/v1/): jobs, the whole queue, the policy, the cluster, the approvals
inbox. Trailing slashes optional."""

from django.urls import include, path, re_path

from portal.api.routers import Router
from scheduling.api import clusters, job_approvals, policy, queue, session_images, sweeps, templates, views

router = Router()
router.register("jobs", views.JobViewSet, basename="job")
router.register("templates", templates.JobTemplateViewSet, basename="template")
router.register("arrays", sweeps.JobArrayViewSet, basename="array")

urlpatterns = [
    path("", include(router.urls)),
    path("policy", policy.PolicyView.as_view(), name="policy"),
    re_path(r"^session-images/?$", session_images.SessionImageListView.as_view(), name="session-image-list"),
    re_path(r"^session-images/(?P<name>[-a-zA-Z0-9_.]+)/?$", session_images.SessionImageDetailView.as_view(),
            name="session-image-detail"),
    path("policy/versions", policy.PolicyVersionsView.as_view(), name="policy-versions"),
    path("cluster", policy.ClusterView.as_view(), name="cluster"),
    re_path(r"^queue/?$", queue.QueueView.as_view(), name="queue"),
    re_path(r"^clusters/?$", clusters.ClusterListView.as_view(), name="cluster-list"),
    re_path(r"^clusters/(?P<name>[-a-zA-Z0-9_]+)/?$", clusters.ClusterDetailView.as_view(), name="cluster-detail"),
    re_path(r"^clusters/(?P<name>[-a-zA-Z0-9_]+)/node-groups/(?P<group>[-a-z0-9]+)/?$",
            clusters.NodeGroupView.as_view(), name="cluster-node-group"),
    re_path(r"^approvals/?$", job_approvals.ApprovalListView.as_view(), name="approval-list"),
    re_path(r"^approvals/(?P<pk>[0-9]+)/approve/?$", job_approvals.ApprovalDecisionView.as_view(decision="approve"),
            name="approval-approve"),
    re_path(r"^approvals/(?P<pk>[0-9]+)/reject/?$", job_approvals.ApprovalDecisionView.as_view(decision="reject"),
            name="approval-reject"),
    re_path(r"^jobs/(?P<pk>[0-9]+)/cost/?$", job_approvals.JobCostView.as_view(), name="job-cost"),
]
