"""Teams in the lab file (``teams:`` of a department): read through the API's serializers, applied through the
same services, exported back, pruned; every bad row an error with its line, nothing half-applied."""

from __future__ import annotations

import pytest
import yaml

from lab import demo
from lab.services.labfile import LabFileInvalid, apply_lab, dump, export_lab
from portal.models import Membership, Team
from quotas.models import TeamQuota

pytestmark = pytest.mark.django_db

DEMO = demo.LAB_FILE.read_text()
START = DEMO.index("    teams:\n")
END = DEMO.index("  - slug: nlp")


def _with_teams(block: str) -> str:
    return DEMO[:START] + block + DEMO[END:]


def _state():
    return (sorted((t.slug, t.name) for t in Team.objects.all()),
            sorted((q.team.slug, q.flavor.name, q.nominal, q.lending_limit) for q in TeamQuota.objects.select_related(
                "team", "flavor")),
            sorted((m.user.username, m.team.slug, m.team_admin) for m in Membership.objects.filter(
                team__isnull=False).select_related("user", "team")))


def test_the_demo_lab_declares_two_teams_and_exports_them_back():
    result = apply_lab(DEMO)
    assert [line.split(" (")[0] for line in result.lines if line.startswith("+ team")] == [
        "+ team vision/detection", "+ team vision/segmentation", "+ team quota vision/detection/a100-80gb",
        "+ team quota vision/segmentation/a100-80gb", "+ team member vision/detection/bob",
        "+ team member vision/segmentation/alice"]
    assert _state() == ([("detection", "Object detection"), ("segmentation", "Segmentation")],
                        [("detection", "a100-80gb", 2, None), ("segmentation", "a100-80gb", 2, None)],
                        [("alice", "segmentation", True), ("bob", "detection", False)])
    assert apply_lab(DEMO).unchanged
    vision = next(d for d in yaml.safe_load(dump(export_lab()))["departments"] if d["slug"] == "vision")
    assert vision["teams"] == [
        {"slug": "detection", "name": "Object detection",
         "quotas": {"a100-80gb": {"nominal": 2, "borrowing_limit": None, "lending_limit": None}},
         "members": [{"user": "bob"}]},
        {"slug": "segmentation", "name": "Segmentation",
         "quotas": {"a100-80gb": {"nominal": 2, "borrowing_limit": None, "lending_limit": None}},
         "members": [{"user": "alice", "admin": True}]},
    ]


def test_moving_quota_between_teams_applies_decreases_first_and_prune_removes_what_is_left_out():
    apply_lab(DEMO)
    moved = _with_teams(
        "    teams:\n"
        "      - slug: detection\n        name: Object detection\n"
        "        quotas:\n          a100-80gb: {nominal: 1}\n        members:\n          - {user: bob}\n"
        "      - slug: segmentation\n        name: Segmentation\n"
        "        quotas:\n          a100-80gb: {nominal: 3, lending_limit: 1}\n")
    apply_lab(moved)  # 2+2 -> 1+3: never 5 on the way
    assert _state()[1] == [("detection", "a100-80gb", 1, None), ("segmentation", "a100-80gb", 3, 1)]
    assert ("alice", "segmentation", True) in _state()[2]  # without prune she stays
    apply_lab(moved, prune=True)
    assert _state()[2] == [("bob", "detection", False)]
    apply_lab(_with_teams("    teams: []\n"), prune=True)
    assert not Team.objects.exists() and not Membership.objects.filter(team__isnull=False).exists()


@pytest.mark.parametrize(("block", "message"), [
    ("    teams:\n      - slug: Bad Slug\n", "Enter a valid"),
    ("    teams:\n      - slug: a\n      - slug: a\n", "a is declared twice"),
    ("    teams:\n      - slug: a\n        quotas:\n          a100-80gb: {nominal: 5}\n", "1 above vision's nominal of 4"),
    ("    teams:\n      - slug: a\n        quotas:\n          a100-80gb: {nominal: 2, lending_limit: 3}\n",
     "lending limit (3) is above the nominal (2)"),
    ("    teams:\n      - slug: a\n        quotas:\n          h100: {nominal: 1}\n", "no flavor h100"),
    ("    teams:\n      - slug: a\n        members:\n          - {user: carol}\n", "carol is not a member of vision"),
    ("    teams:\n      - slug: a\n        members:\n          - {user: bob}\n      - slug: b\n        members:\n"
     "          - {user: bob}\n", "bob is in team a already"),
    ("    teams:\n      - slug: a\n        members:\n          - {admin: true}\n", "user is required"),
    ("    teams:\n      - slug: a\n        colour: red\n", "unknown field"),
])
def test_bad_teams_are_refused_with_their_line_before_anything_changes(block, message):
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(_with_teams(block))
    text = str(exc.value)
    assert message in text and "teams" in text and "line " in text, text
    assert not Team.objects.exists()
