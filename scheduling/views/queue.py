"""The whole queue page (``/queue/``): every department's queued jobs, each flavor's in the engine's order, as
every member may see them: the rows of ``scheduling.api.queue.queue_row``, the same as the API's."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.shortcuts import render
from django.utils import timezone

from portal.tenancy import member
from quotas.models import Flavor
from scheduling.api.queue import queue_row
from scheduling.selectors import whole_queue

PAGE_SIZE = 100


@login_required
def queue(request):
    m = member(request.user)
    flavors = list(Flavor.objects.order_by("name").values_list("name", flat=True))
    flavor = request.GET.get("flavor") or ""
    status, error = 200, ""
    if flavor and flavor not in flavors:
        status, error, flavor = 400, f"No flavor {flavor}: showing every flavor's queue.", ""
    page = Paginator(whole_queue(flavor=flavor or None), PAGE_SIZE).get_page(request.GET.get("page"))
    now = timezone.now()
    rows = [queue_row(job, user=request.user, now=now) for job in page.object_list]
    for row in rows:  # estimates are on the wall clock already (the snapshot plans in wall-clock seconds)
        row["eta"], row["waiting_min"] = row["estimated_start"], row["waiting_s"] // 60
    return render(request, "scheduling/queue.html", {
        "membership": m, "page": page, "rows": rows, "flavors": flavors, "flavor": flavor, "error": error,
    }, status=status)
