"""The workloads endpoints (mounted under /api/v1/). Trailing slashes optional."""

urlpatterns: list = []
