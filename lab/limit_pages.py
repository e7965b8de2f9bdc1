"""The per-user limits page of a department (``/lab/departments/<slug>/limits``), for its admins: the limit of
every member, what each holds and has waiting now, and forms to set or remove a member's limit or the
department's. Each form is read by the API's serializer and applied by the same service
(``quotas.services.user_limits``), so the page accepts exactly what the API does."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.db.models import Count, Q, Sum
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods

from portal.forms import form_payload, render_form, submit_form
from portal.models import Department, Membership
from portal.tenancy import CHANGE, member
from quotas.api.user_limits import ADMINS_ONLY, UserLimitSerializer
from quotas.models import UserLimit
from quotas.services import user_limits
from scheduling.models import ACTIVE_STATES, TOTAL_GPUS, Job
from scheduling.services.jobs import WAITING_STATES

FIELDS = ("max_gpus", "max_queued")


def _rows(dept: Department) -> tuple[UserLimit | None, list[dict]]:
    """The department's limit for every member, and each member with their own limit, the one in force, the
    GPUs they hold and the jobs they have waiting (three queries)."""
    limits = {x.user_id: x for x in UserLimit.objects.filter(department=dept)}
    default = limits.get(None)
    use = {row["owner_id"]: row for row in Job.objects.filter(department=dept).values("owner_id").annotate(
        held=Sum(TOTAL_GPUS, filter=Q(state__in=ACTIVE_STATES)),
        waiting=Count("id", filter=Q(state__in=WAITING_STATES))).order_by()}
    rows = []
    for m in Membership.objects.filter(department=dept).select_related("user").order_by("user__username"):
        own = limits.get(m.user_id)
        rows.append({"user": m.user.username, "own": own, "in_force": own or default,
                     "held": (use.get(m.user_id) or {}).get("held") or 0,
                     "waiting": (use.get(m.user_id) or {}).get("waiting") or 0})
    return default, rows


@login_required
@require_http_methods(["GET", "POST"])
def limits(request, slug: str):
    dept = Department.objects.get_or_404(request.user, CHANGE, slug=slug, message=ADMINS_ONLY)
    m = member(request.user)
    errors: dict = {}
    values = request.POST.dict() if request.method == "POST" else {}
    if request.method == "POST":
        username = request.POST.get("user", "").strip()
        target = Membership.objects.filter(department=dept, user__username=username).select_related("user").first()
        if username and target is None:
            errors = {"user": [f"{username} is not a member of {slug}."]}
        elif request.POST.get("action") == "remove":
            user_limits.user_limit_delete(department=dept, user=target.user if target else None, actor=request.user)
            messages.success(request, f"Limit of {username or 'every member'} removed.")
        else:
            def apply(data):
                user_limits.user_limit_set(department=dept, user=target.user if target else None,
                                           actor=request.user, **data)
                messages.success(request, f"Limit of {username or 'every member'} set.")

            errors = submit_form(UserLimitSerializer, form_payload(request.POST, FIELDS, integers=FIELDS,
                                                                   nullable=("max_queued",)), apply)
        if not errors:
            return redirect("lab:limits", slug=slug)
    default, rows = _rows(dept)
    return render_form(request, "lab/user_limits.html", {
        "membership": m, "department": dept, "default": default, "rows": rows, "values": values}, errors)

