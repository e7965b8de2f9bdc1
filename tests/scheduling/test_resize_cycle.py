"""Resizable jobs in the portal's own cycle (simulated backend): admitted at the size that fits, grown into GPUs
that free up and shrunk for a job that needs them, each resize decided by a cycle, applied at the job's
checkpoint, with its pods, its placement, its size and its timeline following."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from engine import reasons
from scheduling.models import JobState, SimPod
from scheduling.services import resizes
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.jobs import job_cancel
from scheduling.services.snapshot import build_snapshot

pytestmark = pytest.mark.django_db


def resizable(submit, user, **fields):
    return submit(user, gpus=1, pods=8, min_pods=2, checkpoint_interval_s=600, **fields)


def pods_of(job):
    return list(SimPod.objects.filter(job_id=job.pk, attempt=job.attempt).order_by("index")
                .values_list("index", "phase", "gated", "node"))


def later(job, seconds):
    """A time ``seconds`` after the job's decided resize is due."""
    return timezone.datetime.fromisoformat(job.resize["due_at"]) + timedelta(seconds=seconds)


@pytest.fixture
def started(lab, submit, go):
    """Bob's 4-GPU job holds one node; Alice's job of 2 to 8 one-GPU pods starts on the other, at 3: one GPU
    stays free for realtime work (the policy's headroom, as Bob's job is within its cooldown)."""
    blocker = submit(lab.bob, gpus=4)
    go(run_cycle)
    job = resizable(submit, lab.alice)
    go(run_cycle)
    go(sync_cluster)
    job.refresh_from_db()
    return blocker, job


def test_a_resizable_job_is_admitted_at_the_largest_size_that_fits(started):
    _, job = started
    assert job.state == JobState.RUNNING
    assert (job.current_pods, len(job.placement), job.size, job.total_gpus) == (3, 3, 3, 3)
    assert [p[1] for p in pods_of(job)] == ["Running"] * 3
    admitted = job.events.get(to_state=JobState.ADMITTED)
    assert "at 3 pods (its size range: 2..8)" in admitted.message
    assert admitted.data["size"] == {"pods": 3, "min_pods": 2, "max_pods": 8}


def test_the_snapshot_gives_the_engine_the_range_and_the_size(started, lab, submit):
    _, job = started
    queued = resizable(submit, lab.amy)
    snap, _ = build_snapshot(now=timezone.now())
    running = next(r for r in snap.running if r.id == job.pk)
    assert (running.min_pods, running.max_pods, running.pods, running.resizing) == (2, 8, 3, False)
    pending = next(p for p in snap.pending if p.id == queued.pk)
    assert (pending.min_pods, pending.pods) == (2, 8)


def test_it_grows_into_freed_gpus_at_its_checkpoint(started, lab, go):
    blocker, job = started
    go(job_cancel, user=lab.bob, job=blocker)
    go(run_cycle)
    job.refresh_from_db()
    assert job.resize["to"] == 8 and job.resize["direction"] == "up" and job.resize["state"] == resizes.DECIDED
    decided = job.events.get(reason_code="resize_decided")
    assert decided.data["from"] == 3 and decided.data["to"] == 8 and decided.data["reason"] == "idle"
    assert "grows from 3 to 8 pods into GPUs no waiting job can use" in decided.message
    # Until its checkpoint it keeps its 3 pods, and the engine sees the 8 GPUs held for it
    assert len(pods_of(job)) == 3 and job.size == 3
    snap, _ = build_snapshot(now=timezone.now())
    running = next(r for r in snap.running if r.id == job.pk)
    assert (running.pods, running.resizing) == (8, True)

    go(run_cycle, now=later(job, 1))
    job.refresh_from_db()
    assert job.resize is None and job.current_pods == 8 and len(job.placement) == 8 and job.total_gpus == 8
    assert [p[:3] for p in pods_of(job)] == [(i, "Running", False) for i in range(8)]
    assert [p[3] for p in pods_of(job)] == job.placement
    resized = job.events.get(reason_code="resized")
    assert (resized.data["from"], resized.data["to"]) == (3, 8)
    assert job.borrowed  # the grown pods are borrowed (preemptible) capacity
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING  # the sync reads the attempt at its new size, nothing broken


