"""Observability pages: GPU efficiency by week (every member) and the right-sizing accuracy page (platform
admins)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from observability.selectors import efficiency_rows, prediction_outcomes
from observability.services.rightsizing import prediction_errors
from portal.tenancy import ADMIN, member, require_role


@login_required
def predictions(request):
    require_role(request.user, ADMIN)
    outcomes = prediction_outcomes(user=request.user)
    return render(request, "observability/predictions.html",
                  {"outcomes": outcomes[:50], "errors": prediction_errors(outcomes)})


@login_required
def efficiency_page(request):
    """GPU efficiency by week, per member and per department: a member sees their own department's, a platform
    admin every department's (the same rows as ``GET /api/v1/efficiency``)."""
    m = member(request.user)
    weeks = 8
    return render(request, "observability/efficiency.html", {
        "membership": m, "weeks": weeks,
        "by_department": efficiency_rows(user=request.user, group_by="department", weeks=weeks),
        "by_user": efficiency_rows(user=request.user, group_by="user", weeks=weeks),
    })
