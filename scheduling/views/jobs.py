"""The dashboard shell: server-rendered pages over the same services and selectors as the API."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Prefetch
from django.http import Http404
from django.shortcuts import redirect, render
from django.urls import path
from django.views.decorators.http import require_http_methods, require_POST

from portal.errors import PortalError
from portal.tenancy import can_manage_job, member_or_404
from quotas.models import Flavor
from scheduling.api.serializers import JobSubmitSerializer
from scheduling.models import Job, JobEvent, JobState, TaskType, Tier, Urgency
from scheduling.selectors import jobs_for, queue_position
from scheduling.services.jobs import job_cancel, job_submit

app_name = "dashboard"


_member = member_or_404


@login_required
def jobs(request):
    m = _member(request)
    qs = jobs_for(request.user, request.GET)
    page = Paginator(qs, 50).get_page(request.GET.get("page"))
    counts = {s: 0 for s in JobState.values}
    for state in Job.objects.for_user(request.user).values_list("state", flat=True):
        counts[state] += 1
    return render(request, "dashboard/jobs.html", {
        "page": page, "membership": m, "states": [(v, label, counts[v]) for v, label in JobState.choices],
        "filter_state": request.GET.get("state", ""), "mine": request.GET.get("mine", ""),
    })


FORM_FIELDS = ("name", "image", "flavor", "gpus", "pods", "cpu", "memory", "tier", "urgency", "task_type",
               "deadline", "max_runtime_s", "checkpoint_interval_s", "bid")
INT_FIELDS = ("gpus", "pods", "max_runtime_s", "checkpoint_interval_s", "bid")


def _form_to_payload(post) -> tuple[dict, dict]:
    """Turn the HTML form into the API's JSON payload; values that are not numbers stay strings so that the
    serializer reports them exactly as the API would."""
    payload: dict = {}
    errors: dict = {}
    for name in FORM_FIELDS:
        raw = post.get(name, "").strip()
        if raw == "":
            continue
        if name in INT_FIELDS:
            try:
                payload[name] = int(raw)
            except ValueError:
                payload[name] = raw
        else:
            payload[name] = raw
    command = post.get("command", "").strip()
    if command:
        try:
            parsed = json.loads(command) if command.startswith("[") else ["/bin/sh", "-c", command]
            payload["command"] = parsed
        except json.JSONDecodeError:
            errors["command"] = ['A JSON list like ["python", "train.py"] or a shell command line.']
    else:
        payload["command"] = []
    env_lines = [line.strip() for line in post.get("env", "").splitlines() if line.strip()]
    env = {}
    for line in env_lines:
        if "=" not in line:
            errors.setdefault("env", []).append(f"{line!r}: use NAME=value, one per line.")
        else:
            k, v = line.split("=", 1)
            env[k.strip()] = v
    if env:
        payload["env"] = env
    return payload, errors


@login_required
@require_http_methods(["GET", "POST"])
def submit(request):
    m = _member(request)
    errors: dict = {}
    values = request.POST if request.method == "POST" else {}
    if request.method == "POST":
        payload, errors = _form_to_payload(request.POST)
        serializer = JobSubmitSerializer(data=payload)
        try:
            valid = serializer.is_valid()
            if not valid:
                errors.update({k: [str(e) for e in v] for k, v in serializer.errors.items()})
            if valid and not errors:
                job, _ = job_submit(user=request.user, data=serializer.validated_data,
                                    idempotency_key=request.POST.get("idempotency_key") or None)
                return redirect("dashboard:job", pk=job.pk)
        except PortalError as exc:
            for field, items in (exc.fields or {"non_field_errors": [{"message": exc.message}]}).items():
                errors.setdefault(field, []).extend(i["message"] for i in items)
    import uuid

    return render(request, "dashboard/submit.html", {
        "membership": m, "flavors": Flavor.objects.order_by("name"), "tiers": Tier.choices,
        "urgencies": Urgency.choices, "task_types": TaskType.choices, "errors": errors, "values": values,
        "idempotency_key": request.POST.get("idempotency_key") or uuid.uuid4().hex,
    }, status=400 if errors else 200)


@login_required
def job_detail(request, pk: int):
    _member(request)
    job = (
        Job.objects.for_user(request.user)
        .select_related("owner", "department", "flavor", "cluster")
        .prefetch_related(Prefetch("events", JobEvent.objects.select_related("actor")))
        .filter(pk=pk)
        .first()
    )
    if job is None:
        raise Http404("No such job.")
    return render(request, "dashboard/job.html", {
        "job": job, "events": job.events.all(), "can_manage": can_manage_job(request.user, job),
        "queue_position": queue_position(job=job),
    })


@login_required
@require_POST
def cancel(request, pk: int):
    job = Job.objects.for_user(request.user).filter(pk=pk).first()
    if job is None:
        raise Http404("No such job.")
    try:
        job_cancel(user=request.user, job=job, comment=request.POST.get("comment", ""))
    except PortalError as exc:
        from django.contrib import messages

        messages.error(request, exc.message)
    return redirect("dashboard:job", pk=pk)


@login_required
def cluster(request):
    m = _member(request)
    from scheduling.api.policy import cluster_summary

    data = cluster_summary()
    return render(request, "dashboard/cluster.html", {"summary": data, "membership": m,
                                                      "show_nodes": m.is_platform_admin})


def _policy_from_text(text: str) -> tuple[dict | None, dict]:
    """The policy editor's textarea -> (document, errors); the codec validates it afterwards."""
    try:
        data = json.loads(text)
    except ValueError as exc:
        return None, {"policy": [f"Not valid JSON: {exc}"]}
    if not isinstance(data, dict):
        return None, {"policy": ["Not valid JSON: the policy must be a JSON object."]}
    return data, {}


