"""The lab pages for what jobs run with: department secrets and data sources. As on the other lab pages,
each form is read by the API's own input serializer and applied by the service the API calls; reads go
through the tenancy gate."""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect
from django.views.decorators.http import require_http_methods, require_POST

from portal.errors import Forbidden, ValidationFailed
from portal.forms import act_and_flash, form_payload, render_form, submit_form
from portal.models import Department
from portal.tenancy import CHANGE, member, require_role
from scheduling.models import Cluster
from workloads.api.serializers import SecretCreateSerializer, SecretUpdateSerializer
from workloads.api.sources import DataSourceInputSerializer
from workloads.models import DataSource, DepartmentSecret
from workloads.selectors import data_sources_for, secrets_for
from workloads.services import secrets as secret_services
from workloads.services import sources as source_services


# --------------------------------------------------------------------------- department secrets
def _secret_values(text: str, errors: dict) -> dict[str, str]:
    """``KEY=value`` lines (the value is everything after the first ``=``, kept as typed)."""
    values = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        key, sep, value = line.partition("=")
        if not sep:
            errors.setdefault("values", []).append("Use KEY=value, one per line.")  # never quote the line back
            continue
        values[key.strip()] = value.rstrip("\r")
    return values


def _secret_payload(post, errors: dict) -> dict:
    payload = form_payload(post, ("name", "kind", "purpose", "reference_name", "registry", "username"))
    keys = [k.strip() for k in post.get("keys", "").split(",") if k.strip()]
    if keys:
        payload["keys"] = keys
    values = _secret_values(post.get("values", ""), errors)
    if post.get("password"):
        values["password"] = post["password"]
    if values:
        payload["values"] = values
    return payload


@login_required
@require_http_methods(["GET", "POST"])
def secrets(request):
    """Your department's secrets: names, keys and whether values are set (never the values). Department admins
    declare, rotate and delete them here; values typed into the forms are never shown back."""
    m, is_admin = _declaring(request, "secrets")
    errors: dict = {}
    values = {}
    if request.method == "POST":
        values = {k: v for k, v in request.POST.dict().items() if k not in ("values", "password")}
        pre: dict = {}
        payload = _secret_payload(request.POST, pre)

        target = m.department  # platform admins may name another department
        if m.is_platform_admin and request.POST.get("department"):
            target = Department.objects.filter(slug=request.POST["department"]).first()
            if target is None:
                pre["department"] = ["No such department."]

        def apply(data):
            data.pop("department", None)
            secret_services.secret_create(actor=request.user, department=target, **data)
            messages.success(request, f"Secret {data['name']} saved.")

        errors = submit_form(SecretCreateSerializer, payload, apply, pre)
        if not errors:
            return redirect("lab:secrets")
    return render_form(request, "lab/secrets.html", {"membership": m, "rows": secrets_for(request.user), "values": values,
                                                     "is_admin": is_admin}, errors)


def _declaring(request, what: str):
    """The page's member, and whether they may declare ``what`` (department and platform admins); anyone
    else's POST is refused."""
    m = member(request.user)
    try:
        require_role(request.user, CHANGE)
        may_declare = True
    except Forbidden:
        may_declare = False
    if request.method == "POST" and not may_declare:
        require_role(request.user, CHANGE, f"Only department admins can declare {what}.")
    return m, may_declare


def _secret(request, slug: str, name: str) -> DepartmentSecret:
    return DepartmentSecret.objects.get_or_404(request.user, CHANGE, department__slug=slug, name=name)


@login_required
@require_POST
def secret_rotate(request, slug: str, name: str):
    secret = _secret(request, slug, name)
    pre: dict = {}
    payload = {k: v for k, v in _secret_payload(request.POST, pre).items()
               if k in ("values", "keys", "reference_name", "registry", "username")}

    def apply(data):
        secret_services.secret_update(actor=request.user, secret=secret, **data)
        messages.success(request, f"Secret {name} updated.")

    errors = submit_form(SecretUpdateSerializer, payload, apply, pre)
    for field, msgs in errors.items():
        messages.error(request, f"{name}: {field}: {' '.join(msgs)}")
    return redirect("lab:secrets")


@login_required
@require_POST
def secret_delete(request, slug: str, name: str):
    secret_services.secret_delete(actor=request.user, secret=_secret(request, slug, name))
    messages.success(request, f"Secret {name} deleted.")
    return redirect("lab:secrets")


# --------------------------------------------------------------------------- data sources
SOURCE_FORM_FIELDS = ("name", "cluster", "kind", "department", "shared_with_all", "claim_name", "writable",
                      "sub_path", "description")


def _invalid(field: str, message: str) -> ValidationFailed:
    return ValidationFailed(fields={field: [{"code": "does_not_exist", "message": message}]})


def _source_departments(slugs: list[str]) -> list[Department]:
    found = {d.slug: d for d in Department.objects.filter(slug__in=slugs)}
    missing = [s for s in slugs if s not in found]
    if missing:
        raise _invalid("shared_with", f"No department {', '.join(missing)}.")
    return [found[s] for s in slugs]


@login_required
@require_http_methods(["GET", "POST"])
def data_sources(request):
    """The data sources your department may mount (its own, and those shared with it); department admins
    declare their department's here and delete them, platform admins any (a blank department: platform-owned)."""
    m, may_declare = _declaring(request, "data sources")
    errors: dict = {}
    values = {}
    if request.method == "POST":
        values = request.POST.dict()
        payload = form_payload(request.POST, SOURCE_FORM_FIELDS, checkboxes=("shared_with_all", "writable"))
        if not m.is_platform_admin:  # a department admin declares their own department's sources
            payload["department"] = m.department.slug
        shared = [d.strip() for d in request.POST.get("shared_with", "").split(",") if d.strip()]
        if shared:
            payload["shared_with"] = shared

        def apply(data):
            cluster = Cluster.objects.filter(name=data.pop("cluster")).first()
            if cluster is None:
                raise _invalid("cluster", "No such cluster.")
            slug = data.pop("department")
            department = Department.objects.filter(slug=slug).first() if slug else None
            if slug and department is None:
                raise _invalid("department", "No such department.")
            source_services.data_source_create(actor=request.user, cluster=cluster, department=department,
                                               shared_with=_source_departments(data.pop("shared_with")), **data)
            messages.success(request, f"Data source {data['name']} saved.")

        errors = submit_form(DataSourceInputSerializer, payload, apply)
        if not errors:
            return redirect("lab:data_sources")
    rows = data_sources_for(request.user)
    changeable = set(DataSource.objects.restrict(request.user, CHANGE).values_list("pk", flat=True))
    # The lab's default cluster comes first and is chosen unless the form says otherwise: every job that mounts
    # a source runs on the source's cluster, so the alphabetically first one would pin them there unasked.
    clusters = list(Cluster.objects.order_by("-is_default", "name").values_list("name", "is_default")) \
        if may_declare else []
    if may_declare and not values.get("cluster"):
        values["cluster"] = next((name for name, default in clusters if default), "")
    return render_form(request, "lab/data_sources.html",
                       {"membership": m, "rows": rows, "changeable": changeable, "values": values,
                        "may_declare": may_declare, "clusters": clusters}, errors)


@login_required
@require_POST
def data_source_delete(request, pk: int):
    source = DataSource.objects.get_or_404(request.user, CHANGE, pk=pk)
    act_and_flash(request, lambda: source_services.data_source_delete(actor=request.user, source=source),
                  f"Data source {source.name} deleted.")
    return redirect("lab:data_sources")
