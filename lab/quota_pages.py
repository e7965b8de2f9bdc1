"""The quota form of a department (``lab:quota``): platform admins set a quota, department admins request one.

The form always opens with the quota in force for the flavor (and cluster) it shows, and switching the flavor
fills in that flavor's quota, so a change of one number keeps the others. A limit is either a number or an
explicit "no limit" (borrow without limit, lend all of the unused nominal): a blank limit is an error, never
"no limit", because approving a request whose lending was left blank used to lift a department's lending
limit without anyone choosing it.
"""

from __future__ import annotations

from urllib.parse import urlencode

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect
from django.urls import reverse
from django.views.decorators.http import require_http_methods

from portal.forms import form_payload, render_form, submit_form
from portal.models import Department
from portal.tenancy import CHANGE, member
from quotas.api.views import QuotaRequestCreateSerializer, QuotaUpdateSerializer
from quotas.models import Flavor, Quota, QuotaResource
from quotas.services import quota_requests as quota_requests_service
from quotas.services import rules
from scheduling.models import Cluster

QUOTA_INPUTS = ("nominal", "borrowing_limit", "lending_limit")
# Each limit's "no limit" checkbox, and the words of the error when neither a number nor it is given.
NO_LIMIT = {
    "borrowing_limit": ("borrowing_unlimited", "Give a borrowing limit, or tick \"no borrowing limit\"."),
    "lending_limit": ("lending_all", "Give a lending limit, or tick \"lend all\" (no lending limit)."),
}


def whatif_link(slug: str, flavor: str, values: dict, cluster: str | None = None) -> str:
    """The What-if page with this quota change prefilled (it reads ``quota:<dept>:<scope>:<field>``, the scope
    being the flavor, or ``flavor@cluster`` for a per-cluster quota)."""
    scope = f"{flavor}@{cluster}" if cluster else flavor
    query = {f"quota:{slug}:{scope}:{k}": values.get(k, "") for k in QUOTA_INPUTS if k in values}
    return f"{reverse('dashboard:whatif')}?{urlencode(query)}"


def scope_choices(flavors: list) -> list[tuple[str, str, Flavor, str]]:
    """The form's flavor choices: (value, label, flavor, resource). A GPU flavor is one choice, its GPUs; a CPU
    pool two, its cores and its memory (``pool/cpu``, ``pool/memory``), each a quota of its own."""
    out = []
    for f in flavors:
        if f.is_cpu:
            out += [(f"{f.name}/{QuotaResource.CPU}", f"{f.name}: cores", f, QuotaResource.CPU),
                    (f"{f.name}/{QuotaResource.MEMORY}", f"{f.name}: memory (GiB)", f, QuotaResource.MEMORY)]
        else:
            out.append((f.name, f"{f.name} (MIG)" if f.is_mig else f.name, f, QuotaResource.GPUS))
    return out


def scope_value(q: Quota) -> str:
    return q.flavor.name if q.resource == QuotaResource.GPUS else f"{q.flavor.name}/{q.resource}"


def quota_values(q: Quota | None) -> dict:
    """The form's values for a quota in force: its numbers, and each "no limit" ticked where it has none. A
    scope without a quota gives blanks and nothing ticked: the admin chooses every limit."""
    if q is None:
        return dict.fromkeys(QUOTA_INPUTS, "")
    values = {k: "" if getattr(q, k) is None else str(getattr(q, k)) for k in QUOTA_INPUTS}
    for field, (box, _) in NO_LIMIT.items():
        if getattr(q, field) is None:
            values[box] = "on"
    return values


def _initial(request, current: dict, choices: list) -> dict:
    """GET: the scope asked for (``?flavor=&cluster=``), else the first flavor the department has a global
    quota of, else the first flavor; with the quota in force unless the query gives the numbers itself."""
    values = request.GET.dict()
    if not values.get("flavor"):
        held = [c[0] for c in choices if (c[0], "") in current]
        values["flavor"] = held[0] if held else (choices[0][0] if choices else "")
    if "nominal" not in values:
        values.update(quota_values(current.get((values["flavor"], values.get("cluster", "")))))
    return values


def limits_payload(post, payload: dict, pre: dict) -> None:
    """Each limit from its number or its "no limit" box, into ``payload``; a blank number without the box, or
    both, is a field error in ``pre``."""
    for field, (box, message) in NO_LIMIT.items():
        given = post.get(field, "").strip() != ""
        if box in post and given:
            pre[field] = ["Give a number or tick \"no limit\", not both."]
        elif box in post:
            payload[field] = None
        elif not given:
            pre[field] = [message]


