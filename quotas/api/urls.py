"""Budget, price, report and approval endpoints (mounted under /api/v1/)."""

urlpatterns: list = []
