"""The admins' what-if replays CPU-only jobs and jobs of roles from the history: their roles go into the trace
(and its export), the CPU pool into the node groups and its cores and GiB quotas into the departments."""

from __future__ import annotations

import csv
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from scheduling.models import Job, JobState
from scheduling.services import whatif
from tests.scheduling.test_job_shapes import DATA, TRAIN, job_payload, pool  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db


@pytest.fixture
def shaped_history(pool, client_for):  # noqa: F811
    c = client_for(pool.alice)
    bodies = [job_payload(name="prep", flavor="cpu", gpus=0, cpu="2", memory="4Gi", pods=2),
              job_payload(name="train", gpus=None, roles=[TRAIN, DATA]), job_payload(name="plain", gpus=1)]
    now = timezone.now()
    for i, body in enumerate(bodies):
        r = c.post("/api/v1/jobs", body, format="json")
        assert r.status_code == 201, r.content
        start = now - timedelta(hours=5) + timedelta(minutes=30 * i)
        Job.objects.filter(pk=r.json()["id"]).update(state=JobState.SUCCEEDED, submitted_at=start,
                                                     started_at=start, finished_at=start + timedelta(minutes=40))
    return pool


def test_history_rows_carry_the_roles_and_the_export_writes_them(shaped_history, tmp_path):
    rows = whatif.export_rows(since=timezone.now() - timedelta(days=1))
    assert [r.roles for r in rows] == [
        (("main", 2, 0, 2.0, 4.0, "cpu"),),
        (("trainer", 2, 2, 8.0, 32.0, None), ("data", 2, 0, 4.0, 8.0, "cpu")),
        ()]
    out = tmp_path / "h.csv"
    call_command("whatif", "--export", str(out))
    assert [r["roles"] for r in csv.DictReader(out.open())] == [
        "main:2:0:2:4:cpu", "trainer:2:2:8:32;data:2:0:4:8:cpu", ""]


def test_the_replay_runs_cpu_work_on_the_pool_under_its_quota(shaped_history):
    groups = whatif.node_groups()
    assert {"name": "default-cpu-16c-64g", "count": 2, "gpus_per_node": 0, "cores": 16, "memory_gib": 64,
            "flavor": "cpu", "cluster": "default"} in groups
    assert whatif.cpu_quotas()["vision"]["cpu"]["cores"]["nominal"] == 16
    assert "cpu" not in whatif.current_quotas().get("vision", {})  # the GPU quotas alone, as the pages show
    w = whatif.run_whatif(days=1, quota_changes=[whatif.quota_change("vision", "a100-80gb", 1)])
    assert w.jobs == 3
    assert w.result["current"]["dropped_unfittable"] == 0 == w.result["proposed"]["dropped_unfittable"]


def test_history_rows_carry_each_jobs_notice_checkpoints_and_surcharge(shaped_history):
    first, second, third = Job.objects.order_by("submitted_at")
    Job.objects.filter(pk=first.pk).update(notice_s=120, checkpoint_interval_s=600)
    Job.objects.filter(pk=second.pk).update(preemptible=False, price_surcharge_pct=40)
    rows = whatif.export_rows(since=timezone.now() - timedelta(days=1))
    assert [(r.notice_s, r.checkpoint_interval_s) for r in rows] == [(120.0, 600.0), (0.0, None), (0.0, None)]
    assert [(r.preemptible, r.price_surcharge_pct) for r in rows] == [(None, 0), (False, 40), (None, 0)]
