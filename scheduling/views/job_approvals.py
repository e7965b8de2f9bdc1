"""The approvals inbox (mounted at /budgets/approvals/, namespace ``budgets``, by scheduling/budget_urls.py): the jobs waiting for a
department admin, and the decision on each (approve: queued; reject: cancelled), through
``scheduling.services.job_approvals``. Another department's job is a 404, a member without the role a 403."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.errors import PortalError
from portal.forms import refusal_text
from portal.tenancy import APPROVE, member, require_role
from quotas import budgets
from scheduling.selectors import approvable_job, approving_team, pending_approvals
from scheduling.services import job_approvals


@login_required
def approvals(request):
    if approving_team(request.user) is None:  # (a team admin's inbox: their team's jobs)
        require_role(request.user, APPROVE, "Only department admins and team admins have an approvals inbox.")
    m = member(request.user)
    # A page at a time, priced from one read of the price list: the whole inbox, each job's price read on its
    # own, was 1,400 queries and 15 s for a platform admin with 1,500 jobs waiting.
    page = Paginator(pending_approvals(request.user), 50).get_page(request.GET.get("page"))
    prices = budgets.read_prices()
    for job in page.object_list:
        job.estimated_cost = budgets.estimated_cost(job=job, prices=prices)
    return render(request, "scheduling/job_approvals.html", {"membership": m, "jobs": page, "page": page})


def _decide(request, pk: int, decision: str):
    job = approvable_job(request.user, pk, message="Only a department admin of the job's department (or a team "
                                                   "admin of its team) can approve or reject it.")
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
