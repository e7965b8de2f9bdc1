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


SWEEP = {"name": "lr-sweep", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "flavor": "a100-80gb", "gpus": 1,
         "command": ["python", "train.py", "--lr-index", "{{index}}"], "max_runtime_s": 1800,
         "env": {"SIM_DURATION_S": "900"}, "array": "0-63%8"}


def _sweep_then_eval(capture, busy: bool):
    """The walk-through's sweep and evaluation on the demo's lab, as alice; ``busy``: nlp and robotics hold
    their nominal GPUs first, as the demo's own jobs keep them busy."""
    apply_lab(demo.LAB_FILE.read_text())
    if busy:
        with capture(execute=True):
            assert _as("carol").post("/api/v1/jobs", job_payload(name="nlp", gpus=3), format="json").status_code == 201
            assert _as("erin").post("/api/v1/jobs", job_payload(name="rob", gpus=1), format="json").status_code == 201
            run_cycle()
    with capture(execute=True):
        array = _as("alice").post("/api/v1/arrays", SWEEP, format="json").json()
        run_cycle()
    body = {**{k: v for k, v in SWEEP.items() if k != "array"}, "name": "evaluate",
            "after": f"afterok:a{array['id']}"}
    with capture(execute=True):
        ev = _as("alice").post("/api/v1/jobs", body, format="json").json()
        run_cycle()
    tasks = Job.objects.filter(array_id=array["id"])
    admitted = tasks.filter(state=JobState.ADMITTED).count()
    waiting = sorted({j.reason_code for j in tasks.filter(state=JobState.QUEUED)})
    evaluation = Job.objects.get(pk=ev["id"])
    minutes = (evaluation.estimated_start - evaluation.queued_at).total_seconds() / 60
    return admitted, waiting, pytest.approx(minutes, abs=0.25)  # (the wall's seconds the test itself took)


def test_the_sweeps_figures_on_an_idle_lab(django_capture_on_commit_callbacks, settings):
    settings.SIM_SPEEDUP = 60
    # vision's 4 nominal GPUs and 4 borrowed from nlp and robotics: the throttle's 8 at once; 8 rounds of
    # 30 minutes' max runtime (4 hours of the cluster's clock, 4 wall minutes at 60x) before the evaluation
    assert _sweep_then_eval(django_capture_on_commit_callbacks, busy=False) == (8, ["array_throttled"], 4.0)


def test_the_sweeps_figures_when_the_other_departments_use_their_quotas(django_capture_on_commit_callbacks, settings):
    settings.SIM_SPEEDUP = 60
    # vision's nominal 4, less the GPU kept free for realtime work while every running job is in its
    # cooldown: 3 at once; the others' jobs end within their hour, then vision borrows: 4.5 hours, 4.5 minutes
    assert _sweep_then_eval(django_capture_on_commit_callbacks, busy=True) == (3, ["realtime_headroom"], 4.5)
