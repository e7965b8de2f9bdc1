"""Observability pages: the right-sizing accuracy page (platform admins)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from observability.selectors import prediction_outcomes
from observability.services.rightsizing import prediction_errors
from portal.tenancy import ADMIN, require_role


@login_required
def predictions(request):
    require_role(request.user, ADMIN)
    outcomes = prediction_outcomes(user=request.user)
    return render(request, "observability/predictions.html",
                  {"outcomes": outcomes[:50], "errors": prediction_errors(outcomes)})
