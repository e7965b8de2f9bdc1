"""The workloads endpoints (mounted under /api/v1/). Trailing slashes optional."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from workloads.api import views

router = DefaultRouter()
router.trailing_slash = "/?"
router.include_root_view = False
router.register("data-sources", views.DataSourceViewSet, basename="data-source")

urlpatterns: list = [path("", include(router.urls))]
