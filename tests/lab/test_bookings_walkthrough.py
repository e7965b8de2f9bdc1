"""docs/bookings.md's walk-through, step by step, on the demo's lab file: a department admin books within its
quota, a platform admin books for another department, a department admin for one of its teams, the conflicts say what is in the way, the calendar hides
another department's purpose, the quote warns of the booking, and a maintenance window drains a node."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth import get_user_model
from django.utils import timezone
from rest_framework.test import APIClient

from lab import demo
from lab.services.labfile import apply_lab
from quotas.models import Wallet

pytestmark = pytest.mark.django_db


def _as(username: str) -> APIClient:
    c = APIClient()
    c.force_authenticate(get_user_model().objects.get(username=username))
    return c


def test_the_bookings_walk_through():
    apply_lab(demo.LAB_FILE.read_text())
    admin, carol, bob = _as("admin"), _as("carol"), _as("bob")
    hour = timezone.now().replace(minute=0, second=0, microsecond=0)
    t, e = (hour + timedelta(hours=2)).isoformat(), (hour + timedelta(hours=5)).isoformat()
    course = {"flavor": "a100-80gb", "gpus": 3, "start": t, "end": e, "purpose": "NLP course"}
    r = carol.post("/api/v1/bookings", course, format="json")
    assert r.status_code == 201, r.content
    r = carol.post("/api/v1/bookings", {**course, "gpus": 1}, format="json")
    assert r.status_code == 400 and "of which 0 are not booked yet" in str(r.json())
    deadline = {**course, "department": "vision", "gpus": 4, "purpose": "CVPR deadline"}
    assert admin.post("/api/v1/bookings", deadline, format="json").status_code == 201
    r = admin.post("/api/v1/bookings", {**deadline, "gpus": 2}, format="json")
    assert r.status_code == 400
    assert "Only 1 of the 8 a100-80gb GPUs on default are free to book" in str(r.json())
    week = bob.get("/api/v1/calendar?days=7").json()
    seen = {row["department"]: row for row in week["bookings"]}
    assert seen["another department"]["purpose"] == "booked by another department"
    assert seen["vision"]["purpose"] == "CVPR deadline"
    # (the demo's simulated cluster runs faster than the wall clock, and a booking's window is wall-clock time:
    # the job's 7 days there are hours of wall time, enough to reach the booking; its credits are not the point)
    Wallet.objects.filter(department__slug="vision").update(balance=10**9)
    q = bob.post("/api/v1/jobs/quote", {"name": "long", "image": "busybox", "command": ["true"],
                                        "flavor": "a100-80gb", "gpus": 2, "tier": "backfill",
                                        "max_runtime_s": 7 * 86400},
                 format="json").json()
    assert q["start"]["code"] == "booked"
    assert "reserved for" in q["start"]["message"] and "could start before the window" in q["start"]["message"]
    assert q["start"]["calendar"]["max_runtime_s_to_start_before"] > 0
    f = (hour + timedelta(hours=8)).isoformat()
    team = {"team": "segmentation", "flavor": "a100-80gb", "gpus": 2, "start": e, "end": f,
            "purpose": "MICCAI deadline"}
    r = _as("alice").post("/api/v1/bookings", team, format="json")
    assert r.status_code == 201 and r.json()["team"] == "segmentation"
    assert bob.post("/api/v1/bookings", {**team, "team": "detection"}, format="json").status_code == 403
    week = bob.get("/api/v1/calendar?days=7").json()
    assert {row["team"] for row in week["bookings"] if row["department"] == "vision"} == {None, "segmentation"}
    friday = (hour + timedelta(days=4)).isoformat()
    r = admin.post("/api/v1/maintenance", {"nodes": ["sim-a100-1"], "start": friday,
                                           "end": (hour + timedelta(days=4, hours=4)).isoformat(),
                                           "reason": "firmware update"}, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["affected_nodes"] == ["sim-a100-1"]
