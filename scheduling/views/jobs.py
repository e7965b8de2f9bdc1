"""Job pages: the list, the submit form, a job's page, cancel. Server-rendered over the same services and
selectors as the API, and read through the same tenancy gate (another department's job is a 404)."""

from __future__ import annotations

import hashlib
import json
import uuid

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count, Prefetch
from django.http import HttpResponse, HttpResponseNotModified, JsonResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from engine import tiers as tier_table
from portal.errors import PortalError, ValidationFailed, error_body
from portal.forms import act_and_flash, credit_fields, form_payload, labels_into
from portal.tenancy import CHANGE, VIEW, member, permits
from quotas.models import Flavor
from scheduling.api.serializers import MAX_ROLES, JobSubmitSerializer, JobTemplateWriteSerializer
from scheduling.api.sweeps import ArraySubmitSerializer
from scheduling.backends.base import BackendError
from scheduling.models import (
    Cluster,
    FailurePolicy,
    Job,
    JobEvent,
    JobKind,
    JobState,
    SessionImage,
    TaskType,
    TemplateScope,
    Tier,
    Urgency,
)
from scheduling.selectors import job_events, jobs_for, live_states, pods_by_role, queue_position
from scheduling.services import fractions
from scheduling.services.dependencies import dependencies_of
from scheduling.services.jobs import job_cancel, job_submit
from scheduling.services.logs import attempt_log_lines, is_live
from scheduling.services.quote import job_quote
from scheduling.services.sessions import route_context
from scheduling.services.sweeps import array_submit
from scheduling.services.templates import spec_of_job, template_create, templates_for, with_data_workers
from scheduling.views.templates import spec_form_values
from workloads.models import DataSource
from workloads.podsecrets import token_warnings
from workloads.services.resolve import checkpoint_of


@login_required
def jobs(request):
    m = member(request.user)
    qs = jobs_for(request.user, request.GET)
    page = Paginator(qs, 50).get_page(request.GET.get("page"))
    counts = {s: 0 for s in JobState.values}
    # one GROUP BY in the database: iterating every job's state in Python took a second at 100,000 jobs
    for state, n in (Job.objects.restrict(request.user, VIEW).order_by().values("state")
                     .annotate(n=Count("id")).values_list("state", "n")):
        counts[state] = n
    return render(request, "scheduling/jobs.html", {
        "page": page, "membership": m, "states": [(v, label, counts[v]) for v, label in JobState.choices],
        "filter_state": request.GET.get("state", ""), "mine": request.GET.get("mine", ""),
        "filtered": any(request.GET.get(k) for k in ("state", "tier", "flavor", "mine", "department", "q")),
    })


# The job's own size as the form starts it (the serializer's defaults, and one GPU on one pod).
SIZE_DEFAULTS = {"gpus": "1", "pods": "1", "cpu": "4", "memory": "16Gi"}
FORM_FIELDS = ("name", "kind", "session_image", "image", "port", "readiness_path", "flavor", "gpus", "pods",
               "min_pods", "global_batch_size",
               "gpu_memory_gib", "gpu_cores", "gpu_replicas", "cpu",
               "memory", "tier", "urgency", "task_type", "deadline", "max_runtime_s", "checkpoint_interval_s", "bid",
               "shm_mb", "max_retries", "topology_level", "topology_required")
INT_FIELDS = ("gpus", "pods", "min_pods", "global_batch_size", "port", "max_runtime_s", "checkpoint_interval_s", "shm_mb", "max_retries", "gpu_cores",
              "gpu_replicas")


