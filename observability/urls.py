"""Observability pages (mounted at /observability/, namespace ``observability``)."""

from django.urls import path

from observability import views

app_name = "observability"

urlpatterns = [
    path("predictions/", views.predictions, name="predictions"),
]
