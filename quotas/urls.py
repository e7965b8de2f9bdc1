"""The budget pages (mounted under /budgets/, namespace ``budgets``, by scheduling/budget_urls.py, which puts
scheduling's approvals inbox, /budgets/approvals/, before them)."""

from django.urls import path

from quotas import views

app_name = "budgets"

urlpatterns = [
    path("", views.wallets, name="wallets"),
    path("prices/", views.prices, name="prices"),
    path("prices/<int:pk>/delete", views.price_delete, name="price_delete"),
    path("allowances/", views.allowances, name="allowances"),
    path("allowances/<str:username>/delete", views.allowance_delete, name="allowance_delete"),
    path("<slug:slug>/", views.wallet, name="wallet"),
    path("<slug:slug>/adjust", views.adjust, name="adjust"),
    path("<slug:slug>/refill-rule", views.refill_rule, name="refill_rule"),
    path("<slug:slug>/refill-rule/delete", views.refill_rule_delete, name="refill_rule_delete"),
    path("<slug:slug>/approval-rule", views.approval_rule, name="approval_rule"),
]