def _form_to_payload(post) -> tuple[dict, dict]:
    """The submit form -> the API's JSON payload (numbers as JSON integers, as the API requires), plus what
    only a form has: a command typed as a shell line, and environment variables as NAME=value lines."""
    payload = form_payload(post, FORM_FIELDS, integers=INT_FIELDS, checkboxes=("topology_required",))
    errors = credit_fields(payload, JobSubmitSerializer, ("bid",))  # the form speaks credits, the API mcr
    command = _command(post.get("command", ""), "command", errors)
    if command:
        payload["command"] = command
    roles = _form_roles(post, errors)
    if roles:
        payload["roles"] = roles
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
    secrets = _form_secrets(post.get("secrets", ""), errors)
    if secrets:
        payload["secrets"] = secrets
    for field in ("cluster_selector", "cluster_preference"):  # label=value, comma-separated
        labels_into(post, field, payload, errors)
    mounts = []
    for line in (x.strip() for x in post.get("mounts", "").splitlines()):
        if not line:
            continue
        source, sep, rest = line.partition(":")
        path, _, mode = rest.partition(":")
        if not sep or mode not in ("", "ro", "rw"):
            errors.setdefault("mounts", []).append(f"{line!r}: use source:/path, or source:/path:rw to write.")
            continue
        mounts.append({"source": source.strip(), "path": path.strip(), "read_only": mode != "rw"})
    if mounts:
        payload["mounts"] = mounts
    checkpoint = post.get("checkpoint", "").strip()
    if checkpoint:
        payload["checkpoint"] = True if checkpoint.lower() in ("yes", "true") else {"source": checkpoint}
    for field in ("array", "after"):  # a sweep's indices (0-63%8) and what the job waits for (afterok:a7)
        if post.get(field, "").strip():
            payload[field] = post[field].strip()
    codes = [c.strip() for c in post.get("retry_on_exit_codes", "").split(",") if c.strip()]
    if codes:
        try:
            payload["retry_on_exit_codes"] = [int(c) for c in codes]
        except ValueError:
            errors["retry_on_exit_codes"] = ["Exit codes are whole numbers, separated by commas (3, 137)."]
    return payload, errors


def _command(text: str, field: str, errors: dict) -> list[str] | None:
    """A command as the form takes it: a JSON list, or a shell line run by /bin/sh -c."""
    text = text.strip()
    if not text:
        return None
    try:
        return json.loads(text) if text.startswith("[") else ["/bin/sh", "-c", text]
    except json.JSONDecodeError:
        errors[field] = ['A JSON list like ["python", "train.py"] or a shell command line.']
        return None


# A role's row of the submit form (``role-<row>-<field>``): the API's role fields, numbers as JSON integers.
ROLE_FIELDS = ("name", "pods", "gpus", "cpu", "memory", "shm_mb", "flavor", "failure_policy", "image", "command")
ROLE_INT_FIELDS = ("pods", "gpus", "shm_mb")
# What makes a row a role: the two selects always post a value, so a row with only those is an empty row.
ROLE_TYPED = ("name", "pods", "gpus", "cpu", "memory", "shm_mb", "image", "command")


def _posted_role_rows(post) -> list[dict]:
    return [{f: post.get(f"role-{i}-{f}", "").strip() for f in ROLE_FIELDS} for i in range(MAX_ROLES)]


def _form_roles(post, errors: dict) -> list[dict]:
    """The form's filled role rows -> the API's ``roles`` (empty rows skipped; a row's errors are keyed by
    its input's name, ``role-<row>-<field>``, through ``_form_errors``)."""
    roles = []
    for i, row in enumerate(_posted_role_rows(post)):
        if not any(row[f] for f in ROLE_TYPED):
            continue
        role = form_payload(row, [f for f in ROLE_FIELDS if f != "command"], integers=ROLE_INT_FIELDS)
        command = _command(row["command"], f"role-{i}-command", errors)
        if command:
            role["command"] = command
        roles.append(role)
    return roles


def _role_rows_of(post) -> list[int]:
    """The rows (form positions) the payload's roles came from, in order: roles[k] is row ``rows[k]``."""
    return [i for i, row in enumerate(_posted_role_rows(post)) if any(row[f] for f in ROLE_TYPED)]


