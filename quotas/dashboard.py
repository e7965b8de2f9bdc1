"""Dashboard pages for budgets and approvals (mounted under /budgets/)."""

app_name = "budgets"
urlpatterns: list = []
