"""The portal's own endpoints (mounted under /api/v1/): me, tokens. Trailing slashes optional."""

from django.urls import include, path

from portal.api import views
from portal.api.routers import Router

router = Router()
router.register("tokens", views.TokenViewSet, basename="token")

urlpatterns = [
    path("", include(router.urls)),
    path("me", views.MeView.as_view(), name="me"),
]
