"""The lab pages (mounted under /lab/, namespace ``lab``)."""

from django.urls import path

from lab import limit_pages, quota_pages, team_pages, views, workload_pages

app_name = "lab"

urlpatterns = [
    path("", views.home, name="home"),
    path("departments/<slug:slug>/", views.department, name="department"),
    path("departments/<slug:slug>/members/<str:username>", views.member_change, name="member_change"),
    path("departments/<slug:slug>/members/<str:username>/remove", views.member_remove, name="member_remove"),
    path("departments/<slug:slug>/members/<str:username>/invite", views.member_invite, name="member_invite"),
    path("departments/<slug:slug>/archive", views.archive, name="archive"),
    path("departments/<slug:slug>/restore", views.restore, name="restore"),
    path("departments/<slug:slug>/quota", quota_pages.quota, name="quota"),
    path("departments/<slug:slug>/limits", limit_pages.limits, name="limits"),
    path("departments/<slug:slug>/teams", team_pages.teams, name="teams"),
    path("quota-requests/", views.quota_requests, name="quota_requests"),
    path("quota-requests/<int:pk>/approve", views.quota_request_approve, name="quota_request_approve"),
    path("quota-requests/<int:pk>/reject", views.quota_request_reject, name="quota_request_reject"),
    path("flavors/", views.flavors, name="flavors"),
    path("flavors/<str:name>/delete", views.flavor_delete, name="flavor_delete"),
    path("clusters/", views.clusters, name="clusters"),
    path("secrets/", workload_pages.secrets, name="secrets"),
    path("secrets/<slug:slug>/<str:name>/rotate", workload_pages.secret_rotate, name="secret_rotate"),
    path("secrets/<slug:slug>/<str:name>/delete", workload_pages.secret_delete, name="secret_delete"),
    path("data-sources/", workload_pages.data_sources, name="data_sources"),
    path("data-sources/<int:pk>/delete", workload_pages.data_source_delete, name="data_source_delete"),
    path("clusters/<str:name>/node-groups/<str:group>/delete", views.node_group_delete, name="node_group_delete"),
]
