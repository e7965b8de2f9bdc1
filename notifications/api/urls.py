"""Notifications endpoints (mounted under /api/v1/notifications). Trailing slashes optional."""

from django.urls import re_path

from notifications.api import views

urlpatterns = [
    re_path(r"^notifications/?$", views.NotificationListView.as_view(), name="notification-list"),
    re_path(r"^notifications/preferences/?$", views.PreferencesView.as_view(), name="notification-preferences"),
    re_path(r"^notifications/department/?$", views.DepartmentSettingsView.as_view(),
            name="notification-department"),
    re_path(r"^notifications/webhooks/?$", views.WebhookListView.as_view(), name="webhook-list"),
    re_path(r"^notifications/webhooks/(?P<pk>[0-9]+)/?$", views.WebhookDetailView.as_view(), name="webhook-detail"),
    re_path(r"^notifications/webhooks/(?P<pk>[0-9]+)/rotate/?$", views.WebhookRotateView.as_view(),
            name="webhook-rotate"),
]