def _form_errors(errors: dict, rows: list[int]) -> dict[str, list[str]]:
    """Serializer or service field errors as the form's fields' lines: a role's (``roles`` as a list by
    role, or ``roles.<k>.<field>``) under its row's input, ``role-<row>-<field>``."""
    out: dict[str, list[str]] = {}

    def role_field(k: int, field: str) -> str:
        return f"role-{rows[k]}-{field}" if 0 <= k < len(rows) else "roles"

    for key, items in errors.items():
        parts = key.split(".")
        # a list of roles' errors comes as a list by role or a dict by position, each item a dict by field
        by_role = (dict(enumerate(items)) if isinstance(items, list) else items) if key == "roles" else {}
        if isinstance(by_role, dict) and by_role and all(isinstance(v, dict) for v in by_role.values()):
            for k, item in by_role.items():
                for field, msgs in item.items():
                    out.setdefault(role_field(int(k), field), []).extend(_messages(msgs))
        elif len(parts) == 3 and parts[0] == "roles" and parts[1].isdigit():
            out.setdefault(role_field(int(parts[1]), parts[2]), []).extend(_messages(items))
        else:
            out.setdefault(key, []).extend(_messages(items))
    return out


def _portal_errors(exc: PortalError) -> dict[str, list[str]]:
    return {field: [i["message"] for i in items]
            for field, items in (exc.fields or {"non_field_errors": [{"message": exc.message}]}).items()}


def _role_form_rows(values, errors: dict) -> list[dict]:
    """The role table's rows: those given (prefilled or posted), then empty ones to add roles in (at least
    two in all, one more than given, at most ``MAX_ROLES``), each cell with its value and errors."""
    given = values.get("role_rows") if isinstance(values, dict) else None
    rows = given if given is not None else _posted_role_rows(values)
    used = max((i + 1 for i, row in enumerate(rows) if any(row.get(f) for f in ROLE_TYPED)), default=0)
    count = min(MAX_ROLES, max(2, used + 1))
    out = []
    for i in range(count):
        row = rows[i] if i < len(rows) else {}
        out.append({"i": i, "cells": [
            {"field": f, "name": f"role-{i}-{f}", "value": row.get(f, ""),
             "errors": errors.get(f"role-{i}-{f}", [])} for f in ROLE_FIELDS]})
    return out


def _prefill(request) -> tuple[dict, str]:
    """The form's starting values: a template's spec (``?template=<id>``) or an earlier job's (``?clone=<id>``),
    read through the tenancy gate (one the user may not see is a 404), and what the form started from."""
    if request.GET.get("template"):
        t = templates_for(request.user).get_or_404(request.user, VIEW, missing="No such template.",
                                                   pk=request.GET["template"])
        return spec_form_values(t.spec), f"template {t.name}"
    if request.GET.get("clone"):
        job = Job.objects.select_related("flavor").get_or_404(request.user, VIEW, pk=request.GET["clone"])
        spec = spec_of_job(job)
        if "add_data_workers" in request.GET:  # the saw-tooth hint's one click: the clone with data workers
            try:
                count = int(request.GET["add_data_workers"])
            except ValueError:
                raise ValidationFailed(fields={"add_data_workers": [
                    {"code": "invalid", "message": "A whole number of data workers."}]}) from None
            return (spec_form_values(with_data_workers(spec, count)),
                    f"job {job.pk} ({job.name}) with {count} more data worker{'s' if count != 1 else ''}")
        return spec_form_values(spec), f"job {job.pk} ({job.name})"
    return {}, ""


def _save_template(request, data: dict, errors: dict):
    """"Save as template" of the form: the form's fields as a submission spec, validated as a submission."""
    name = request.POST.get("template_name", "").strip()
    scope = TemplateScope.DEPARTMENT if request.POST.get("template_scope") == "department" else TemplateScope.PERSONAL
    s = JobTemplateWriteSerializer(data={"name": name, "scope": scope, "spec": data})
    if not s.is_valid():
        for field, items in s.errors.items():
            if field == "spec" and isinstance(items, dict):  # the form's own fields, as for a submission
                for k, v in items.items():
                    errors.setdefault(k, []).extend(str(e) for e in v)
            else:
                errors.setdefault("template_name", []).extend(str(e) for e in items)
        return None
    try:
        template = template_create(user=request.user, **s.validated_data)
    except PortalError as exc:
        for items in (exc.fields or {"template_name": [{"message": exc.message}]}).values():
            errors.setdefault("template_name", []).extend(i["message"] for i in items)
        return None
    messages.success(request, f"Saved as template {template.name}.")
    return redirect("dashboard:templates")


