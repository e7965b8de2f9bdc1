"""Scheduling endpoints (mounted under /api/v1/): jobs, the whole queue, the policy, the cluster, the approvals
inbox. Trailing slashes optional."""

from django.urls import include, path, re_path

from portal.api.routers import Router
from scheduling.api import (
    calendar,
    clusters,
    fair_share,
    job_approvals,
    notice,
    policy,
    queue,
    session_images,
    sweeps,
    templates,
    tuning,
    views,
)

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
    re_path(r"^policy/proposals/?$", tuning.ProposalListView.as_view(), name="policy-proposal-list"),
    re_path(r"^policy/proposals/(?P<pk>[0-9]+)/?$", tuning.ProposalDetailView.as_view(),
            name="policy-proposal-detail"),
    re_path(r"^policy/proposals/(?P<pk>[0-9]+)/apply/?$", tuning.ProposalDecisionView.as_view(decision="apply"),
            name="policy-proposal-apply"),
    re_path(r"^policy/proposals/(?P<pk>[0-9]+)/dismiss/?$",
            tuning.ProposalDecisionView.as_view(decision="dismiss"), name="policy-proposal-dismiss"),
    re_path(r"^policy/tuner/?$", tuning.TunerConfigView.as_view(), name="policy-tuner"),
    path("cluster", policy.ClusterView.as_view(), name="cluster"),
    re_path(r"^queue/?$", queue.QueueView.as_view(), name="queue"),
    re_path(r"^fair-share/?$", fair_share.FairShareView.as_view(), name="fair-share"),
    re_path(r"^clusters/?$", clusters.ClusterListView.as_view(), name="cluster-list"),
    re_path(r"^clusters/(?P<name>[-a-zA-Z0-9_]+)/?$", clusters.ClusterDetailView.as_view(), name="cluster-detail"),
    re_path(r"^clusters/(?P<name>[-a-zA-Z0-9_]+)/node-groups/(?P<group>[-a-z0-9]+)/?$",
            clusters.NodeGroupView.as_view(), name="cluster-node-group"),
    re_path(r"^bookings/?$", calendar.BookingListView.as_view(), name="booking-list"),
    re_path(r"^bookings/(?P<pk>[0-9]+)/?$", calendar.BookingDetailView.as_view(), name="booking-detail"),
    re_path(r"^maintenance/?$", calendar.MaintenanceListView.as_view(), name="maintenance-list"),
    re_path(r"^maintenance/(?P<pk>[0-9]+)/?$", calendar.MaintenanceDetailView.as_view(), name="maintenance-detail"),
    re_path(r"^calendar/?$", calendar.CalendarView.as_view(), name="calendar"),
    re_path(r"^approvals/?$", job_approvals.ApprovalListView.as_view(), name="approval-list"),
    re_path(r"^approvals/(?P<pk>[0-9]+)/approve/?$", job_approvals.ApprovalDecisionView.as_view(decision="approve"),
            name="approval-approve"),
    re_path(r"^approvals/(?P<pk>[0-9]+)/reject/?$", job_approvals.ApprovalDecisionView.as_view(decision="reject"),
            name="approval-reject"),
    re_path(r"^jobs/(?P<pk>[0-9]+)/cost/?$", job_approvals.JobCostView.as_view(), name="job-cost"),
    re_path(r"^jobs/(?P<pk>[0-9]+)/checkpoint-written/?$", notice.CheckpointWrittenView.as_view(),
            name="job-checkpoint-written"),
]