@login_required
@require_http_methods(["GET", "POST"])
def policy(request):
    """Everyone sees the weights; platform admins edit the whole policy (validated, versioned, audited)."""
    from scheduling.core.types import URGENCIES, USER_TIERS
    from scheduling.models import PolicyVersion
    from scheduling.services.policy import current_policy, policy_as_dict, policy_update

    m = _member(request)
    errors: dict = {}
    text, comment = None, ""
    if request.method == "POST":
        if not m.is_platform_admin:
            raise Http404("Only platform admins change the policy.")
        text, comment = request.POST.get("policy", ""), request.POST.get("comment", "")
        data, errors = _policy_from_text(text)
        if not errors:
            try:
                policy_update(user=request.user, data=data, comment=comment)
                from django.contrib import messages

                messages.success(request, "Saved. The next admission cycle uses it.")
                request.session.pop(WHATIF_SESSION_KEY, None)
                return redirect("dashboard:policy")
            except PortalError as exc:
                errors = {k: [i["message"] for i in v] for k, v in (exc.fields or {}).items()} or {
                    "policy": [exc.message]}
    elif request.GET.get("from") == "whatif" and m.is_platform_admin and WHATIF_SESSION_KEY in request.session:
        # "Apply" on the What-if page: the proposed policy, to review and save here like any edit
        text = json.dumps(request.session[WHATIF_SESSION_KEY], indent=2, sort_keys=True)
        comment = "Tried in What-if first"
    current, version = current_policy()
    data = policy_as_dict(current)
    weights = data.get("weights", {})
    matrix = [(u, [weights.get(u, {}).get(t, "") for t in USER_TIERS]) for u in URGENCIES]
    return render(request, "dashboard/policy.html", {
        "membership": m, "policy": data, "version": version, "matrix": matrix, "user_tiers": USER_TIERS,
        "policy_json": text if text is not None else json.dumps(data, indent=2, sort_keys=True),
        "comment": comment, "errors": errors, "can_edit": m.is_platform_admin,
        "from_whatif": request.method == "GET" and text is not None,
        "versions": PolicyVersion.objects.select_related("author").order_by("-version")[:50],
    }, status=400 if errors else 200)


# ------------------------------------------------------------------------------------------ what-if (issue 6)

WHATIF_SESSION_KEY = "whatif_policy"  # the last proposed policy, for "apply in the policy editor"
WHATIF_WINDOWS = (1, 7, 30, 90)  # days of history an admin may replay
QUOTA_INPUTS = ("nominal", "borrowing_limit", "lending_limit")


def _quota_grid(m, quotas: dict) -> list[dict]:
    """Department x flavor rows the admin may propose quotas for (a department admin: their own department)."""
    from portal.models import Department

    depts = Department.objects.order_by("slug")
    if not m.is_platform_admin:
        depts = depts.filter(pk=m.department_id)
    flavors = list(Flavor.objects.order_by("name").values_list("name", flat=True))
    rows = []
    for d in depts.values_list("slug", flat=True):
        for f in flavors:
            q = quotas.get(d, {}).get(f)
            initial = {k: ("" if q is None or q.get(k) is None else str(q[k])) for k in QUOTA_INPUTS}
            rows.append({"department": d, "flavor": f, "exists": q is not None, "initial": initial,
                         "inputs": [(k, f"quota:{d}:{f}:{k}") for k in QUOTA_INPUTS]})
    return rows