def _form_secrets(text: str, errors: dict) -> list[dict]:
    """``NAME=secret/key`` (a variable) or ``/path=secret`` (files) lines -> the API's ``secrets`` list."""
    uses = []
    for line in (line.strip() for line in text.splitlines()):
        if not line:
            continue
        target, _, source = line.partition("=")
        target, source = target.strip(), source.strip()
        if target.startswith("/") and source and "/" not in source:
            uses.append({"secret": source, "path": target})
        elif target and not target.startswith("/") and source.count("/") == 1:
            secret, key = source.split("/")
            uses.append({"secret": secret, "key": key, "env": target})
        else:
            errors.setdefault("secrets", []).append(f"{line!r}: use NAME=secret/key or /path=secret.")
    return uses


def _messages(errors) -> list[str]:
    """A serializer field's errors as lines; a list field's come by item index ({0: [...]}), as do they here."""
    if isinstance(errors, dict):
        return [str(e) for items in errors.values() for e in (items if isinstance(items, list) else [items])]
    return [str(e) for e in errors]


@login_required
@require_http_methods(["GET", "POST"])
def submit(request):
    m = member(request.user)
    errors: dict = {}
    values, started_from = {}, ""
    if request.method == "GET":
        try:
            values, started_from = _prefill(request)
        except ValidationFailed as exc:  # a bad add_data_workers: said on the empty form, nothing prefilled
            errors.update(_portal_errors(exc))
    else:
        values = request.POST
    if request.method == "POST":
        payload, errors = _form_to_payload(request.POST)
        rows = _role_rows_of(request.POST)
        if "save_template" in request.POST and not errors:
            saved = _save_template(request, payload, errors)
            if saved is not None:
                return saved
        elif "save_template" not in request.POST:
            serializer = (ArraySubmitSerializer if "array" in payload else JobSubmitSerializer)(data=payload)
            try:
                valid = serializer.is_valid()
                if not valid:
                    for k, v in _form_errors(serializer.errors, rows).items():
                        errors.setdefault(k, []).extend(v)
                if valid and not errors and "array" in payload:
                    data = dict(serializer.validated_data)
                    array, _ = array_submit(user=request.user, data=data, spec=data.pop("array"),
                                            indices=payload["array"],
                                            idempotency_key=request.POST.get("idempotency_key") or None)
                    return redirect("dashboard:array", pk=array.pk)
                if valid and not errors:
                    job, _ = job_submit(user=request.user, data=serializer.validated_data,
                                        idempotency_key=request.POST.get("idempotency_key") or None)
                    for warning in token_warnings(serializer.validated_data.get("env") or {}):
                        messages.warning(request, warning)
                    return redirect("dashboard:job", pk=job.pk)
            except PortalError as exc:
                for field, items in _form_errors(_portal_errors(exc), rows).items():
                    errors.setdefault(field, []).extend(items)
    clusters = list(Cluster.objects.order_by("name").only("name", "labels", "state", "topology_levels"))
    flavors = list(Flavor.objects.order_by("name"))
    share = settings.SESSION_DEFAULT_GPU_FRACTION
    role_rows = _role_form_rows(values, errors)
    roles_given = any(c["value"] for r in role_rows for c in r["cells"] if c["field"] in ROLE_TYPED)
    return render(request, "scheduling/submit.html", {
        "membership": m, "flavors": flavors, "tiers": Tier.choices,
        "session_fraction": share,
        "session_fraction_defaults": [d for d in (fractions.describe_default(f, share) for f in flavors) if d],
        "default_tier": tier_table.DEFAULT,
        "urgencies": Urgency.choices, "task_types": TaskType.choices, "errors": errors, "values": values,
        "kinds": JobKind.choices, "session_images": list(SessionImage.objects.restrict(request.user, VIEW)),
        "clusters": clusters,
        "topology_levels": list(dict.fromkeys(k for c in clusters for k in c.topology_levels or [])),
        "sources": list(DataSource.objects.restrict(request.user, VIEW).order_by("name").distinct()
                        .only("name", "writable")),
        "idempotency_key": request.POST.get("idempotency_key") or uuid.uuid4().hex,
        "templates": list(templates_for(request.user)),
        "started_from": started_from, "chosen_template": request.GET.get("template", ""),
        "role_rows": role_rows, "cpu_pools": [f.name for f in flavors if f.is_cpu],
        "failure_policies": FailurePolicy.choices,
        # a job of roles has its size in its roles: the job's own size fields start blank, not at a default
        "size_defaults": dict.fromkeys(SIZE_DEFAULTS, "") if roles_given else SIZE_DEFAULTS,
    }, status=400 if errors else 200)


