"""URLconf. Everything requires authentication except PUBLIC_URL_NAMES (checked by a test that walks it)."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView
from rest_framework.routers import DefaultRouter

from portal import metrics as portal_metrics
from portal import views as portal_views
from quotas.api import views as quota_views
from scheduling.api import policy as policy_views
from scheduling.api import views as job_views

router = DefaultRouter()
router.trailing_slash = "/?"  # /api/v1/jobs and /api/v1/jobs/ both work (notebook users type either)
router.include_root_view = False
router.register("jobs", job_views.JobViewSet, basename="job")
router.register("departments", portal_views.DepartmentViewSet, basename="department")
router.register("flavors", quota_views.FlavorViewSet, basename="flavor")
router.register("quotas", quota_views.QuotaViewSet, basename="quota")
router.register("tokens", portal_views.TokenViewSet, basename="token")

api_v1 = [
    path("", include(router.urls)),
    path("me", portal_views.MeView.as_view(), name="me"),
    path("policy", policy_views.PolicyView.as_view(), name="policy"),
    path("policy/versions", policy_views.PolicyVersionsView.as_view(), name="policy-versions"),
    path("cluster", policy_views.ClusterView.as_view(), name="cluster"),
    path("", include("quotas.api.urls")),
]

# Reachable without logging in. Everything else answers 401/403 or redirects to the login page.
PUBLIC_URL_NAMES = {"healthz", "readyz", "login", "schema", "swagger-ui", "redoc",
                    "prometheus-django-metrics"}

urlpatterns = [
    path("healthz", portal_views.healthz, name="healthz"),
    path("readyz", portal_views.readyz, name="readyz"),
    path("login/", auth_views.LoginView.as_view(template_name="login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("api/v1/", include((api_v1, "api"), namespace="v1")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    path("admin/", admin.site.urls),
    path("metrics", portal_metrics.metrics_view, name="prometheus-django-metrics"),
    path("budgets/", include(("quotas.dashboard", "budgets"), namespace="budgets")),
    path("", include(("portal.dashboard", "dashboard"), namespace="dashboard")),
]

handler400 = "portal.views.bad_request"
handler403 = "portal.views.permission_denied"
handler404 = "portal.views.page_not_found"
handler500 = "portal.views.server_error"
