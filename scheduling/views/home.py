"""The home page, one per role: what a researcher needs first (my jobs and when they start, my department's
quota and budget, free GPUs), what a department admin adds (the department's jobs and the approvals
waiting), and the platform admin's board (utilisation, queue depth and waits per tier, spend against budget,
preemptions, idle GPUs). Every figure links to the page with its detail.

Charts read the stored time series (``ClusterSample``, ``DepartmentSample``), never every job's history; the
page costs a fixed number of queries (pinned by a test)."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.utils import timezone

from portal.tenancy import VIEW, member
from quotas import budgets
from quotas.models import Wallet
from scheduling.models import Job, JobState
from scheduling.selectors import (
    cluster_series,
    cluster_summary,
    department_series,
    pending_approvals,
    quota_use,
)

CHART_WINDOW = timedelta(hours=24)
LIVE = (JobState.PENDING_APPROVAL, JobState.QUEUED, JobState.ADMITTED, JobState.RUNNING)


@login_required
def home(request):
    m = member(request.user)
    now = timezone.now()
    since = now - CHART_WINDOW
    summary = cluster_summary()
    ctx = {
        "membership": m, "now": now,
        "my_jobs": list(Job.objects.restrict(request.user, VIEW).filter(owner=request.user, state__in=LIVE)
                        .select_related("flavor").order_by("estimated_start", "submitted_at", "id")[:10]),
        "quota": quota_use(department_id=m.department_id),
        "free": summary["flavors"],
        "wallet": None, "burn": None,
        "dept_series": department_series(user=request.user, department_id=m.department_id, since=since),
    }
    wallet = Wallet.objects.restrict(request.user, VIEW).filter(department_id=m.department_id).first()
    if wallet is not None:
        ctx["wallet"], ctx["burn"] = wallet, budgets.burn_rate(wallet=wallet, now=now)
    if m.is_department_admin:
        ctx["dept_jobs"] = list(
            Job.objects.restrict(request.user, VIEW).filter(department_id=m.department_id, state__in=LIVE)
            .exclude(owner=request.user).select_related("owner", "flavor").order_by("-submitted_at", "-id")[:10])
        # what this user may decide: their department's jobs, or for a platform admin every department's
        ctx["approvals"] = list(pending_approvals(request.user)[:10])
    if m.is_platform_admin:
        ctx["series"] = cluster_series(since=since)
        month = now.replace(day=1, hour=0, minute=0, second=0, microsecond=0)
        spend = budgets.spend_by_department(since=month)
        ctx["spend"] = [{"department": w.department.slug, "spent": spend.get(w.department_id, 0),
                         "available": w.available}
                        for w in Wallet.objects.restrict(request.user, VIEW).select_related("department")
                        .order_by("department__slug")]
        ctx["queued_now"] = {t: n for t, n in _queued_by_tier(request.user).items()}
    ctx["charts"] = _charts(ctx)
    return render(request, "scheduling/home.html", ctx)


def _line(series_of: dict, series: dict[str, list], **extra) -> dict:
    """A line chart over the sample times of ``series_of`` (a time axis: a gap in the samples is a gap)."""
    return {"type": "line", "labels": series_of["labels"], "times": series_of["times"],
            "datasets": [{"label": name, "data": data} for name, data in series.items()], **extra}


def _dept_lines(d: dict) -> dict[str, list]:
    """The department chart's lines: held and nominal per GPU type, borrowed and lent where there were any."""
    lines = {}
    for flavor, s in d["by_flavor"].items():
        lines[f"held · {flavor}"] = s["busy"]
        lines[f"nominal · {flavor}"] = s["nominal"]
        for key in ("borrowed", "lent"):
            if any(s[key]):
                lines[f"{key} · {flavor}"] = s[key]
    return lines


def _charts(ctx) -> dict:
    """What each chart plots, as plain data (rendered with json_script, drawn by charts.js)."""
    d = ctx["dept_series"]
    charts = {"dept": _line(d, _dept_lines(d), samples=d["samples"], unit="GPUs")}
    charts["quota"] = {"type": "bar", "labels": [r["flavor"] or "?" for r in ctx["quota"]], "datasets": [
        {"label": name, "data": [r[key] for r in ctx["quota"]]}
        for name, key in (("nominal", "nominal"), ("held", "busy"), ("borrowed", "borrowed"), ("lent", "lent"))],
        "samples": len(ctx["quota"])}
    if "series" in ctx:
        c = ctx["series"]
        charts["util"] = _line(c, {"busy GPUs (% of all)": c["utilisation"]}, samples=c["samples"],
                               unit="%")
        charts["queue"] = _line(c, {f"{t}": v for t, v in c["queued"].items()}, samples=c["samples"])
        charts["waits"] = {"type": "bar", "labels": c["wait_bins"], "samples": sum(sum(v) for v in c["waits"].values()),
                           "datasets": [{"label": t, "data": v} for t, v in c["waits"].items()]}
        charts["preempt"] = {"type": "bar", "labels": c["labels"], "times": c["times"], "samples": c["samples"],
                             "datasets": [{"label": "preempted jobs", "data": c["preemptions"]}]}
        charts["idle"] = _line(c, {"idle GPUs": c["free"]}, samples=c["samples"])
        charts["spend"] = {"type": "bar", "labels": [r["department"] for r in ctx["spend"]], "unit": "credits",
                           "samples": len(ctx["spend"]), "datasets": [
                               {"label": "spent this month", "data": [r["spent"] / 1000 for r in ctx["spend"]]},
                               {"label": "available", "data": [r["available"] / 1000 for r in ctx["spend"]]}]}
    return charts


def _queued_by_tier(user) -> dict[str, int]:
    from django.db.models import Count

    return dict(Job.objects.restrict(user, VIEW).filter(state=JobState.QUEUED).values_list("tier")
                .annotate(n=Count("id")).order_by())
