"""Predictive right-sizing: EWMA (alpha 0.3) over finished attempts per owner and job family or image, x1.2."""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.test import Client
from django.utils import timezone

from observability.models import AttemptUsage, PredictionOutcome, UsageHistory
from observability.services import collect as collect_service
from observability.services.rightsizing import ALPHA, family, learn
from scheduling.models import Job, JobState

pytestmark = pytest.mark.django_db


def test_families():
    assert family("resnet-50-lr3") == "resnet-*"
    assert family("resnet_101") == "resnet-*"
    assert family("bert") == "bert"
    assert family("7b-finetune") == "7b-finetune"


def _finished(lab, n: int, *, busy: float, mem: float, minutes: float, name="resnet-50", owner=None) -> Job:
    now = timezone.now()
    job = Job.objects.create(owner=owner or lab.alice, department=lab.vision, flavor=lab.a100, name=name,
                             image="nvcr.io/pytorch:24", command=["x"], gpus_per_pod=4, state=JobState.SUCCEEDED,
                             finished_at=now)
    usage = AttemptUsage.objects.create(job=job, attempt=1, source="prometheus", gpus=4, samples=30,
                                        started_at=now - timedelta(minutes=minutes), ended_at=now,
                                        busy_gpus=busy, peak_memory_mib=mem, mean_util=busy * 25, final=True)
    learn(usage, succeeded=True)
    return job


def test_ewma_and_the_recommendation(lab):
    runs = [(1.0, 30000, 60), (1.5, 32000, 70), (1.2, 31000, 65), (1.4, 33000, 80), (1.3, 31000, 60),
            (1.3, 31744, 62)]
    for i, (busy, mem, minutes) in enumerate(runs):
        _finished(lab, i, busy=busy, mem=mem, minutes=minutes, name=f"resnet-{i}")
    expected = runs[0][0]
    for busy, _, _ in runs[1:]:
        expected = ALPHA * busy + (1 - ALPHA) * expected
    history = UsageHistory.objects.get(owner=lab.alice, key="name:resnet-*")
    assert history.runs == 6 and history.busy_gpus == pytest.approx(expected)
    c = Client()
    c.force_login(lab.alice)
    body = c.get("/api/v1/recommendations", {"name": "resnet-152", "image": "other"}).json()
    assert body["found"] and body["runs"] == 6 and body["key"] == "name:resnet-*"
    assert body["gpus"] == 2  # 1.3 busy GPUs need a second one
    assert body["text"].startswith("your last 6 runs of resnet-* used 1.3 of 4 GPUs and 31 GB; ask for 2")
    assert body["max_runtime_s"] == pytest.approx(history.runtime_s * 1.2, abs=1)
    # The image's history answers for a name never seen.
    assert c.get("/api/v1/recommendations", {"image": "nvcr.io/pytorch:24"}).json()["key"] == \
        "image:nvcr.io/pytorch:24"
    # Five predictions were checked against what happened (the first run had no history).
    assert PredictionOutcome.objects.filter(key="name:resnet-*").count() == 5
    # The submit form shows it.
    assert "ask for 2" in c.get("/jobs/new").content.decode()


def test_recommendations_are_the_owners_alone(lab):
    _finished(lab, 0, busy=1, mem=1000, minutes=10)
    c = Client()
    c.force_login(lab.amy)  # same department, not her runs
    assert c.get("/api/v1/recommendations", {"name": "resnet-50"}).json()["found"] is False


def test_bad_input_is_a_400_with_field_errors(lab):
    c = Client()
    c.force_login(lab.alice)
    r = c.get("/api/v1/recommendations")
    assert r.status_code == 400 and "name" in r.json()["error"]["fields"]
    r = c.get("/api/v1/recommendations", {"name": "x", "gpu": "2"})
    assert r.status_code == 400 and "gpu" in r.json()["error"]["fields"]
    r = c.get("/api/v1/recommendations", {"name": "x" * 64})
    assert r.status_code == 400 and "name" in r.json()["error"]["fields"]


def test_the_collector_learns_when_an_attempt_ends(lab, settings):
    settings.PROMETHEUS_URL = ""
    settings.SIM_SPEEDUP = 1
    job = Job.objects.create(owner=lab.alice, department=lab.vision, flavor=lab.a100, name="vit-b16", image="i",
                             command=["x"], gpus_per_pod=2, state=JobState.RUNNING, env={"SIM_GPU_PROFILE": "busy"},
                             started_at=timezone.now() - timedelta(minutes=30))
    collect_service.collect()
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED, finished_at=timezone.now())
    assert collect_service.collect().finalized == 1
    assert collect_service.collect().finalized == 0  # learnt once
    history = UsageHistory.objects.get(owner=lab.alice, key="name:vit-*")
    assert history.runs == 1 and history.runtime_s == pytest.approx(30 * 60, abs=5)


