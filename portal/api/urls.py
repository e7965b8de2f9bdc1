"""The portal's own endpoints (mounted under /api/v1/): me, tokens. Trailing slashes optional."""

from django.urls import include, path
from rest_framework.routers import DefaultRouter

from portal.api import views

router = DefaultRouter()
router.trailing_slash = "/?"
router.include_root_view = False
router.register("tokens", views.TokenViewSet, basename="token")

urlpatterns = [
    path("", include(router.urls)),
    path("me", views.MeView.as_view(), name="me"),
]
