"""The What-if page: replay the recorded history under the policy and quotas in force and under a proposal,
and compare (department and platform admins)."""

from __future__ import annotations

import json

from django.contrib.auth.decorators import login_required
from django.shortcuts import render
from django.views.decorators.http import require_http_methods

from engine.types import TIERS
from portal.models import Department
from portal.tenancy import CHANGE, VIEW, require_role
from quotas.models import Flavor
from scheduling.services import whatif as svc
from scheduling.services.whatif import WhatIfError, quota_change
from scheduling.views.policy import WHATIF_SESSION_KEY, policy_from_text

WHATIF_WINDOWS = (1, 7, 30, 90)  # days of history an admin may replay
QUOTA_INPUTS = ("nominal", "borrowing_limit", "lending_limit")


def _quota_grid(user, quotas: dict) -> list[dict]:
    """Department x flavor rows the admin may propose quotas for (a department admin: their own department):
    the departments they may change, through the tenancy gate."""
    depts = Department.objects.restrict(user, CHANGE).order_by("slug")
    flavors = list(Flavor.objects.order_by("name").values_list("name", flat=True))
    rows = []
    for d in depts.values_list("slug", flat=True):
        # each flavor, then the department's per-cluster quotas of it (``flavor@cluster``)
        keys = [k for f in flavors for k in (f, *sorted(k for k in quotas.get(d, {}) if k.startswith(f + "@")))]
        for f in keys:
            q = quotas.get(d, {}).get(f)
            initial = {k: ("" if q is None or q.get(k) is None else str(q[k])) for k in QUOTA_INPUTS}
            rows.append({"department": d, "flavor": f, "exists": q is not None, "initial": initial,
                         "inputs": [(k, f"quota:{d}:{f}:{k}") for k in QUOTA_INPUTS]})
    return rows


def _quota_changes(m, post, grid: list[dict]) -> tuple[list, dict]:
    """The quota inputs that differ from what the form showed -> validated QuotaChanges (or form errors).
    A department admin proposes only for the grid's departments (those the gate lets them change)."""
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
    changeable = {r["department"] for r in grid}
    changes = []
    for (dept, flavor), values in sorted(posted.items()):
        initial = shown.get((dept, flavor))
        if initial is not None and all(values.get(k, initial[k]) == initial[k] for k in QUOTA_INPUTS):
            continue  # unchanged
        if initial is None and not m.is_platform_admin and dept not in changeable:
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


def _whatif_tables(res, visible: set[str]) -> dict:
    """The comparison as table rows. A department admin gets their own department's row and the
    cluster-wide figures (which name no department); a platform admin gets every department: ``visible`` is
    the departments the tenancy gate lets the user see."""
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
    for t in TIERS:
        a, b = cur["wait_tier"].get(t), pro["wait_tier"].get(t)
        if a is None and b is None:
            continue
        a, b = a or {}, b or {}
        tiers.append({"tier": t, "avg": _cells("s", a.get("avg"), b.get("avg")),
                      "p95": _cells("s", a.get("p95"), b.get("p95"))})
    depts = []
    for d in sorted(set(cur["wait_dept"]) | set(pro["wait_dept"]) | set(cur["preemptions_dept"])):
        if d not in visible:
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
    cluster-wide figures. Researchers: 403. Synchronous and bounded (scheduling.services.whatif). The runs
    are not stored: what a user sees of one is cut to their departments here."""
    m = require_role(request.user, CHANGE, "The what-if replay is for department and platform admins.")
    current_doc, version = svc.current_policy_doc()
    grid = _quota_grid(request.user, svc.current_quotas())
    errors: dict = {}
    res = tables = None
    days = WHATIF_WINDOWS[1]
    text = json.dumps(current_doc, indent=2, sort_keys=True)
    # A quota change page links here with its proposal in the query string (quota:<dept>:<flavor>:<field>):
    # prefilled, not run, so the admin sees it and presses the button.
    posted_quotas: dict = {k: v for k, v in request.GET.items() if k.startswith("quota:")}
    if request.method == "POST":
        text = request.POST.get("policy", "")
        posted_quotas = {k: v for k, v in request.POST.items() if k.startswith("quota:")}
        try:
            days = int(request.POST.get("days", ""))
            if days not in WHATIF_WINDOWS:
                raise ValueError
        except ValueError:
            errors["days"] = [f"Choose one of {', '.join(map(str, WHATIF_WINDOWS))} days."]
        proposed, policy_errors = policy_from_text(text)
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
            visible = set(Department.objects.restrict(request.user, VIEW).values_list("slug", flat=True))
            tables = _whatif_tables(res, visible)
            if res.policy_changed and m.is_platform_admin:
                request.session[WHATIF_SESSION_KEY] = res.proposed_policy
    for row in grid:
        row["cells"] = [(name, posted_quotas.get(name, row["initial"][k])) for k, name in row["inputs"]]
    return render(request, "scheduling/whatif.html", {
        "membership": m, "version": version, "policy_json": text, "grid": grid, "errors": errors,
        "windows": WHATIF_WINDOWS, "days": days, "res": res, "tables": tables,
        "policy_changes": _policy_changes(current_doc, res.proposed_policy) if res and res.policy_changed else [],
        "max_jobs": svc.max_jobs(), "time_limit_s": svc.time_limit_s(),
    }, status=400 if errors else 200)