def _quota_changes(m, post, grid: list[dict]) -> tuple[list, dict]:
    """The quota inputs that differ from what the form showed -> validated QuotaChanges (or form errors)."""
    from scheduling.services.whatif import WhatIfError, quota_change

    shown = {(r["department"], r["flavor"]): r["initial"] for r in grid}
    posted: dict[tuple[str, str], dict[str, str]] = {}
    errors: list[str] = []
    for key in post:
        if not key.startswith("quota:"):
            continue
        parts = key.split(":")
        if len(parts) != 4 or parts[3] not in QUOTA_INPUTS:
            errors.append(f"{key!r} is not a quota field.")
            continue
        posted.setdefault((parts[1], parts[2]), {})[parts[3]] = post.get(key, "").strip()
    changes = []
    for (dept, flavor), values in sorted(posted.items()):
        initial = shown.get((dept, flavor))
        if initial is not None and all(values.get(k, initial[k]) == initial[k] for k in QUOTA_INPUTS):
            continue  # unchanged
        if initial is None and not m.is_platform_admin and dept != m.department.slug:
            errors.append(f"{dept}/{flavor}: you can propose quotas for your own department only.")
            continue
        base = initial or dict.fromkeys(QUOTA_INPUTS, "")
        try:
            changes.append(quota_change(dept, flavor, *(values.get(k, base[k]) for k in QUOTA_INPUTS)))
        except WhatIfError as exc:
            errors.extend(exc.errors.get("quotas", [exc.message]))
    return changes, ({"quotas": errors} if errors else {})


def _fmt_s(x) -> str:
    if x is None or x != x:
        return "—"
    x = float(x)
    sign = "-" if x < 0 else ""
    a = abs(x)
    if a < 120:
        return f"{sign}{a:.0f} s"
    if a < 7200:
        return f"{sign}{a / 60:.0f} min"
    return f"{sign}{a / 3600:.1f} h"


def _fmt(kind: str, x, change: bool = False) -> str:
    if x is None or x != x:
        return "—"
    plus = "+" if change and x > 0 else ""
    if kind == "s":
        return plus + _fmt_s(x)
    if kind == "%":
        return f"{plus}{x * 100:.1f}{' pt' if change else '%'}"
    if kind == "n":
        return f"{plus}{x:.0f}"
    if kind == "h":
        return f"{plus}{x:.1f}"
    return f"{plus}{x:.3f}"


def _cells(kind: str, cur, pro) -> dict:
    change = pro - cur if isinstance(cur, int | float) and isinstance(pro, int | float) else None
    return {"current": _fmt(kind, cur), "proposed": _fmt(kind, pro), "change": _fmt(kind, change, True),
            "sign": 0 if not change or change != change else (1 if change > 0 else -1)}


def _whatif_tables(res, m) -> dict:
    """The comparison as table rows. A department admin gets their own department's row and the
    cluster-wide figures (which name no department); a platform admin gets every department."""
    cur, pro = res.result["current"], res.result["proposed"]
    overall = [
        ("Utilisation", "%", cur["utilisation"], pro["utilisation"]),
        ("Wait, average", "s", cur["wait_avg"], pro["wait_avg"]),
        ("Wait, p95", "s", cur["wait_p95"], pro["wait_p95"]),
        ("Realtime started within 5 min", "%", cur["realtime_within_5min"], pro["realtime_within_5min"]),
        ("Job completion time, average", "s", cur["jct_avg"], pro["jct_avg"]),
        ("Fairness (Jain's index)", "j", cur["jain"], pro["jain"]),
        ("Preemptions", "n", cur["preemptions"], pro["preemptions"]),
        ("GPU-hours lost to preemption", "h", cur["gpu_hours_lost"], pro["gpu_hours_lost"]),
        ("Jobs that never started", "n", cur["never_started"], pro["never_started"]),
    ]
    tiers = []
    for t in ("realtime", "elastic", "backfill"):
        a, b = cur["wait_tier"].get(t), pro["wait_tier"].get(t)
        if a is None and b is None:
            continue
        a, b = a or {}, b or {}
        tiers.append({"tier": t, "avg": _cells("s", a.get("avg"), b.get("avg")),
                      "p95": _cells("s", a.get("p95"), b.get("p95"))})
    depts = []
    for d in sorted(set(cur["wait_dept"]) | set(pro["wait_dept"]) | set(cur["preemptions_dept"])):
        if not m.is_platform_admin and d != m.department.slug:
            continue
        a, b = cur["wait_dept"].get(d) or {}, pro["wait_dept"].get(d) or {}
        depts.append({"department": d, "avg": _cells("s", a.get("avg"), b.get("avg")),
                      "p95": _cells("s", a.get("p95"), b.get("p95")),
                      "preemptions": _cells("n", cur["preemptions_dept"].get(d, 0),
                                            pro["preemptions_dept"].get(d, 0))})
    return {"overall": [dict(label=label, **_cells(kind, a, b)) for label, kind, a, b in overall],
            "rho": cur["rho"], "tiers": tiers, "departments": depts}


