"""Dashboard pages for budgets and approvals (mounted under /budgets/, namespace ``budgets``).

Server-rendered over the same services and selectors as the API: wallets_for/ledger_for scope every read
(another department's wallet is a 404), job_approve/job_reject decide."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import path
from django.utils import timezone
from django.views.decorators.http import require_POST

from portal.errors import PortalError
from portal.tenancy import member_or_404
from quotas import services
from quotas.api.budgets import pending_approvals
from quotas.models import ApprovalRule, Price, RefillRule

app_name = "budgets"


_member = member_or_404


@login_required
def wallets(request):
    """Platform admins: every wallet. Members: straight to their department's wallet."""
    m = _member(request)
    if not m.is_platform_admin:
        return redirect("budgets:wallet", slug=m.department.slug)
    rows = [(w, services.burn_rate(wallet=w)) for w in services.wallets_for(request.user).order_by("department__slug")]
    return render(request, "budgets/wallets.html", {"membership": m, "rows": rows,
                                                    "prices": Price.objects.select_related("flavor")})


@login_required
def wallet(request, slug: str):
    m = _member(request)
    w = services.wallets_for(request.user).filter(department__slug=slug).first()
    if w is None:
        raise Http404("No such wallet.")
    month = timezone.localdate().replace(day=1)
    since, _ = services.month_bounds(month)
    return render(request, "budgets/wallet.html", {
        "membership": m, "wallet": w, "burn": services.burn_rate(wallet=w),
        "holds": services.open_holds(wallet=w),
        "entries": services.ledger_for(request.user).filter(wallet=w).order_by("-created_at", "-id")[:30],
        "usage": services.usage_report(user=request.user, group_by=["user", "flavor"], period="month",
                                       since=since, department=slug),
        "refill_rule": RefillRule.objects.filter(department=w.department).first(),
        "approval_rule": ApprovalRule.objects.filter(department=w.department).first(),
        "is_admin": m.is_department_admin,
    })


@login_required
def approvals(request):
    m = _member(request)
    if not m.is_department_admin:
        raise Http404("Only department admins have an approvals inbox.")
    jobs = list(pending_approvals(request.user))
    for job in jobs:
        job.estimated_cost = services.estimated_cost(job=job)
    return render(request, "budgets/approvals.html", {"membership": m, "jobs": jobs})


def _decide(request, pk: int, decision: str):
    from scheduling.models import Job

    _member(request)
    job = Job.objects.for_user(request.user).select_related("department", "owner").filter(pk=pk).first()
    if job is None:
        raise Http404("No such job.")
    comment = request.POST.get("comment", "").strip()
    try:
        if decision == "approve":
            services.job_approve(user=request.user, job=job, comment=comment)
            messages.success(request, f"Job {job.pk} approved.")
        else:
            services.job_reject(user=request.user, job=job, comment=comment)
            messages.success(request, f"Job {job.pk} rejected.")
    except PortalError as exc:
        detail = "; ".join(i["message"] for items in exc.fields.values() for i in items)
        messages.error(request, f"{exc.message} {detail}".strip())
    return redirect("budgets:approvals")


@login_required
@require_POST
def approve(request, pk: int):
    return _decide(request, pk, "approve")


@login_required
@require_POST
def reject(request, pk: int):
    return _decide(request, pk, "reject")


urlpatterns = [
    path("", wallets, name="wallets"),
    path("approvals/", approvals, name="approvals"),
    path("approvals/<int:pk>/approve", approve, name="approve"),
    path("approvals/<int:pk>/reject", reject, name="reject"),
    path("<slug:slug>/", wallet, name="wallet"),
]
