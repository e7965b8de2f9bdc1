"""The cluster page (capacity per flavor) and the scheduling policy page (read by members, edited by platform
admins)."""

from __future__ import annotations

import json

from django.conf import settings
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.shortcuts import redirect, render
from django.views.decorators.http import require_http_methods

from portal.errors import PortalError
from portal.money import MCR_PER_CREDIT
from portal.tenancy import ADMIN, member, require_role
from scheduling.core.policy import in_priority_band
from scheduling.core.types import URGENCIES, USER_TIERS
from scheduling.models import PolicyVersion
from scheduling.selectors import cluster_grid, cluster_summary, sessions_overview
from scheduling.services.policy import current_policy, policy_as_dict, policy_update

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
    }, status=400 if errors else 200)
