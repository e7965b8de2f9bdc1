"""docs/teams.md's walk-through, step by step, on the demo's lab file: vision's two teams, a split refused above
the department's nominal, a team at its borrowing limit, then borrowing from the cohort while the sibling's
guarantee stays free for it."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from lab import demo
from lab.services.labfile import apply_lab
from scheduling.models import Job, JobState
from scheduling.services.cycle import run_cycle
from tests.conftest import job_payload

pytestmark = pytest.mark.django_db

SPLIT = "/api/v1/teams/vision/{}/quotas/a100-80gb"


def _as(username: str) -> APIClient:
    c = APIClient()
    c.force_authenticate(get_user_model().objects.get(username=username))
    return c


def test_the_walk_through(django_capture_on_commit_callbacks):
    apply_lab(demo.LAB_FILE.read_text())
    alice, bob = _as("alice"), _as("bob")
    teams = alice.get("/api/v1/teams").json()
    assert [(t["slug"], t["members"]) for t in teams] == [
        ("detection", [{"user": "bob", "team_admin": False}]), ("segmentation", [{"user": "alice", "team_admin": True}])]
    assert alice.put(SPLIT.format("segmentation"), {"nominal": 2, "lending_limit": 0}, format="json").status_code == 200
    refused = alice.put(SPLIT.format("detection"), {"nominal": 3}, format="json")
    assert refused.status_code == 400
    assert ("The teams' nominal quotas of a100-80gb would add up to 5, 1 above vision's nominal of 4"
            in refused.json()["error"]["fields"]["nominal"][0]["message"])
    assert alice.put(SPLIT.format("detection"), {"nominal": 2, "borrowing_limit": 0}, format="json").status_code == 200
    big = bob.post("/api/v1/jobs", job_payload(name="big", gpus=3), format="json").json()
    with django_capture_on_commit_callbacks(execute=True):
        run_cycle()
    waiting = bob.get(f"/api/v1/jobs/{big['id']}").json()
    assert waiting["team"] == "detection" and waiting["reason"]["code"] == "team_borrow_limit"
    assert waiting["reason"]["message"] == ("The job's team is at its borrowing limit for this GPU type: the job "
                                            "needs 3 GPUs, more than team detection may ever hold (2).")
    assert bob.get("/api/v1/jobs").json()["results"][0]["team"] == "detection"  # gpup ls's TEAM column
    assert alice.put(SPLIT.format("detection"), {"nominal": 2, "borrowing_limit": None},
                     format="json").status_code == 200
    with django_capture_on_commit_callbacks(execute=True):
        run_cycle()
    started = Job.objects.get(pk=big["id"])
    assert started.state == JobState.ADMITTED and started.borrowed is True  # 2 of its team's, 1 of the cohort's
    mine = alice.post("/api/v1/jobs", job_payload(name="seg", gpus=2), format="json").json()
    with django_capture_on_commit_callbacks(execute=True):
        run_cycle()
    seg = Job.objects.get(pk=mine["id"])
    assert seg.state == JobState.ADMITTED and seg.team.slug == "segmentation" and seg.borrowed is False
