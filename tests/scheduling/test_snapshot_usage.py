"""Fair share's memory: the adapter's decayed usage per department, and that it reaches the engine."""

from __future__ import annotations

import math
from datetime import timedelta

import pytest
from django.conf import settings
from django.utils import timezone

from scheduling.models import Job, JobState
from scheduling.services.snapshot import build_snapshot, decayed_usage

pytestmark = pytest.mark.django_db

HOUR = 3600.0


def _ran(job, start, end):
    Job.objects.filter(pk=job.pk).update(started_at=start, finished_at=end)


def test_decayed_usage_weighs_each_gpu_second_by_its_age(lab, submit):
    now = timezone.now()
    half_life = HOUR
    recent = submit(lab.alice, gpus=2)  # vision: 2 GPUs for the last hour
    old = submit(lab.bob, gpus=2)  # nlp: 2 GPUs from 3 h to 2 h ago
    running = submit(lab.amy, gpus=1)  # vision: 1 GPU since 30 minutes, still running
    _ran(recent, now - timedelta(hours=1), now)
    _ran(old, now - timedelta(hours=3), now - timedelta(hours=2))
    _ran(running, now - timedelta(minutes=30), None)
    ancient = submit(lab.bob, gpus=4)  # beyond four half-lives: left out
    _ran(ancient, now - timedelta(hours=10), now - timedelta(hours=9))

    usage = decayed_usage(now=now, half_life_s=half_life)

    k = half_life / math.log(2)  # integral of 2^(-age / half_life) over an interval, per GPU
    assert usage["vision"] == pytest.approx(2 * k * (1 - 0.5) + 1 * k * (1 - 0.5**0.5))
    assert usage["nlp"] == pytest.approx(2 * k * (0.5**2 - 0.5**3))
    assert usage["nlp"] < usage["vision"]  # same GPU-hours an hour apart weigh differently


def test_the_snapshot_carries_decayed_usage_into_the_score(lab, submit):
    now = timezone.now()
    busy = submit(lab.alice, gpus=4)
    _ran(busy, now - timedelta(hours=5), now - timedelta(hours=1))
    Job.objects.filter(pk=busy.pk).update(state=JobState.SUCCEEDED)  # finished: no longer pending or running
    snapshot, _ = build_snapshot(now=now)
    assert set(snapshot.usage) == {"vision"} and snapshot.usage["vision"] > 0
    assert not snapshot.pending and not snapshot.running
    # a fresh job of each department: nlp, which used nothing, comes first
    a, b = submit(lab.amy, gpus=1), submit(lab.bob, gpus=1)
    snapshot, _ = build_snapshot(now=now)
    from engine.ordering import Scorer

    scorer = Scorer(snapshot)
    jobs = {j.id: j for j in snapshot.pending}
    assert scorer.score(jobs[b.pk]) > scorer.score(jobs[a.pk])


def test_a_declared_checkpoint_interval_reaches_the_engine_and_the_pod(lab, submit, client_for, payload):
    from scheduling.backends.kube.podspec import ANNOTATION_CHECKPOINT_INTERVAL, pod_annotations
    from scheduling.services.podsets import podset_for

    res = client_for(lab.alice).post(
        "/api/v1/jobs", payload(checkpoint_interval_s=1800), format="json", HTTP_IDEMPOTENCY_KEY="ck-1"
    )
    assert res.status_code == 201, res.content
    assert res.json()["checkpoint_interval_s"] == 1800
    job = Job.objects.get(pk=res.json()["id"])
    undeclared = submit(lab.amy)
    for j, node in ((job, "n0"), (undeclared, "n1")):  # both running: the engine reads it of its victims
        _ran(j, timezone.now() - timedelta(hours=1), None)
        Job.objects.filter(pk=j.pk).update(state=JobState.RUNNING, placement=[node])
    snapshot, _ = build_snapshot(now=timezone.now())
    by_id = {j.id: j for j in snapshot.running}
    # on the wall clock, like every time the engine reads: 1800 s of runtime on a cluster SIM_SPEEDUP faster
    assert by_id[job.pk].checkpoint_interval_s == 1800.0 / settings.SIM_SPEEDUP
    assert by_id[undeclared.pk].checkpoint_interval_s is None
    assert pod_annotations(podset_for(job))[ANNOTATION_CHECKPOINT_INTERVAL] == "1800"
    assert ANNOTATION_CHECKPOINT_INTERVAL not in pod_annotations(podset_for(undeclared))


@pytest.mark.parametrize("value", [0, 59, -1, "often", 1.5, True])
def test_a_bad_checkpoint_interval_is_a_field_error(lab, client_for, payload, value):
    res = client_for(lab.alice).post("/api/v1/jobs", payload(checkpoint_interval_s=value), format="json")
    assert res.status_code == 400
    assert "checkpoint_interval_s" in res.json()["error"]["fields"]
    assert not Job.objects.exists()


@pytest.mark.postgres
def test_the_database_sums_what_the_rows_add_up_to(lab, submit, monkeypatch):
    """On PostgreSQL the weighted GPU-seconds are summed per department and team in the query: the same
    figures as adding each job's row up here (fractions of a GPU, a team, a run cut by the horizon)."""
    from portal.models import Team
    from scheduling.services import snapshot

    now = timezone.now()
    cv = Team.objects.create(department=lab.vision, slug="cv", name="CV")
    shared = submit(lab.alice, gpus=2)
    _ran(shared, now - timedelta(hours=2), now - timedelta(minutes=10))
    Job.objects.filter(pk=shared.pk).update(share_milli=250, team=cv)
    whole = submit(lab.amy, gpus=1)
    _ran(whole, now - timedelta(minutes=40), None)
    cut = submit(lab.bob, gpus=4)  # started before the horizon, ended after it
    _ran(cut, now - timedelta(hours=5), now - timedelta(hours=3))
    gone = submit(lab.bob, gpus=4)
    _ran(gone, now - timedelta(hours=9), now - timedelta(hours=8))

    def usage():
        by_team: dict = {}
        return decayed_usage(now=now, half_life_s=HOUR, teams={cv.pk: "cv"}, by_team=by_team), by_team

    in_sql = usage()

    class Elsewhere:  # the per-row arithmetic every other database runs
        vendor = "sqlite"

    monkeypatch.setattr(snapshot, "connection", Elsewhere())
    by_rows = usage()
    assert in_sql[0].keys() == by_rows[0].keys() == {"vision", "nlp"}
    assert all(in_sql[0][d] == pytest.approx(by_rows[0][d], rel=1e-12) for d in by_rows[0])
    assert in_sql[1] == pytest.approx(by_rows[1], rel=1e-12) and set(in_sql[1]) == {("vision", "cv")}
