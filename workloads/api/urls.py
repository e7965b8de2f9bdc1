"""The workloads endpoints (mounted under /api/v1/): data sources and department secrets. Trailing slashes
optional."""

from django.urls import include, path, re_path

from portal.api.routers import Router
from workloads.api import secrets, sources

router = Router()
router.register("data-sources", sources.DataSourceViewSet, basename="data-source")

urlpatterns: list = [
    path("", include(router.urls)),
    re_path(r"^secrets/?$", secrets.SecretListView.as_view(), name="secret-list"),
    re_path(r"^secrets/(?P<name>[a-z0-9-]{1,40})/?$", secrets.SecretDetailView.as_view(), name="secret-detail"),
]