def test_it_shrinks_for_a_realtime_job_instead_of_anyone_being_preempted(started, lab, submit, go):
    blocker, job = started
    go(job_cancel, user=lab.bob, job=blocker)
    go(run_cycle)
    job.refresh_from_db()
    go(run_cycle, now=later(job, 1))
    job.refresh_from_db()
    assert job.size == 8

    session = submit(lab.bob, gpus=2, tier="realtime")
    go(run_cycle)
    job.refresh_from_db()
    session.refresh_from_db()
    assert session.state == JobState.QUEUED and session.reason_code == reasons.WAITING_FOR_RESIZE
    assert job.resize["direction"] == "down" and job.resize["for_job"] == session.pk
    assert job.resize["to"] == 6
    assert not job.events.filter(kind="preemption").exists()
    go(run_cycle)  # the shrink is under way: the session still waits for it, not for a cooldown or capacity
    session.refresh_from_db()
    assert session.reason_code == reasons.WAITING_FOR_RESIZE and session.reason_detail == {"resizing": [job.pk]}
    assert f"resizable job {job.pk} gives back GPUs" in session.reason_message

    go(run_cycle, now=later(job, 1))  # the checkpoint: the two highest ranks go
    job.refresh_from_db()
    assert job.resize is None and job.size == 6 and len(job.placement) == 6
    assert [p[0] for p in pods_of(job)] == list(range(6))
    assert "shrunk for job" in job.events.filter(reason_code="resized").latest("id").message
    go(run_cycle)
    session.refresh_from_db()
    assert session.state == JobState.ADMITTED
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


def test_a_new_attempt_starts_with_no_size_and_no_resize(started, lab, go):
    from scheduling.services.lifecycle import requeue

    blocker, job = started
    go(job_cancel, user=lab.bob, job=blocker)
    go(run_cycle)
    job.refresh_from_db()
    assert job.resize is not None
    go(requeue, job=job, outcome="platform_failure", reason="NodeLost", message="node lost")
    job.refresh_from_db()
    assert (job.state, job.current_pods, job.resize, job.size) == (JobState.QUEUED, None, None, 8)


def test_the_api_and_the_page_show_the_size_now_the_range_and_the_resize(started, lab, go, client_for):
    from django.urls import reverse

    blocker, job = started
    body = client_for(lab.alice).get(f"/api/v1/jobs/{job.pk}").json()
    assert body["size"] == {"pods": 3, "min_pods": 2, "max_pods": 8, "resize": None}
    go(job_cancel, user=lab.bob, job=blocker)
    go(run_cycle)
    size = client_for(lab.alice).get(f"/api/v1/jobs/{job.pk}").json()["size"]
    assert size["pods"] == 3 and size["resize"]["to"] == 8 and size["resize"]["state"] == "decided"
    c = client_for()
    c.force_login(lab.alice)
    page = c.get(reverse("dashboard:job", args=[job.pk])).content.decode()
    assert "resizable, 2 to 8 pods" in page and "3 pods now" in page and "growing to 8 at its checkpoint" in page
    fixed = client_for(lab.bob).get(f"/api/v1/jobs/{blocker.pk}").json()
    assert fixed["size"] is None


def test_the_quote_judges_a_resizable_job_at_the_size_the_cycle_would_start_it_at(started, lab, client_for, payload):
    # 1 GPU is free beside Alice's 3 and Bob's 4: a fixed 2-pod job waits, a 1..2 one starts now at 1
    fixed = client_for(lab.amy).post("/api/v1/jobs/quote", payload(pods=2), format="json").json()
    assert not fixed["start"]["starts_now"]
    body = client_for(lab.amy).post("/api/v1/jobs/quote", payload(pods=2, min_pods=1, checkpoint_interval_s=600),
                                    format="json").json()
    assert body["start"]["starts_now"] and len(body["start"]["nodes"]) == 1
    assert "at 1 of its 1..2 pods" in body["start"]["message"]


