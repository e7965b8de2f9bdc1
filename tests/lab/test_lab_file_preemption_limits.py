"""Preemption limits in the lab file (``preemption_limits:``): read through the API's serializer, applied through
the audited service, exported back, shown by dry-run (the diff), pruned; every bad row an error with its line.
Platform admins read them through the API and on the policy page (read-only: the file sets them)."""

from __future__ import annotations

import pytest
import yaml

from lab import demo
from lab.services.labfile import LabFileInvalid, apply_lab, dump, export_lab
from portal.models import AuditEntry
from quotas.models import PreemptionLimit

pytestmark = pytest.mark.django_db

DEMO = demo.LAB_FILE.read_text()


def _with(rows: str) -> str:
    return DEMO + "preemption_limits:\n" + rows


def _limits():
    rows = [(x.department.slug if x.department_id else None, x.tier, x.non_preemptible, x.user_tiers,
             x.max_runtime_s, x.surcharge_pct, x.sessions_preemptible)
            for x in PreemptionLimit.objects.select_related("department")]
    return sorted(rows, key=lambda r: (r[0] or "", r[1]))


ROWS = ("  - {tier: elastic, non_preemptible: true, surcharge_pct: 25}\n"
        "  - {department: vision, tier: elastic, non_preemptible: true, user_tiers: [pi], max_runtime_s: 7200}\n"
        "  - {department: vision, tier: realtime, sessions_preemptible: true}\n")


def test_limits_apply_export_diff_and_prune():
    result = apply_lab(_with(ROWS))
    assert [line.split(" (")[0] if "lab-wide" not in line else line.split(" (non")[0] for line in result.lines if "preemption limit" in line] == [
        "+ preemption limit (lab-wide)/elastic", "+ preemption limit vision/elastic",
        "+ preemption limit vision/realtime"]
    assert _limits() == [
        (None, "elastic", True, [], None, 25, False),
        ("vision", "elastic", True, ["pi"], 7200, 0, False),
        ("vision", "realtime", False, [], None, 0, True)]
    assert AuditEntry.objects.filter(action="preemption_limit.set").count() == 3
    assert apply_lab(_with(ROWS)).unchanged  # idempotent
    exported = yaml.safe_load(dump(export_lab()))["preemption_limits"]
    assert exported[0] == {"tier": "elastic", "non_preemptible": True, "user_tiers": [], "max_runtime_s": None,
                           "surcharge_pct": 25, "sessions_preemptible": False, "max_notice_s": 240}
    assert [(x.get("department"), x["tier"]) for x in exported] == [
        (None, "elastic"), ("vision", "elastic"), ("vision", "realtime")]
    # the exported file applies to itself with no change
    assert apply_lab(dump(export_lab())).unchanged
    # the diff (dry-run) names the changed field and changes nothing
    changed = _with(ROWS.replace("surcharge_pct: 25", "surcharge_pct: 40"))
    diff = apply_lab(changed, dry_run=True)
    assert [line for line in diff.lines if "preemption limit" in line] == [
        "~ preemption limit (lab-wide)/elastic: surcharge_pct: 25 -> 40"]
    assert PreemptionLimit.objects.get(department=None).surcharge_pct == 25
    # without prune a row the file leaves out stays; with it, it goes (audited)
    only_lab = _with("  - {tier: elastic, non_preemptible: true, surcharge_pct: 25}\n")
    assert apply_lab(only_lab).unchanged
    pruned = apply_lab(only_lab, prune=True)
    assert sorted(line for line in pruned.lines if "preemption limit" in line) == [
        "- preemption limit vision/elastic", "- preemption limit vision/realtime"]
    assert _limits() == [(None, "elastic", True, [], None, 25, False)]
    assert AuditEntry.objects.filter(action="preemption_limit.delete").count() == 2


