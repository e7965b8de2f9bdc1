"""The workloads endpoints (mounted under /api/v1/). Trailing slashes optional."""

from django.urls import re_path

from workloads.api import views

urlpatterns: list = [
    re_path(r"^secrets/?$", views.SecretListView.as_view(), name="secret-list"),
    re_path(r"^secrets/(?P<name>[a-z0-9-]{1,40})/?$", views.SecretDetailView.as_view(), name="secret-detail"),
]
