"""The approvals inbox (mounted at /budgets/approvals/, namespace ``budgets``, by scheduling/budget_urls.py): the jobs waiting for a
department admin, and the decision on each (approve: queued; reject: cancelled), through
``scheduling.services.job_approvals``. Another department's job is a 404, a member without the role a 403."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.errors import PortalError
from portal.forms import refusal_text
from portal.tenancy import APPROVE, require_role
from quotas import budgets
from scheduling.models import Job
from scheduling.selectors import pending_approvals
from scheduling.services import job_approvals


@login_required
def approvals(request):
    m = require_role(request.user, APPROVE, "Only department admins have an approvals inbox.")
    jobs = list(pending_approvals(request.user))
    for job in jobs:
        job.estimated_cost = budgets.estimated_cost(job=job)
    return render(request, "scheduling/job_approvals.html", {"membership": m, "jobs": jobs})


def _decide(request, pk: int, decision: str):
    job = Job.objects.select_related("department", "owner").get_or_404(
        request.user, APPROVE, pk=pk,
        message="Only a department admin of the job's department can approve or reject it.")
    comment = request.POST.get("comment", "").strip()
    try:
        if decision == "approve":
            job_approvals.job_approve(user=request.user, job=job, comment=comment)
            messages.success(request, f"Job {job.pk} approved.")
        else:
            job_approvals.job_reject(user=request.user, job=job, comment=comment)
            messages.success(request, f"Job {job.pk} rejected.")
    except PortalError as exc:
        messages.error(request, refusal_text(exc))
    return redirect("budgets:approvals")


@login_required
@require_POST
def approve(request, pk: int):
    return _decide(request, pk, "approve")


@login_required
@require_POST
def reject(request, pk: int):
    return _decide(request, pk, "reject")
