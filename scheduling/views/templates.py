"""Template pages: the list of the user's and the department's templates, edit, delete; and the conversion
of a submission spec into the submit form's values (prefill from a template or a cloned job)."""

from __future__ import annotations

import json

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from engine import tiers
from portal.errors import PortalError
from portal.money import credits_value
from portal.tenancy import CHANGE, VIEW, member
from scheduling.api.serializers import JobTemplateUpdateSerializer
from scheduling.models import JobTemplate, TemplateScope
from scheduling.services.templates import template_delete, template_update, templates_for

CHANGE_FORBIDDEN = "Only the template's owner (personal) or the department's admins can change it."
SHELL = ["/bin/sh", "-c"]


def _labels_text(labels) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted((labels or {}).items())) if isinstance(labels, dict) else ""


def _command_text(command) -> str:
    """A command as the form shows it: a shell line for ``/bin/sh -c <line>``, else its JSON list."""
    if not isinstance(command, list):
        return ""
    return command[2] if len(command) == 3 and command[:2] == SHELL else json.dumps(command)


def spec_form_values(spec: dict) -> dict:
    """A submission spec as the submit form's field values (what a person would have typed to get it): the
    form reads a command as a shell line or a JSON list, env as NAME=value lines, the bid in credits."""
    values = {k: "" if v is None else str(v) for k, v in spec.items()
              if k not in ("command", "env", "bid", "cluster_selector", "cluster_preference", "mounts", "checkpoint",
                           "secrets", "retry_on_exit_codes", "roles")}
    values["command"] = _command_text(spec.get("command"))
    if isinstance(spec.get("roles"), list):  # the role table's rows, each field as typed
        values["role_rows"] = [
            {**{k: "" if v is None else str(v) for k, v in r.items() if k != "command"},
             "command": _command_text(r.get("command"))}
            for r in spec["roles"] if isinstance(r, dict)]
    if isinstance(spec.get("env"), dict):
        # sorted: PostgreSQL's jsonb keeps no key order, and the form should read the same every time
        values["env"] = "\n".join(f"{k}={v}" for k, v in sorted(spec["env"].items()))
    if isinstance(spec.get("bid"), int):
        values["bid"] = credits_value(spec["bid"])
    for field in ("cluster_selector", "cluster_preference"):
        values[field] = _labels_text(spec.get(field))
    # the form's line syntax for what a job runs with: source:/path[:rw], NAME=secret/key or /path=secret
    values["mounts"] = "\n".join(f"{m['source']}:{m['path']}" + ("" if m.get("read_only", True) else ":rw")
                                 for m in spec.get("mounts") or [] if isinstance(m, dict))
    checkpoint = spec.get("checkpoint")
    values["checkpoint"] = "yes" if checkpoint is True else (
        checkpoint.get("source", "") if isinstance(checkpoint, dict) else "")
    codes = spec.get("retry_on_exit_codes")
    values["retry_on_exit_codes"] = ", ".join(str(c) for c in codes) if isinstance(codes, list) else ""
    values["secrets"] = "\n".join(f"{u['env']}={u['secret']}/{u['key']}" if u.get("env") else f"{u['path']}={u['secret']}"
                                  for u in spec.get("secrets") or [] if isinstance(u, dict))
    return values


def _get(user, pk, action=VIEW) -> JobTemplate:
    return templates_for(user).get_or_404(user, action, message=CHANGE_FORBIDDEN, missing="No such template.", pk=pk)


@login_required
def templates(request):
    m = member(request.user)
    rows = list(templates_for(request.user))
    for t in rows:
        t.can_change = JobTemplate.objects.permits(request.user, t, CHANGE)
    return render(request, "scheduling/templates.html", {
        "membership": m,
        "personal": [t for t in rows if t.scope == TemplateScope.PERSONAL],
        "shared": [t for t in rows if t.scope == TemplateScope.DEPARTMENT],
        "default_tier": tiers.DEFAULT,  # a spec that names no tier submits at the default one
    })


@login_required
@require_http_methods(["GET", "POST"])
def template_edit(request, pk: int):
    m = member(request.user)
    template = _get(request.user, pk, CHANGE)
    errors: dict = {}
    values = {"name": template.name, "description": template.description,
              "spec": json.dumps(template.spec, indent=2, sort_keys=True)}
    if request.method == "POST":
        values = {k: request.POST.get(k, "") for k in ("name", "description", "spec")}
        body = {"name": values["name"].strip(), "description": values["description"].strip()}
        try:
            body["spec"] = json.loads(values["spec"])
        except json.JSONDecodeError as exc:
            errors["spec"] = [f"Not JSON: {exc.msg} (line {exc.lineno})."]
        s = JobTemplateUpdateSerializer(data=body, partial=False)
        if not s.is_valid():
            for field, items in s.errors.items():
                flat = items if isinstance(items, list) else [f"{k}: {' '.join(map(str, v))}" for k, v in items.items()]
                errors.setdefault(field, []).extend(str(i) for i in flat)
        if not errors:
            try:
                template_update(user=request.user, template=template, **s.validated_data)
                messages.success(request, f"Template {template.name} saved.")
                return redirect("dashboard:templates")
            except PortalError as exc:
                for field, items in (exc.fields or {"non_field_errors": [{"message": exc.message}]}).items():
                    errors.setdefault(field, []).extend(i["message"] for i in items)
    return render(request, "scheduling/template_edit.html", {
        "membership": m, "template": template, "values": values, "errors": errors,
    }, status=400 if errors else 200)


@login_required
@require_POST
def template_delete_view(request, pk: int):
    template = _get(request.user, pk, CHANGE)
    name = template.name
    template_delete(user=request.user, template=template)
    messages.success(request, f"Template {name} deleted.")
    return redirect("dashboard:templates")
