"""The cluster page (capacity per flavor) and the scheduling policy page (read by members, edited by platform
admins)."""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from engine.policy import in_priority_band
from engine.types import URGENCIES, USER_TIERS
from portal import dispatch
from portal.errors import PortalError
from portal.money import MCR_PER_CREDIT
from portal.tenancy import ADMIN, member, require_role
from quotas.selectors import preemption_limits
from scheduling.models import PolicyProposal, PolicyVersion
from scheduling.selectors import cluster_grid, cluster_summary, sessions_overview, topology_overview
from scheduling.services import tuning
from scheduling.services.policy import current_policy, policy_as_dict, policy_update
from simulator.tuner import config_to_dict

# The last policy proposed on the What-if page, for "apply in the policy editor".
WHATIF_SESSION_KEY = "whatif_policy"


@login_required
def cluster(request):
    m = member(request.user)
    data = cluster_summary()
    grid = cluster_grid(request.user)
    departments = sorted({c["department"] for row in grid for c in row["cells"] if c["kind"] == "job"})
    return render(request, "scheduling/cluster.html", {
        "summary": data, "membership": m, "show_nodes": m.is_platform_admin, "grid": grid,
        "domains": topology_overview(data),
        "sessions": sessions_overview() if m.is_platform_admin else None, "idle_minutes": settings.SESSION_IDLE_MINUTES,
        "departments": {d: i % 8 for i, d in enumerate(departments)}})


def policy_from_text(text: str) -> tuple[dict | None, dict]:
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
    m = member(request.user)
    errors: dict = {}
    text, comment = None, ""
    if request.method == "POST":
        require_role(request.user, ADMIN, "Only platform admins change the policy.")
        text, comment = request.POST.get("policy", ""), request.POST.get("comment", "")
        data, errors = policy_from_text(text)
        if not errors:
            try:
                policy_update(user=request.user, data=data, comment=comment)
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
    # each pair's weight as saved (blank: default_weight applies), and whether it is in the priority band
    matrix = [(u, [(weights.get(u, {}).get(t, ""), in_priority_band(current, u, t)) for t in USER_TIERS])
              for u in URGENCIES]
    return render(request, "scheduling/policy.html", {
        "membership": m, "policy": data, "version": version, "matrix": matrix, "user_tiers": USER_TIERS,
        # the policy's bid_weight counts per mcr, as bids travel in the API; the page speaks credits
        "bid_points_per_credit": f"{data.get('bid_weight', 0) * MCR_PER_CREDIT:g}",
        "policy_json": text if text is not None else json.dumps(data, indent=2, sort_keys=True),
        "comment": comment, "errors": errors, "can_edit": m.is_platform_admin,
        "from_whatif": request.method == "GET" and text is not None,
        "versions": PolicyVersion.objects.select_related("author").order_by("-version")[:50],
        # read-only here: the lab file declares them (docs/lab-as-code.md)
        "preemption_limits": preemption_limits() if m.is_platform_admin else None,
        # the policy tuner's latest run and configuration: platform admins only
        "tuning": tuning_context() if m.is_platform_admin else None,
    }, status=400 if errors else 200)


# ------------------------------------------------------------------------------------------ the tuner

TARGET_LABELS = {"realtime": "Realtime started within 5 min (share)", "urgent": "High+critical wait / routine wait",
                 "idle": "GPU-time idle while jobs waited (share)"}


def _target_label(name: str) -> str:
    if name.startswith("dept:"):
        return f"{name[5:]}: p95 wait / the lab's p95 wait"
    return TARGET_LABELS.get(name, name)


def _fmt(value) -> str:
    return "—" if value is None else f"{value:.3g}"


def tuning_context() -> dict:
    """The policy page's tuner section: the latest run, its figures per target, the lab's configuration."""
    p = tuning.latest_proposal()
    rows = []
    if p is not None:
        order = {"realtime": 0, "urgent": 1, "dept": 2, "idle": 3}
        for name in sorted(p.limits or p.current, key=lambda n: (order.get(n.split(":", 1)[0], 4), n)):
            lim = (p.limits or {}).get(name, {})
            rows.append({"name": name, "label": _target_label(name),
                         "limit": ("≥ " if lim.get("at_least") else "≤ ") + _fmt(lim.get("limit")),
                         "measured": _fmt((p.measured or {}).get(name)), "current": _fmt(p.current.get(name)),
                         "predicted": _fmt((p.predicted or {}).get(name)) if p.predicted else "",
                         "improves": name in p.improves, "costs": name in p.costs})
    config = tuning.tuner_config()
    return {"proposal": p, "rows": rows, "config_json": json.dumps(config_to_dict(config), indent=2),
            "config": config, "interval_s": settings.POLICY_TUNER_INTERVAL_S,
            "max_change_pct": round(100 * config.max_change), "auto_change_pct": round(100 * config.auto_max_change)}


@login_required
@require_http_methods(["POST"])
def tuner_run(request):
    """"Run the tuner now": queued (a week's replays take minutes); the result heads the section."""
    require_role(request.user, ADMIN, "Only platform admins run the policy tuner.")
    dispatch.send_now("scheduling.tuning.run", PolicyProposal.Trigger.DEMAND, request.user.pk)
    messages.success(request, "The tuner is replaying the last week; its proposal appears here when it is done.")
    return redirect("dashboard:policy")


@login_required
@require_http_methods(["POST"])
def proposal_decide(request, pk: int, verb: str):
    require_role(request.user, ADMIN, "Only platform admins decide the policy tuner's proposals.")
    try:
        if verb == "apply":
            p = tuning.apply_proposal(int(pk), user=request.user)
            messages.success(request, f"Applied as policy version {p.applied_version}. The next cycle uses it.")
        else:
            tuning.dismiss_proposal(int(pk), user=request.user, comment=request.POST.get("comment", ""))
            messages.success(request, "Dismissed.")
    except PortalError as exc:
        messages.error(request, exc.message)
    return redirect("dashboard:policy")


@login_required
@require_http_methods(["POST"])
def tuner_config(request):
    require_role(request.user, ADMIN, "Only platform admins change the policy tuner's configuration.")
    data, errors = policy_from_text(request.POST.get("config", ""))
    if not errors:
        try:
            tuning.tuner_config_update(user=request.user, data=data)
            messages.success(request, "Saved. The tuner's next run uses it.")
            return redirect("dashboard:policy")
        except PortalError as exc:
            errors = {k: [i["message"] for i in v] for k, v in (exc.fields or {}).items()} or {"config": [exc.message]}
    for field, msgs in errors.items():
        messages.error(request, f"Tuner configuration: {field.replace('policy', 'config')}: {' '.join(msgs)}")
    return redirect("dashboard:policy")