def _policy_changes(current: dict, proposed: dict) -> list[str]:
    def flat(d, prefix=""):
        out = {}
        for k, v in d.items():
            if isinstance(v, dict):
                out.update(flat(v, f"{prefix}{k}."))
            elif k != "version" or prefix:
                out[f"{prefix}{k}"] = v
        return out

    a, b = flat(current), flat(proposed)
    return [f"{k}: {a.get(k, '—')} → {b.get(k, '—')}" for k in sorted(set(a) | set(b)) if a.get(k) != b.get(k)]


@login_required
@require_http_methods(["GET", "POST"])
def whatif(request):
    """Replay the recorded history under the policy/quotas in force and a proposal; show the differences.

    Platform admins: every department, and "apply" opens the proposed policy in the policy editor. Department
    admins: may try policies and their own department's quotas, and see their department's row plus the
    cluster-wide figures. Researchers: 403. Synchronous and bounded (scheduling.services.whatif)."""
    from django.core.exceptions import PermissionDenied

    from scheduling.services import whatif as svc

    m = _member(request)
    if not m.is_department_admin:
        raise PermissionDenied("The what-if replay is for department and platform admins.")
    current_doc, version = svc.current_policy_doc()
    grid = _quota_grid(m, svc.current_quotas())
    errors: dict = {}
    res = tables = None
    days = WHATIF_WINDOWS[1]
    text = json.dumps(current_doc, indent=2, sort_keys=True)
    posted_quotas: dict = {}
    if request.method == "POST":
        text = request.POST.get("policy", "")
        posted_quotas = {k: v for k, v in request.POST.items() if k.startswith("quota:")}
        try:
            days = int(request.POST.get("days", ""))
            if days not in WHATIF_WINDOWS:
                raise ValueError
        except ValueError:
            errors["days"] = [f"Choose one of {', '.join(map(str, WHATIF_WINDOWS))} days."]
        proposed, policy_errors = _policy_from_text(text)
        errors.update(policy_errors)
        if proposed is not None:
            try:
                svc.validate_policy(proposed)
            except svc.WhatIfError as exc:
                errors.update(exc.errors)
        changes, quota_errors = _quota_changes(m, request.POST, grid)
        errors.update(quota_errors)
        if not errors:
            try:
                res = svc.run_whatif(days=days, proposed_policy=proposed, quota_changes=changes)
            except svc.WhatIfError as exc:
                errors = exc.errors
        if res is not None:
            tables = _whatif_tables(res, m)
            if res.policy_changed and m.is_platform_admin:
                request.session[WHATIF_SESSION_KEY] = res.proposed_policy
    for row in grid:
        row["cells"] = [(name, posted_quotas.get(name, row["initial"][k])) for k, name in row["inputs"]]
    return render(request, "dashboard/whatif.html", {
        "membership": m, "version": version, "policy_json": text, "grid": grid, "errors": errors,
        "windows": WHATIF_WINDOWS, "days": days, "res": res, "tables": tables,
        "policy_changes": _policy_changes(current_doc, res.proposed_policy) if res and res.policy_changed else [],
        "max_jobs": svc.max_jobs(), "time_limit_s": svc.time_limit_s(),
    }, status=400 if errors else 200)


urlpatterns = [
    path("", jobs, name="jobs"),
    path("jobs/new", submit, name="submit"),
    path("jobs/<int:pk>/", job_detail, name="job"),
    path("jobs/<int:pk>/cancel", cancel, name="cancel"),
    path("cluster/", cluster, name="cluster"),
    path("policy/", policy, name="policy"),
    path("whatif/", whatif, name="whatif"),
]
