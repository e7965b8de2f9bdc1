"""Notification pages (mounted under /notifications/, namespace ``notifications``)."""

from django.urls import path

from notifications import views

app_name = "notifications"

urlpatterns = [
    path("", views.preferences_page, name="preferences"),
    path("unsubscribe/<str:token>/", views.unsubscribe, name="unsubscribe"),
]
