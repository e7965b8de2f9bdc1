"""The lab's endpoints (mounted under /api/v1/): departments and their members. Trailing slashes optional."""

from django.urls import include, path, re_path

from lab.api import views
from portal.api.routers import Router

router = Router()
router.register("departments", views.DepartmentViewSet, basename="department")

urlpatterns = [
    path("", include(router.urls)),
    re_path(r"^departments/(?P<slug>[a-z0-9-]+)/members/?$", views.MemberListView.as_view(), name="member-list"),
    re_path(r"^departments/(?P<slug>[a-z0-9-]+)/members/(?P<username>[\w.@+-]+)/?$",
            views.MemberDetailView.as_view(), name="member-detail"),
]