@login_required
@require_POST
def submit_quote(request):
    """The submit form's live quote: the form as typed so far, read exactly as a submission is (same form ->
    payload conversion, same serializer, same messages), answered as an HTML fragment; 400 with the field
    errors while the form is not valid yet. Nothing is submitted."""
    member(request.user)
    payload, errors = _form_to_payload(request.POST)
    payload.pop("array", None)  # an array's quote is its one task's (each task is quoted alike)
    serializer = JobSubmitSerializer(data=payload)
    rows = _role_rows_of(request.POST)
    quote = None
    try:
        if not serializer.is_valid():
            for k, v in _form_errors(serializer.errors, rows).items():
                errors.setdefault(k, []).extend(v)
        if not errors:
            quote = job_quote(user=request.user, data=serializer.validated_data)
    except PortalError as exc:
        for field, items in _form_errors(_portal_errors(exc), rows).items():
            errors.setdefault(field, []).extend(items)
    warnings = token_warnings(serializer.validated_data.get("env") or {}) if quote else []
    return render(request, "scheduling/_quote.html", {"quote": quote, "errors": errors, "warnings": warnings},
                  status=400 if errors else 200)


@login_required
def job_detail(request, pk: int):
    job = (
        Job.objects.select_related("owner", "department", "team", "flavor", "cluster")
        .prefetch_related(Prefetch("events", JobEvent.objects.select_related("actor")))
        .get_or_404(request.user, VIEW, pk=pk)
    )
    role = request.GET.get("role") or None
    events, role_error = job.events.all(), None
    if role:
        try:
            events = job_events(job=job, role=role)
        except ValidationFailed as exc:
            role_error = _portal_errors(exc)["role"]
    return render(request, "scheduling/job.html", {
        "job": job, "events": events, "can_manage": permits(request.user, job, CHANGE),
        # the page reloads when the timeline grows: it compares the whole timeline's length, filtered or not
        "event_count": len(job.events.all()), "event_role": role, "role_error": role_error,
        "after": dependencies_of(job),
        "queue_position": queue_position(job=job),
        "checkpoint": checkpoint_of(job.pk) if job.checkpoint else None,
        "checkpoint_retention_days": settings.CHECKPOINT_RETENTION_DAYS,
        "route": route_context(request.user, job) if job.has_route else None,
        "roles": pods_by_role(job=job),
    }, status=400 if role_error else 200)


LIVE_MAX_IDS = 100


@login_required
def jobs_live(request):
    """The live state of the jobs a page shows (``?ids=1,2,3``, at most 100): state, reason, wall-clock ETA
    and timeline length, as JSON with an ETag; 304 when nothing changed since the ETag the page sent. Pages
    poll this instead of the whole job list."""
    member(request.user)
    try:
        ids = sorted({int(x) for x in request.GET.get("ids", "").split(",") if x.strip()})
    except ValueError:
        return JsonResponse(error_body("validation_error", "ids: comma-separated job ids.",
                                       fields={"ids": [{"code": "invalid", "message": "Job ids, e.g. 1,2,3."}]}),
                            status=400)
    if len(ids) > LIVE_MAX_IDS:
        return JsonResponse(error_body("validation_error", f"At most {LIVE_MAX_IDS} ids.",
                                       fields={"ids": [{"code": "max_length",
                                                        "message": f"At most {LIVE_MAX_IDS} ids."}]}), status=400)
    body = json.dumps({"jobs": live_states(request.user, ids)}, sort_keys=True)
    etag = '"' + hashlib.sha256(body.encode()).hexdigest()[:32] + '"'
    if request.headers.get("If-None-Match") == etag:
        response = HttpResponseNotModified()
    else:
        response = HttpResponse(body, content_type="application/json")
    response["ETag"] = etag
    response["Cache-Control"] = "private, no-cache"
    return response


