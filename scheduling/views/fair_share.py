"""The fair-share page (``/fair-share/``): each department's statement as ``GET /api/v1/fair-share`` gives it,
your own department's (every department's for a platform admin)."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.shortcuts import render

from portal.tenancy import member
from scheduling.services.fair_share import statements_for


@login_required
def fair_share(request):
    m = member(request.user)
    return render(request, "scheduling/fair_share.html",
                  {"membership": m, "statements": statements_for(user=request.user)})
