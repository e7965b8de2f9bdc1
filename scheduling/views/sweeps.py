"""Sweep pages: an array with its tasks by state (cancel all or the waiting ones, hold, release), and holding
or releasing one job. Over the same services as the API, through the same tenancy gate."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import redirect, render
from django.views.decorators.http import require_POST

from portal.errors import PortalError
from portal.tenancy import CHANGE, VIEW, member, permits
from scheduling.models import Job, JobArray, JobState
from scheduling.selectors import jobs_for
from scheduling.services.sweeps import array_cancel, array_counts, array_hold, job_hold, job_release


@login_required
def array_detail(request, pk: int):
    member(request.user)
    array = JobArray.objects.select_related("owner", "department").get_or_404(request.user, VIEW, pk=pk)
    counts = array_counts([array.pk])[array.pk]
    state = request.GET.get("state", "")
    tasks = jobs_for(request.user, {"array": str(array.pk), **({"state": state} if state else {})})
    page = Paginator(tasks, 100).get_page(request.GET.get("page"))
    return render(request, "scheduling/array.html", {
        "array": array, "page": page, "filter_state": state, "can_manage": permits(request.user, array, CHANGE),
        "states": [(v, label, counts[v]) for v, label in JobState.choices if counts[v]],
        "open": sum(n for s, n in counts.items() if s not in ("succeeded", "failed", "cancelled")),
        "dependents": Job.objects.restrict(request.user, VIEW).filter(dependencies__on_array=array).distinct()
        .only("id", "name", "state").order_by("id")[:50],
    })


@login_required
@require_POST
def array_action(request, pk: int, verb: str):
    array = JobArray.objects.get_or_404(request.user, CHANGE, pk=pk,
                                        message="Only the array's owner and its department's admins can change it.")
    try:
        if verb in ("cancel", "cancel-waiting"):
            n = array_cancel(user=request.user, array=array, waiting_only=verb == "cancel-waiting",
                             comment=request.POST.get("comment", ""))
            messages.success(request, f"Cancelled {n} task{'s' if n != 1 else ''}.")
        elif verb in ("hold", "release"):
            n = array_hold(user=request.user, array=array, release=verb == "release")
            messages.success(request, f"{'Released' if verb == 'release' else 'Held'} {n} task{'s' if n != 1 else ''}.")
    except PortalError as exc:
        messages.error(request, exc.message)
    return redirect("dashboard:array", pk=pk)


@login_required
@require_POST
def hold_or_release(request, pk: int, verb: str):
    job = Job.objects.get_or_404(request.user, CHANGE, pk=pk,
                                 message="Only the job's owner and its department's admins can hold or release it.")
    try:
        (job_release if verb == "release" else job_hold)(user=request.user, job=job)
    except PortalError as exc:  # it started meanwhile: said on the job's page
        messages.error(request, exc.message)
    return redirect("dashboard:job", pk=pk)
