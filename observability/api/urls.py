"""Observability endpoints (mounted under /api/v1/)."""

from django.urls import path

from observability.api import views

urlpatterns = [
    path("jobs/<int:pk>/gpu-usage", views.JobGpuUsageView.as_view(), name="job-gpu-usage"),
    path("efficiency", views.EfficiencyView.as_view(), name="efficiency"),
    path("recommendations", views.RecommendationView.as_view(), name="recommendations"),
]
