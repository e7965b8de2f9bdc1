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
               "deadline", "max_runtime_s", "bid")
INT_FIELDS = ("gpus", "pods", "max_runtime_s", "bid")


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
        try:
            data = json.loads(text)
            if not isinstance(data, dict):
                raise ValueError("the policy must be a JSON object")
            policy_update(user=request.user, data=data, comment=comment)
            from django.contrib import messages

            messages.success(request, "Saved. The next admission cycle uses it.")
            return redirect("dashboard:policy")
        except (ValueError, json.JSONDecodeError) as exc:
            errors = {"policy": [f"Not valid JSON: {exc}"]}
        except PortalError as exc:
            errors = {k: [i["message"] for i in v] for k, v in (exc.fields or {}).items()} or {
                "policy": [exc.message]}
    current, version = current_policy()
    data = policy_as_dict(current)
    weights = data.get("weights", {})
    matrix = [(u, [weights.get(u, {}).get(t, "") for t in USER_TIERS]) for u in URGENCIES]
    return render(request, "dashboard/policy.html", {
        "membership": m, "policy": data, "version": version, "matrix": matrix, "user_tiers": USER_TIERS,
        "policy_json": text if text is not None else json.dumps(data, indent=2, sort_keys=True),
        "comment": comment, "errors": errors, "can_edit": m.is_platform_admin,
        "versions": PolicyVersion.objects.select_related("author").order_by("-version")[:50],
    }, status=400 if errors else 200)


urlpatterns = [
    path("", jobs, name="jobs"),
    path("jobs/new", submit, name="submit"),
    path("jobs/<int:pk>/", job_detail, name="job"),
    path("jobs/<int:pk>/cancel", cancel, name="cancel"),
    path("cluster/", cluster, name="cluster"),
    path("policy/", policy, name="policy"),
]