@login_required
@require_POST
def cancel(request, pk: int):
    job = Job.objects.get_or_404(request.user, CHANGE, pk=pk,
                                 message="Only the job's owner and its department's admins can cancel it.")
    # a refusal (e.g. it finished meanwhile) is said on the job's page
    act_and_flash(request, lambda: job_cancel(user=request.user, job=job, comment=request.POST.get("comment", "")))
    return redirect("dashboard:job", pk=pk)




LOG_PAGE_LINES = 5000
LOGS_FORBIDDEN = "Only the job's owner and its department's admins can read its logs."


def _log_attempt(request, job) -> int:
    try:
        attempt = int(request.GET.get("attempt", job.attempt))
    except ValueError:
        attempt = job.attempt
    return min(max(attempt, 1), job.attempt)


def _log_pod(request, job) -> int:
    """The pod of a gang whose log is shown (its index; out of range: the nearest)."""
    try:
        pod = int(request.GET.get("pod", 0))
    except ValueError:
        pod = 0
    return min(max(pod, 0), job.all_pods - 1)


def _log_text(job, attempt, pod: int = 0) -> tuple[str, str, str]:
    """(text, source, error) of a pod's log of an attempt for a page: never raises for a cluster that cannot
    answer."""
    try:
        lines, source = attempt_log_lines(job=job, attempt=attempt, tail=LOG_PAGE_LINES, pod=pod)
        return "\n".join(line.rstrip("\n") for line in lines), source, ""
    except BackendError as exc:
        return "", "live", f"The log is unavailable right now: {exc}"


@login_required
def job_logs(request, pk: int):
    """A job's log as a page: the attempt chosen from the job's attempts, followed while it runs."""
    job = Job.objects.select_related("department", "cluster", "flavor").get_or_404(
        request.user, CHANGE, message=LOGS_FORBIDDEN, pk=pk)
    attempt, pod = _log_attempt(request, job), _log_pod(request, job)
    text, source, error = _log_text(job, attempt, pod)
    kept = job.logs.filter(attempt=attempt, pod=pod).only("truncated", "kept_at").first()
    return render(request, "scheduling/logs.html", {
        "job": job, "attempt": attempt, "attempts": range(job.attempt, 0, -1), "pod": pod,
        "pods": range(job.all_pods), "text": text, "source": source,
        "error": error, "live": is_live(job, attempt), "kept": kept, "keep_kb": settings.LOG_KEEP_KB,
        "retention_days": settings.LOG_RETENTION_DAYS,
    })


@login_required
def job_log_text(request, pk: int):
    """The log text alone, for following a live attempt: an ETag of the text, 304 when it has not changed."""
    job = Job.objects.select_related("department", "cluster").get_or_404(
        request.user, CHANGE, message=LOGS_FORBIDDEN, pk=pk)
    attempt, pod = _log_attempt(request, job), _log_pod(request, job)
    text, _source, error = _log_text(job, attempt, pod)
    body = error or text
    etag = '"' + hashlib.sha256(f"{is_live(job, attempt)}:{body}".encode()).hexdigest()[:32] + '"'
    if request.headers.get("If-None-Match") == etag:
        response = HttpResponseNotModified()
    else:
        response = HttpResponse(body, content_type="text/plain; charset=utf-8")
    response["ETag"] = etag
    response["X-Log-Live"] = "1" if is_live(job, attempt) else "0"
    response["Cache-Control"] = "private, no-cache"
    return response
