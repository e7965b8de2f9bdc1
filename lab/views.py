"""The lab pages: departments, members, quotas (and quota requests), flavors, clusters and node groups (the pages
for department secrets and data sources are `workload_pages`).

Like the budget pages, each form is read by the API's own input serializer (``portal.forms.form_payload``)
and applied by the same service the API calls, so both accept the same input and write the same audit
entries. Bad input re-renders the form with its errors (HTTP 400) and writes nothing. Reads go through the
tenancy gate: another department is a 404, a missing role a 403.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods, require_POST

from lab.api.serializers import (
    DepartmentArchiveSerializer,
    DepartmentUpdateSerializer,
    MemberUpdateSerializer,
)
from lab.inputs import DepartmentCreateSerializer, MemberCreateSerializer
from lab.quota_pages import QUOTA_INPUTS, whatif_link
from lab.services import departments, invitations, members
from portal.errors import Forbidden, NotFound, PortalError
from portal.forms import (
    act_and_flash,
    form_payload,
    labels_into,
    refusal_text,
    render_form,
    service_errors,
    submit_form,
)
from portal.models import Department, Membership, Role, UserTier
from portal.tenancy import ADMIN, CHANGE, VIEW, member, require_role
from quotas import selectors as quota_selectors
from quotas.api.views import (
    FlavorInputSerializer,
    QuotaRequestDecisionSerializer,
)
from quotas.models import Flavor, FlavorKind, Quota, QuotaChangeRequest
from quotas.services import flavors as flavor_services
from quotas.services import quota_requests as quota_requests_service
from quotas.services import rules
from scheduling.api.clusters import ClusterCreateSerializer, ClusterUpdateSerializer, NodeGroupInputSerializer
from scheduling.models import Cluster
from scheduling.services import cluster_config

CLUSTER_FORM_FIELDS = ("name", "backend", "is_default", "state", "cost_rank", "kubeconfig", "kubeconfig_env",
                       "context", "in_cluster", "namespace_template")


# ------------------------------------------------------------------------------------------ departments


@login_required
@require_http_methods(["GET", "POST"])
def home(request):
    """Platform admins: every department, and a form to create one. Everyone else: their department."""
    m = member(request.user)
    if not m.is_platform_admin:
        if request.method == "POST":
            raise Forbidden("Only platform admins can create departments.")
        return redirect("lab:department", slug=m.department.slug)
    errors: dict = {}
    values = request.POST.dict() if request.method == "POST" else {}
    if request.method == "POST":
        def apply(data):
            dept = departments.department_create(actor=request.user, **data)
            messages.success(request, f"Department {dept.slug} created.")

        errors = submit_form(DepartmentCreateSerializer, form_payload(request.POST, ("slug", "name", "comment")), apply)
        if not errors:
            return redirect("lab:home")
    depts = Department.objects.restrict(request.user, VIEW).order_by("archived_at", "slug")
    pending = QuotaChangeRequest.objects.restrict(request.user, VIEW).filter(state="pending").count()
    return render_form(request, "lab/home.html", {"membership": m, "departments": depts, "values": values,
                                              "pending_requests": pending}, errors)


def _department_context(request, dept: Department, m) -> dict:
    rows = list(Membership.objects.restrict(request.user, VIEW).filter(department=dept).select_related("user")
                .order_by("user__username"))
    invited = invitations.invited_at(dept)
    for row in rows:
        row.invited_at = invited.get(row.user.username)
    return {
        "membership": m, "department": dept, "members": rows,
        "quotas": Quota.objects.restrict(request.user, VIEW).filter(department=dept).select_related("flavor",
                                                                                                  "cluster"),
        "requests": QuotaChangeRequest.objects.restrict(request.user, VIEW).filter(department=dept)
        .select_related("flavor", "requested_by", "decided_by")[:20],
        "can_change": Department.objects.permits(request.user, dept, CHANGE),
        "roles": [(v, label) for v, label in Role.choices if m.is_platform_admin or v != Role.PLATFORM_ADMIN],
        "tiers": UserTier.choices,
        "invitations": invitations.needed(),
    }


@login_required
@require_http_methods(["GET", "POST"])
def department(request, slug: str):
    """A department: its members (its admins add, change and remove them), its quotas and requests; platform
    admins also rename it."""
    dept = Department.objects.get_or_404(request.user, VIEW, slug=slug)
    m = member(request.user)
    errors: dict = {}
    values = {"role": Role.RESEARCHER, "user_tier": UserTier.STANDARD, "name": dept.name}
    if request.method == "POST":
        values = request.POST.dict()
        if request.POST.get("action") == "rename":
            dept = Department.objects.get_or_404(request.user, ADMIN, slug=slug,
                                                 message="Only platform admins rename departments.")

            def apply(data):
                departments.department_rename(department=dept, actor=request.user, **data)
                messages.success(request, f"Department {slug} renamed.")

            errors = submit_form(DepartmentUpdateSerializer, form_payload(request.POST, ("name", "comment")), apply)
        else:
            dept = Department.objects.get_or_404(request.user, CHANGE, slug=slug,
                                                 message="Only the department's admins add members.")

            def apply(data):
                added = members.member_add(department=dept, actor=request.user, invite=True, **data)
                invited = f" and invited by e-mail ({added.user.email})" if added.invited else ""
                messages.success(request, f"{added.user.username} added to {slug} as {added.get_role_display()}"
                                          f"{invited}.")

            errors = submit_form(MemberCreateSerializer, form_payload(
                request.POST, ("username", "email", "role", "user_tier", "comment")), apply)
        if not errors:
            return redirect("lab:department", slug=slug)
    return render_form(request, "lab/department.html", {**_department_context(request, dept, m), "values": values},
                   errors)


def _membership(request, slug: str, username: str) -> Membership:
    Department.objects.get_or_404(request.user, VIEW, slug=slug)
    return Membership.objects.select_related("user", "department").get_or_404(
        request.user, CHANGE, department__slug=slug, user__username=username, missing="No such member.",
        message="Only the department's admins change its members.")


def _member_post(request, slug: str, apply_errors: dict):
    if apply_errors:
        dept = Department.objects.get(slug=slug)
        return render_form(request, "lab/department.html", {
            **_department_context(request, dept, member(request.user)), "values": request.POST.dict()},
            apply_errors)
    return redirect("lab:department", slug=slug)


@login_required
@require_POST
def member_change(request, slug: str, username: str):
    target = _membership(request, slug, username)

    def apply(data):
        members.member_change(membership=target, actor=request.user, **data)
        messages.success(request, f"{username} updated.")

    return _member_post(request, slug, submit_form(MemberUpdateSerializer,
                                               form_payload(request.POST, ("role", "user_tier", "comment")), apply))


@login_required
@require_POST
def member_invite(request, slug: str, username: str):
    """Send a member who never signed in their invitation to choose a password again."""
    target = _membership(request, slug, username)
    try:
        members.member_invite_again(membership=target, actor=request.user)
    except PortalError as exc:
        return _member_post(request, slug, service_errors(exc))
    messages.success(request, f"Invitation sent again to {username} ({target.user.email}).")
    return redirect("lab:department", slug=slug)


@login_required
@require_POST
def member_remove(request, slug: str, username: str):
    target = _membership(request, slug, username)
    try:
        members.member_remove(membership=target, actor=request.user, comment=request.POST.get("comment", ""))
    except PortalError as exc:
        return _member_post(request, slug, service_errors(exc))
    messages.success(request, f"{username} removed from {slug}; the account and its history stay.")
    return redirect("lab:department", slug=slug)


@login_required
@require_http_methods(["GET", "POST"])
def archive(request, slug: str):
    """Platform admins: what archiving would do, then archive with a reason and a confirmation."""
    dept = Department.objects.get_or_404(request.user, ADMIN, slug=slug,
                                         message="Only platform admins archive departments.")
    m = member(request.user)
    errors: dict = {}
    values = request.POST.dict() if request.method == "POST" else {}
    if request.method == "POST":
        def apply(data):
            done = departments.department_archive(department=dept, actor=request.user, **data)
            messages.success(request, f"{slug} archived; {len(done['cancelled_job_ids'])} waiting job(s) "
                                      "cancelled.")

        errors = submit_form(DepartmentArchiveSerializer, form_payload(request.POST, ("reason", "confirm"),
                                                                   checkboxes=("confirm",)), apply)
        if not errors:
            return redirect("lab:department", slug=slug)
    return render_form(request, "lab/archive.html", {"membership": m, "department": dept, "values": values,
                                                 "impact": departments.archive_impact(dept)}, errors)


@login_required
@require_POST
def restore(request, slug: str):
    dept = Department.objects.get_or_404(request.user, ADMIN, slug=slug,
                                         message="Only platform admins restore departments.")
    act_and_flash(request, lambda: departments.department_restore(
        department=dept, actor=request.user, reason=request.POST.get("reason", "")),
        f"{slug} restored: it takes jobs and members again.")
    return redirect("lab:department", slug=slug)


# ------------------------------------------------------------------------------------------ quotas


@login_required
def quota_requests(request):
    m = require_role(request.user, CHANGE, "Quota requests are for department and platform admins.")
    rows = QuotaChangeRequest.objects.restrict(request.user, VIEW).select_related(
        "department", "flavor", "cluster", "requested_by", "decided_by").order_by("state", "-requested_at", "-id")[:200]
    rows = list(rows)
    changes = quota_selectors.quota_request_changes(rows)
    return render(request, "lab/quota_requests.html", {
        "membership": m, "requests": [(r, whatif_link(r.department.slug, r.flavor.name, {
            k: "" if getattr(r, k) is None else getattr(r, k) for k in QUOTA_INPUTS},
            r.cluster.name if r.cluster else None), changes[r.pk], any(c[3] for c in changes[r.pk])) for r in rows]})


def _decide(request, pk: int, decide):
    req = QuotaChangeRequest.objects.select_related("department", "flavor", "cluster", "requested_by").get_or_404(
        request.user, ADMIN, pk=pk, missing="No such quota request.",
        message="Only platform admins decide quota requests.")
    s = QuotaRequestDecisionSerializer(data=form_payload(request.POST, ("comment",)))
    if not s.is_valid():
        messages.error(request, "; ".join(str(e) for v in s.errors.values() for e in v))
        return redirect("lab:quota_requests")
    try:
        decide(req, s.validated_data)
    except PortalError as exc:
        messages.error(request, f"Request {pk} not applied: {refusal_text(exc)}")
    return redirect("lab:quota_requests")


@login_required
@require_POST
def quota_request_approve(request, pk: int):
    def decide(req, data):
        _, q = quota_requests_service.quota_request_approve(req=req, actor=request.user, **data)
        for w in q.warnings:
            messages.warning(request, w)
        where = f" on {req.cluster.name}" if req.cluster else ""
        messages.success(request, f"Request {pk} approved: {req.department.slug}/{req.flavor.name}{where} "
                                  f"nominal {q.nominal}.")
    return _decide(request, pk, decide)


@login_required
@require_POST
def quota_request_reject(request, pk: int):
    def decide(req, data):
        quota_requests_service.quota_request_reject(req=req, actor=request.user, **data)
        messages.success(request, f"Request {pk} rejected.")
    return _decide(request, pk, decide)


# ------------------------------------------------------------------------------------------ flavors, clusters


@login_required
@require_http_methods(["GET", "POST"])
def flavors(request):
    """Platform admins: create a flavor (a whole GPU or a MIG profile) or change an existing one."""
    m = require_role(request.user, ADMIN, "Only platform admins manage flavors.")
    errors: dict = {}
    values = request.GET.dict()
    if "name" in values and "resource_name" not in values:
        f = Flavor.objects.filter(name=values["name"]).first()
        if f is not None:
            values.update(resource_name=f.resource_name, gpu_memory_gib=str(f.gpu_memory_gib),
                          description=f.description,
                          node_labels=", ".join(f"{k}={v}" for k, v in (f.node_labels or {}).items()))
    if request.method == "POST":
        values = request.POST.dict()
        payload = form_payload(request.POST, ("name", "resource_name", "gpu_memory_gib", "description"),
                               integers=("gpu_memory_gib",))
        pre: dict = {}
        labels_into(request.POST, "node_labels", payload, pre)

        def apply(data):
            name = data.pop("name")
            existing = Flavor.objects.filter(name=name).first()
            if existing is None:
                flavor_services.flavor_create(actor=request.user, name=name, **data)
                messages.success(request, f"Flavor {name} created.")
            else:
                flavor_services.flavor_update(flavor=existing, actor=request.user, **data)
                messages.success(request, f"Flavor {name} saved.")

        errors = submit_form(FlavorInputSerializer, payload, apply, pre)
        if not errors:
            return redirect("lab:flavors")
    rows = [(f, rules.flavor_capacity(f)) for f in Flavor.objects.order_by("name")]
    return render_form(request, "lab/flavors.html", {"membership": m, "rows": rows, "values": values}, errors)


@login_required
@require_POST
def flavor_delete(request, name: str):
    require_role(request.user, ADMIN, "Only platform admins manage flavors.")
    flavor = Flavor.objects.filter(name=name).first()
    if flavor is None:
        raise NotFound("No such flavor.")
    act_and_flash(request, lambda: flavor_services.flavor_delete(flavor=flavor, actor=request.user),
                  f"Flavor {name} deleted.")
    return redirect("lab:flavors")


@login_required
@require_http_methods(["GET", "POST"])
def clusters(request):
    """Platform admins: clusters, and node groups of the clusters whose nodes the portal declares."""
    m = require_role(request.user, ADMIN, "Only platform admins manage clusters.")
    errors: dict = {}
    values = {"backend": "simulated", **request.GET.dict()}
    if request.method == "POST":
        values = request.POST.dict()
        if request.POST.get("action") == "cluster":
            payload = form_payload(request.POST, CLUSTER_FORM_FIELDS, integers=("cost_rank",),
                                   checkboxes=("is_default", "in_cluster"))
            pre: dict = {}
            labels_into(request.POST, "labels", payload, pre)

            def apply(data):
                c = cluster_config.cluster_create(actor=request.user, **data)
                messages.success(request, f"Cluster {c.name} created.")

            errors = submit_form(ClusterCreateSerializer, payload, apply, pre)
        elif request.POST.get("action") == "topology":  # the node label keys of its network levels
            cluster = Cluster.objects.filter(name=request.POST.get("cluster", "")).first()
            if cluster is None:
                raise NotFound("No such cluster.")
            levels = [k.strip() for k in request.POST.get("topology_levels", "").split(",") if k.strip()]

            def apply(data):
                cluster_config.cluster_update(cluster=cluster, actor=request.user, **data)
                messages.success(request, f"Cluster {cluster.name}'s topology levels saved.")

            errors = submit_form(ClusterUpdateSerializer, {"topology_levels": levels}, apply)
        elif request.POST.get("action") == "cpu_on_gpu_nodes":  # lend the GPU nodes' spare CPU to a CPU pool
            cluster = Cluster.objects.filter(name=request.POST.get("cluster", "")).first()
            if cluster is None:
                raise NotFound("No such cluster.")

            def apply(data):
                cluster_config.cluster_update(cluster=cluster, actor=request.user, **data)
                pool = data.get("cpu_on_gpu_nodes")
                messages.success(request, f"Cluster {cluster.name}: " + (
                    f"CPU pool {pool} may use its GPU nodes' spare CPU." if pool else "no CPU work on its GPU nodes."))

            errors = submit_form(ClusterUpdateSerializer, form_payload(
                request.POST, ("cpu_on_gpu_nodes", "gpu_reserve_cores", "gpu_reserve_memory_gib"),
                integers=("gpu_reserve_cores", "gpu_reserve_memory_gib"), nullable=("cpu_on_gpu_nodes",)), apply)
        elif request.POST.get("action") == "state":  # drain, cordon or reopen a cluster
            cluster = Cluster.objects.filter(name=request.POST.get("cluster", "")).first()
            if cluster is None:
                raise NotFound("No such cluster.")

            def apply(data):
                cluster_config.cluster_update(cluster=cluster, actor=request.user, **data)
                messages.success(request, f"Cluster {cluster.name} is {data['state']} now.")

            errors = submit_form(ClusterUpdateSerializer, form_payload(request.POST, ("state", "comment")), apply)
        else:
            cluster = Cluster.objects.filter(name=request.POST.get("cluster", "")).first()
            flavor = Flavor.objects.filter(name=request.POST.get("flavor", "")).first()
            pre = {}
            if cluster is None:
                pre["cluster"] = ["Choose a cluster."]
            if flavor is None:
                pre["flavor"] = ["Choose a flavor."]
            group = request.POST.get("group", "").strip()

            def apply(data):
                data.pop("flavor")
                cluster_config.node_group_set(cluster=cluster, actor=request.user, name=group, flavor=flavor, **data)
                messages.success(request, f"Node group {cluster.name}/{group} saved.")

            errors = submit_form(NodeGroupInputSerializer, form_payload(
                request.POST, ("flavor", "nodes", "gpus_per_node", "comment"), integers=("nodes", "gpus_per_node")),
                apply, pre)
        if not errors:
            return redirect("lab:clusters")
    rows = [(c, sorted(cluster_config.node_groups(c).items()), cluster_config.inventory_owned(c),
             c.nodes.select_related("flavor").order_by("name")) for c in Cluster.objects.order_by("name")]
    return render_form(request, "lab/clusters.html", {
        "membership": m, "rows": rows, "values": values, "backends": cluster_config.BACKENDS, "states": cluster_config.STATES,
        "flavors": Flavor.objects.order_by("name"), "clusters": Cluster.objects.order_by("name"),
        "cpu_pools": Flavor.objects.filter(kind=FlavorKind.CPU).order_by("name")}, errors)


@login_required
@require_POST
def node_group_delete(request, name: str, group: str):
    require_role(request.user, ADMIN, "Only platform admins manage clusters.")
    cluster = Cluster.objects.filter(name=name).first()
    if cluster is None:
        raise NotFound("No such cluster.")
    act_and_flash(request, lambda: cluster_config.node_group_delete(cluster=cluster, actor=request.user, name=group),
                  f"Node group {name}/{group} removed.")
    return redirect("lab:clusters")
