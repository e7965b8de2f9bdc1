"""URLconf. Everything requires authentication except PUBLIC_URL_NAMES (checked by a test that walks it)."""

from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic.base import RedirectView
from drf_spectacular.views import SpectacularAPIView, SpectacularRedocView, SpectacularSwaggerView

from portal import metrics as portal_metrics
from portal import sso
from portal import views as portal_views
from portal.accounts import SetPasswordView

# Each app's API under /api/v1/ (one namespace, "v1"), each app's pages under its own namespace.
api_v1 = [
    path("", include("scheduling.api.urls")),
    path("", include("portal.api.urls")),
    path("", include("lab.api.urls")),
    path("", include("quotas.api.urls")),
    path("", include("workloads.api.urls")),
    path("", include("observability.api.urls")),
    path("", include("notifications.api.urls")),
]

# Reachable without logging in. Everything else answers 401/403 or redirects to the login page.
PUBLIC_URL_NAMES = {"healthz", "readyz", "login", "schema", "swagger-ui", "redoc",
                    "prometheus-django-metrics", "favicon", "oidc_authentication_init",
                    "oidc_authentication_callback",
                    "unsubscribe",  # an e-mail's unsubscribe link: its signed token is the credential
                    "set_password"}  # an invitation's link: Django's one-time password-reset token is the credential

urlpatterns = [
    path("healthz", portal_views.healthz, name="healthz"),
    # browsers ask for /favicon.ico whatever the page says
    path("favicon.ico", RedirectView.as_view(url=static("portal/favicon.svg"), permanent=True), name="favicon"),
    path("readyz", portal_views.readyz, name="readyz"),
    path("login/", auth_views.LoginView.as_view(template_name="portal/login.html"), name="login"),
    path("accounts/set-password/<uidb64>/<token>/", SetPasswordView.as_view(), name="set_password"),
    path("logout/", sso.logout, name="logout"),  # and out of the identity provider (portal/sso.py)
    # Single sign-on (portal/sso.py): 404 unless configured.
    path("oidc/authenticate/", sso.start, name="oidc_authentication_init"),
    path("oidc/callback/", sso.callback, name="oidc_authentication_callback"),
    path("api/v1/", include((api_v1, "api"), namespace="v1")),
    path("api/schema/", SpectacularAPIView.as_view(), name="schema"),
    path("api/docs/", SpectacularSwaggerView.as_view(url_name="schema"), name="swagger-ui"),
    path("api/redoc/", SpectacularRedocView.as_view(url_name="schema"), name="redoc"),
    path("admin/", admin.site.urls),
    path("metrics", portal_metrics.metrics_view, name="prometheus-django-metrics"),
    path("tokens/", portal_views.tokens, name="tokens"),
    path("tokens/<int:pk>/revoke", portal_views.token_revoke, name="token-revoke"),
    # quotas' budget pages with scheduling's approvals inbox beside them (composed in scheduling, the app above)
    path("budgets/", include("scheduling.budget_urls", namespace="budgets")),
    path("observability/", include("observability.urls", namespace="observability")),
    path("notifications/", include("notifications.urls", namespace="notifications")),
    path("lab/", include("lab.urls", namespace="lab")),
    path("", include("scheduling.urls", namespace="dashboard")),
]

handler400 = "portal.views.bad_request"
handler403 = "portal.views.permission_denied"
handler404 = "portal.views.page_not_found"
handler500 = "portal.views.server_error"