def test_a_new_row_lists_its_values():
    result = apply_lab(_with("  - {department: vision, tier: backfill, non_preemptible: true}\n"))
    assert "+ preemption limit vision/backfill (non_preemptible: true, user_tiers: [], surcharge_pct: 0, " \
           "sessions_preemptible: false, max_notice_s: 240)" in result.lines


@pytest.mark.parametrize(("rows", "message"), [
    ("  - {tier: fast}\n", "must be one of realtime, elastic, backfill"),
    ("  - {non_preemptible: true}\n", "tier is required"),
    ("  - {tier: elastic, surcharge_pct: 1001}\n", "less than or equal to 1000"),
    ("  - {tier: elastic, surcharge_pct: -1}\n", "greater than or equal to 0"),
    ("  - {tier: elastic, max_runtime_s: 10}\n", "greater than or equal to 60"),
    ("  - {tier: elastic, user_tiers: [emperor]}\n", "not a valid choice"),
    ("  - {tier: elastic, user_tiers: [pi, pi]}\n", "listed twice"),
    ("  - {tier: elastic, sessions_preemptible: true}\n", "only a realtime limit"),
    ("  - {tier: realtime, non_preemptible: true}\n", "not preemptible anyway"),
    ("  - {tier: elastic, price: 3}\n", "unknown field"),
    ("  - {tier: elastic, max_notice_s: 3601}\n", "less than or equal to 3600"),
    ("  - {department: nowhere, tier: elastic}\n", "no department nowhere"),
    ("  - {tier: elastic}\n  - {tier: elastic}\n", "the lab-wide elastic limit is declared twice"),
    ("  - {department: vision, tier: elastic}\n  - {department: vision, tier: elastic}\n",
     "vision's elastic limit is declared twice"),
    ("  - tier\n", "must be a mapping"),
    ("  tier: elastic\n", "must be a list"),
])
def test_bad_rows_are_refused_with_their_line_before_anything_changes(rows, message):
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(_with(rows))
    text = str(exc.value)
    assert message in text and "preemption_limits" in text and "line " in text, text
    assert not PreemptionLimit.objects.exists()


def test_platform_admins_read_the_limits_through_the_api(lab, client_for):
    PreemptionLimit.objects.create(department=None, tier="backfill", non_preemptible=True)
    PreemptionLimit.objects.create(department=lab.vision, tier="elastic", non_preemptible=True, user_tiers=["pi"],
                                   surcharge_pct=50)
    r = client_for(lab.root).get("/api/v1/preemption-limits")
    assert r.status_code == 200
    rows = [{k: v for k, v in x.items() if k != "updated_at"} for x in r.json()]
    assert rows == [
        {"department": None, "tier": "backfill", "non_preemptible": True, "user_tiers": [], "max_runtime_s": None,
         "surcharge_pct": 0, "sessions_preemptible": False, "max_notice_s": 240},
        {"department": "vision", "tier": "elastic", "non_preemptible": True, "user_tiers": ["pi"],
         "max_runtime_s": None, "surcharge_pct": 50, "sessions_preemptible": False, "max_notice_s": 240}]
    for user in (lab.alice, lab.vadmin, lab.stranger):
        assert client_for(user).get("/api/v1/preemption-limits").status_code == 403
    assert client_for(None).get("/api/v1/preemption-limits").status_code in (401, 403)
    # read-only: the lab file sets them
    assert client_for(lab.root).post("/api/v1/preemption-limits", {"tier": "elastic"},
                                     format="json").status_code == 405


def test_the_policy_page_shows_the_limits_to_platform_admins_only(lab, client):
    PreemptionLimit.objects.create(department=lab.vision, tier="elastic", non_preemptible=True, surcharge_pct=50)
    client.force_login(lab.root)
    page = client.get("/policy/").content.decode()
    assert 'id="preemption-limits"' in page and "50%" in page and "preemption_limits:" in page
    client.force_login(lab.alice)
    assert 'id="preemption-limits"' not in client.get("/policy/").content.decode()