def test_a_grow_the_cluster_keeps_refusing_is_rolled_back_and_the_job_keeps_one_size(started, lab, go, monkeypatch):
    from scheduling.backends.base import BackendError
    from scheduling.backends.simulated import SimulatedBackend

    blocker, job = started
    go(job_cancel, user=lab.bob, job=blocker)
    go(run_cycle)
    job.refresh_from_db()
    made = []

    def refuse(self, podset, before, after):
        # the first new rank is made, then the cluster refuses the next: a half-made grow
        made.append(SimPod.objects.get_or_create(cluster=self.name, namespace=podset.namespace,
                                                 name=podset.pod_name(3), job_id=podset.job_id,
                                                 attempt=podset.attempt, index=3))
        raise BackendError("the namespace's quota refused pod 4")

    monkeypatch.setattr(SimulatedBackend, "resize", refuse)
    for k in range(resizes.MAX_TRIES):
        go(run_cycle, now=later(job, 1 + k * (resizes.RETRY_S + 1)))
    job.refresh_from_db()
    assert job.resize is None and job.size == 3 and len(job.placement) == 3
    assert [p[0] for p in pods_of(job)] == [0, 1, 2]  # the half-made rank is gone: one size of pods
    rolled = job.events.get(reason_code="resize_rolled_back")
    assert f"after {resizes.MAX_TRIES} refused tries" in rolled.message and "quota refused" in rolled.message
    assert not job.events.filter(reason_code="resized").exists()
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


