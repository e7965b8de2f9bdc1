"""docs/sweeps.md's walk-throughs, step by step, on the demo's lab file: the whole queue as another department
sees it, and a member's limits set by their department's admin."""

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


def _as(username: str) -> APIClient:
    c = APIClient()
    c.force_authenticate(get_user_model().objects.get(username=username))
    return c


def test_the_limits_and_the_queue_of_the_walk_through(django_capture_on_commit_callbacks):
    apply_lab(demo.LAB_FILE.read_text())
    alice, bob, dave = _as("alice"), _as("bob"), _as("dave")
    r = alice.put("/api/v1/departments/vision/user-limit", {"max_gpus": 4, "max_queued": 20}, format="json")
    assert r.status_code == 200
    assert alice.put("/api/v1/user-limits/bob", {"max_gpus": 2, "max_queued": 2}, format="json").status_code == 200
    assert [row["user"] for row in alice.get("/api/v1/user-limits").json()] == [None, "bob"]
    first = bob.post("/api/v1/jobs", job_payload(name="first", gpus=2), format="json").json()
    second = bob.post("/api/v1/jobs", job_payload(name="second", gpus=2), format="json").json()
    with django_capture_on_commit_callbacks(execute=True):
        run_cycle()
    assert Job.objects.get(pk=first["id"]).state == JobState.ADMITTED
    waiting = bob.get(f"/api/v1/jobs/{second['id']}").json()
    assert waiting["reason"]["code"] == "user_gpu_limit"
    assert "bob holds 2 of 2 GPUs, 2 requested" in waiting["reason"]["message"]
    assert waiting["queue_position"] == 1
    # the whole queue, as nlp's dave sees it: vision's job by department and size
    rows = dave.get("/api/v1/queue?flavor=a100-80gb").json()["results"]
    assert [(r["position"], r["department"], r["gpus"], r["reason"], r.get("name")) for r in rows] == [
        (1, "vision", 2, "user_gpu_limit", None)]
    # two more while second waits: one is queued, the next refused
    assert bob.post("/api/v1/jobs", job_payload(name="third"), format="json").status_code == 201
    refused = bob.post("/api/v1/jobs", job_payload(name="fourth"), format="json")
    assert refused.status_code == 429 and refused.json()["error"]["code"] == "limit_reached"
    assert "You have 2 job(s) waiting to start; vision allows 2 per member at once" in refused.json()["error"]["message"]
    assert alice.delete("/api/v1/user-limits/bob").status_code == 204
