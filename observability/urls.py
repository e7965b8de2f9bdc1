"""Observability pages (mounted at /observability/, namespace ``observability``)."""

from django.urls import path

from observability import views

app_name = "observability"

urlpatterns = [
    path("efficiency/", views.efficiency_page, name="efficiency"),
    path("predictions/", views.predictions, name="predictions"),
]