def test_the_accuracy_page_is_for_platform_admins(lab):
    for i in range(3):
        _finished(lab, i, busy=1 + i * 0.1, mem=1000, minutes=10)
    c = Client()
    c.force_login(lab.alice)
    assert c.get("/observability/predictions/").status_code == 403
    c.force_login(lab.root)
    page = c.get("/observability/predictions/").content.decode()
    assert 'id="errors"' in page and "busy_gpus" in page


@pytest.mark.parametrize(("busy", "held", "ask"), [
    (0.9, 2, 1),  # holds 2, saturates one: 1 (ceil(0.9 x 1.2) = 2 told it to keep both)
    (1.02, 2, 1),  # one saturated GPU and sampling noise
    (1.0, 4, 1),
    (1.3, 4, 2),
    (1.9, 2, 2),  # keeps both busy: keep both, never "ask for 3"
    (3.95, 4, 4),
    (0.1, 1, 1),  # at least one
])
def test_the_whole_gpu_rule_sizes_down(lab, busy, held, ask):
    from observability.services.rightsizing import whole_gpus

    assert whole_gpus(busy, held) == ask


def test_a_job_saturating_one_of_two_gpus_is_told_one(lab):
    now = timezone.now()
    for _ in range(3):
        job = Job.objects.create(owner=lab.alice, department=lab.vision, flavor=lab.a100, name="llm-7b",
                                 image="img:1", command=["x"], gpus_per_pod=2, state=JobState.SUCCEEDED,
                                 finished_at=now)
        usage = AttemptUsage.objects.create(job=job, attempt=1, source="prometheus", gpus=2, samples=30,
                                            started_at=now - timedelta(minutes=30), ended_at=now, busy_gpus=0.9,
                                            peak_memory_mib=20000, mean_util=45, final=True)
        learn(usage, succeeded=True)
    c = Client()
    c.force_login(lab.alice)
    body = c.get("/api/v1/recommendations", {"name": "llm-13b"}).json()
    assert body["gpus"] == 1 and "ask for 1" in body["text"]


def test_the_quote_shows_the_recommendation_and_estimates_with_the_predicted_run_time(lab, submit, go):
    """alice's resnet jobs take about 10 minutes though they ask for 8 hours: a job waiting behind her running
    one is estimated to start after about 12 minutes of runtime (x1.2), not 8 hours."""
    from django.conf import settings

    from scheduling.services.cycle import run_cycle
    from scheduling.services.inventory import sync_cluster

    for _ in range(3):
        _finished(lab, 0, busy=0.9, mem=20000, minutes=10, name="resnet-50")
    running = go(submit, lab.alice, name="resnet-50", pods=2, gpus=4, max_runtime_s=8 * 3600)
    go(run_cycle)
    go(sync_cluster)
    running.refresh_from_db()
    assert running.state == "running"
    c = Client()
    c.force_login(lab.bob)
    body = {"name": "bert", "image": "img:1", "command": ["x"], "flavor": "a100-80gb", "gpus": 4,
            "max_runtime_s": 3600}
    quote = c.post("/api/v1/jobs/quote", body, content_type="application/json").json()
    assert quote["recommendation"] is None  # bob has no history
    start = datetime.fromisoformat(quote["start"]["estimated_start"].replace("Z", "+00:00"))
    wall = (start - running.started_at).total_seconds() * settings.SIM_SPEEDUP  # in runtime seconds
    assert 10 * 60 <= wall <= 13 * 60, wall
    # the job waiting in the queue gets the same estimate from the cycle
    waiting = go(submit, lab.bob, name="bert", gpus=4, max_runtime_s=3600)
    go(run_cycle)
    waiting.refresh_from_db()
    assert 10 * 60 <= (waiting.estimated_start - running.started_at).total_seconds() * settings.SIM_SPEEDUP <= 13 * 60
    # alice's quote carries her recommendation
    c.force_login(lab.alice)
    mine = c.post("/api/v1/jobs/quote", {**body, "name": "resnet-101", "gpus": 2},
                  content_type="application/json").json()
    assert mine["recommendation"]["gpus"] == 1 and "ask for 1" in mine["recommendation"]["text"]