def _apply(request, *, m, dept, flavor, resource, cluster, current, reason: str):
    scope = "" if flavor is None else flavor.name if resource == QuotaResource.GPUS else f"{flavor.name}/{resource}"
    where = f"{dept.slug}/{scope}" + (f" on {cluster.name}" if cluster else "")

    def set_quota(data):
        data = {k: v for k, v in data.items() if k not in ("flavor", "comment")}
        q = current.get((scope, cluster.name if cluster else ""))
        if q is None:
            q = rules.quota_create(department=dept, flavor=flavor, cluster=cluster, actor=request.user,
                                   comment=reason, resource=resource, **data)
        else:
            q = rules.quota_set(quota=q, actor=request.user, comment=reason, **data)
        for w in q.warnings:
            messages.warning(request, w)
        messages.success(request, f"Quota of {where} set: nominal {q.nominal}.")

    def file_request(data):
        req = quota_requests_service.quota_request_create(
            department=dept, actor=request.user, flavor=flavor, cluster=cluster, resource=resource,
            **{k: v for k, v in data.items() if k not in ("department", "flavor", "cluster", "resource")})
        messages.success(request, f"Quota request {req.pk} ({where}) filed: a platform admin decides it.")

    return set_quota if m.is_platform_admin else file_request


def _submit(request, *, m, dept, choices, clusters, current) -> dict:
    payload = form_payload(request.POST, ("flavor", "cluster", "nominal", "oversubscribe"), integers=("nominal",),
                           checkboxes=("oversubscribe",))
    payload.update(form_payload(request.POST, ("borrowing_limit", "lending_limit"),
                                integers=("borrowing_limit", "lending_limit")))
    cluster_name = payload.pop("cluster", "") or None
    cluster = next((c for c in clusters if c.name == cluster_name), None)
    pre = {} if cluster_name is None or cluster else {"cluster": ["Choose a cluster, or all clusters."]}
    limits_payload(request.POST, payload, pre)
    chosen = next((c for c in choices if c[0] == payload.get("flavor")), None)
    flavor, resource = (chosen[2], chosen[3]) if chosen else (None, QuotaResource.GPUS)
    if flavor is None:
        pre["flavor"] = ["Choose a flavor."]
    elif flavor.is_cpu and cluster is not None:
        pre["cluster"] = ["A CPU pool's quotas are global: choose all clusters."]
    reason = request.POST.get("reason", "").strip()
    apply = _apply(request, m=m, dept=dept, flavor=flavor, resource=resource, cluster=cluster, current=current,
                   reason=reason)
    if m.is_platform_admin:
        payload.pop("flavor", None)
        return submit_form(QuotaUpdateSerializer, payload, apply, pre)
    payload.update(department=dept.slug, reason=reason)
    return submit_form(QuotaRequestCreateSerializer, payload, apply, pre)


@login_required
@require_http_methods(["GET", "POST"])
def quota(request, slug: str):
    """A quota change for one department: its global quota of a flavor (all clusters) or its quota on one
    cluster. Platform admins apply it (validated against the installed GPUs, of that cluster for a
    per-cluster quota; ``oversubscribe`` accepts more, with a warning); department admins file it as a
    request with a reason."""
    dept = Department.objects.get_or_404(request.user, CHANGE, slug=slug,
                                         message="Only the department's admins can change or request quotas.")
    m = member(request.user)
    flavors = list(Flavor.objects.order_by("name"))
    choices = scope_choices(flavors)
    clusters = list(Cluster.objects.order_by("name"))
    current = {(scope_value(q), q.cluster.name if q.cluster else ""): q
               for q in Quota.objects.filter(department=dept).select_related("flavor", "cluster")}
    values, errors = _initial(request, current, choices), {}
    if request.method == "POST":
        values = request.POST.dict()
        errors = _submit(request, m=m, dept=dept, choices=choices, clusters=clusters, current=current)
        if not errors:
            return redirect("lab:department", slug=slug)
    link = None
    if values.get("flavor") and values.get("nominal") and "/" not in values["flavor"]:  # (what-if: GPU quotas)
        link = whatif_link(slug, values["flavor"], values, values.get("cluster") or None)
    room = quota_room(dept, [f for f in flavors if not f.is_cpu], clusters)
    # each flavor's global quota (all clusters), then the department's quotas of it on one cluster
    per_cluster = sorted((key, q) for key, q in current.items() if key[1])  # keys are unique: q never compared
    rows = []
    for value, label, _, _ in choices:
        rows.append((value, label, "", current.get((value, "")), room.get(value)))
        rows += [(value, label, c, q, room.get(f"{name}@{c}")) for (name, c), q in per_cluster if name == value]
    in_force = {f"{name}@{c}" if c else name: quota_values(q) for (name, c), q in current.items()}
    scope = values.get("flavor", "") + (f"@{values['cluster']}" if values.get("cluster") else "")
    return render_form(request, "lab/quota.html", {
        "membership": m, "department": dept, "choices": choices, "clusters": clusters, "current": current,
        "values": values, "whatif": link, "rows": rows, "in_force": in_force, "room": room,
        "chosen_room": room.get(scope), "several_clusters": len(clusters) > 1}, errors)


def quota_room(dept: Department, flavors: list, clusters: list) -> dict[str, dict]:
    """For each scope (``flavor``, ``flavor@cluster``): its installed GPUs, the nominal quotas the other
    departments hold there, and what is left for ``dept``'s nominal quota, which a request above it is refused
    for (unless it asks to oversubscribe)."""
    room = {}
    for f in flavors:
        for c in [None, *clusters]:
            capacity, others = rules.nominal_room(flavor=f, cluster=c, department=dept)
            room[f.name + (f"@{c.name}" if c else "")] = {"capacity": capacity, "others": others,
                                                          "left": max(capacity - others, 0)}
    return room