def test_a_job_that_checkpoints_when_asked_is_told_and_its_answer_applies_the_resize_at_once(lab, submit, go):
    from rest_framework.test import APIClient

    from scheduling.services import notice

    blocker = submit(lab.bob, gpus=4)
    go(run_cycle)
    job = resizable(submit, lab.alice, notice_s=120)
    go(run_cycle)
    go(sync_cluster)
    go(job_cancel, user=lab.bob, job=blocker)
    go(run_cycle)
    job.refresh_from_db()
    assert job.resize["to"] == 8
    told = job.events.get(reason_code="resize_decided")
    # due at the notice's end at the latest (its periodic checkpoint is ten minutes away)
    assert timezone.datetime.fromisoformat(job.resize["due_at"]) <= told.at + timedelta(seconds=120)
    token = notice.attempt_token(job.pk, job.attempt)
    answer = go(APIClient().post, f"/api/v1/jobs/{job.pk}/checkpoint-written", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert answer.status_code == 200, answer.content
    assert (answer.json()["resize_to"], answer.json()["preemption"]) == (8, None)
    go(run_cycle)  # no waiting for the notice's end
    job.refresh_from_db()
    assert job.size == 8 and job.resize is None
    assert job.events.filter(reason_code="checkpoint_written", kind="resize").count() == 1
    again = APIClient().post(f"/api/v1/jobs/{job.pk}/checkpoint-written", HTTP_AUTHORIZATION=f"Bearer {token}")
    assert again.status_code == 409  # nothing waits for an answer any more


def test_a_resize_decided_before_the_pods_run_waits_for_a_checkpoint_counted_from_their_start(
        lab, submit, go):
    blocker = submit(lab.bob, gpus=4)
    go(run_cycle)
    go(sync_cluster)
    job = resizable(submit, lab.alice)
    go(run_cycle)
    go(job_cancel, user=lab.bob, job=blocker)
    go(run_cycle)  # decided while its pods are not running yet
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.resize["state"] == resizes.DECIDED
    every = timezone.datetime.fromisoformat(job.resize["due_at"]) - job.admitted_at  # 600 job-s on this cluster
    resizes.start_due(now=later(job, 1))  # its checkpoint counted from admission has come: it has written none
    job.refresh_from_db()
    assert job.resize["state"] == resizes.DECIDED
    # the pods start 5 minutes after admission (an image pulled slowly)
    start = job.admitted_at + timedelta(minutes=5)
    SimPod.objects.filter(job_id=job.pk, attempt=job.attempt).update(started_at=start)
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.started_at == start
    assert timezone.datetime.fromisoformat(job.resize["due_at"]) == start + every
    assert "counted from their start" in job.events.get(reason_code="resize_due").message
    go(run_cycle, now=start + every - timedelta(seconds=1))
    job.refresh_from_db()
    assert job.resize["state"] == resizes.DECIDED
    go(run_cycle, now=later(job, 1))
    job.refresh_from_db()
    assert job.resize is None and job.current_pods == 8


def test_the_quote_of_a_resizable_job_covers_its_range_and_says_grown_gpus_are_borrowed(started, lab, client_for,
                                                                                        payload, client, settings):
    from quotas.models import Price
    from scheduling.api.serializers import QuoteSerializer

    Price.objects.create(flavor=lab.a100, tier="elastic", per_gpu_hour=1000)
    body = payload(pods=2, min_pods=1, checkpoint_interval_s=600, max_runtime_s=3600)
    q = client_for(lab.amy).post("/api/v1/jobs/quote", body, format="json").json()
    assert set(q) == set(QuoteSerializer().fields)  # the schema's fields are the answer's
    size = q["size_range"]
    # it would start at 1 pod now (1 GPU free): 1 GPU-h at 1.000; grown to 2, the grown GPU at the clearing price,
    # the base price here (nobody bids); the hold is every GPU of its largest size
    assert (size["min_pods"], size["max_pods"], size["start_pods"], size["start_gpus"], size["max_gpus"]) == (
        1, 2, 1, 1, 2)
    assert (size["cost_at_start"], size["cost_at_largest"], size["hold"]) == (1000, 2000, q["estimated_cost"])
    assert (size["grow_rate"], size["grow_basis"], size["grown_borrowed"]) == (1000, "base", True)
    assert "borrowed, preemptible capacity" in size["message"]
    # a job that cannot resize has no range
    assert client_for(lab.amy).post("/api/v1/jobs/quote", payload(pods=2), format="json").json()[
        "size_range"] is None
    # one that cannot start now is quoted at its minimum, where it waits
    wide = client_for(lab.amy).post("/api/v1/jobs/quote", payload(pods=8, min_pods=2, checkpoint_interval_s=600,
                                                                  max_runtime_s=3600), format="json").json()
    assert not wide["start"]["starts_now"]
    assert (wide["size_range"]["start_pods"], wide["size_range"]["cost_at_start"],
            wide["size_range"]["cost_at_largest"]) == (2, 2000, 8000)
    # with the estimate skipped, the size it would start at is not known: its minimum is quoted
    limit, settings.QUOTE_ESTIMATE_MAX_JOBS = settings.QUOTE_ESTIMATE_MAX_JOBS, 1
    skipped = client_for(lab.amy).post("/api/v1/jobs/quote", body, format="json").json()
    assert skipped["start"]["skipped"] and skipped["size_range"]["start_pods"] == 1
    assert skipped["size_range"]["message"].startswith("Quoted at its minimum, 1 of its 1..2 pods")
    settings.QUOTE_ESTIMATE_MAX_JOBS = limit
    # bad ranges are the submit's 400s, with the field
    for bad, field in (({"pods": 2, "min_pods": 3}, "min_pods"), ({"pods": 2, "min_pods": 0}, "min_pods")):
        r = client_for(lab.amy).post("/api/v1/jobs/quote", payload(**bad, checkpoint_interval_s=600), format="json")
        assert r.status_code == 400 and field in r.json()["error"]["fields"], r.content
    # the submit form's quote says it too
    client.force_login(lab.amy)
    html = client.post("/jobs/new/quote", {
        "name": "train-1", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": "python train.py",
        "flavor": "a100-80gb", "gpus": "1", "pods": "2", "min_pods": "1", "checkpoint_interval_s": "600",
        "cpu": "4", "memory": "16Gi", "tier": "elastic", "urgency": "normal", "task_type": "train",
        "max_runtime_s": "3600", "bid": "0"}).content.decode()
    assert 'data-quote="size-range">1.000 cr at 1 pod (where it would start now), 2.000 cr grown to 2' in html
    assert "borrowed, preemptible capacity at the clearing price (1.000 cr per GPU-hour now)" in html
