"""Checkpoint directories survive attempts on the simulated cluster, expire CHECKPOINT_RETENTION_DAYS after
the job ends, and a job whose sources no cluster has waits with ``data_source_unavailable``."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

import engine
from scheduling.models import AttemptLog, Cluster, Job, JobState, SimPod
from scheduling.services.cycle import apply_result, run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.snapshot import build_snapshot
from scheduling.services.workload import delete_expired_checkpoints
from workloads.models import CheckpointDir, DataSource

pytestmark = pytest.mark.django_db


@pytest.fixture
def scratch(lab, settings, tmp_path):
    settings.DATA_DIR = tmp_path
    DataSource.objects.create(name="imagenet", kind="dataset", cluster=lab.cluster, claim_name="imagenet",
                              shared_with_all=True)
    return DataSource.objects.create(name="vision-scratch", cluster=lab.cluster, department=lab.vision,
                                     claim_name="vision-scratch", writable=True)


def mounts_of(job, attempt):
    return {m["path"]: m for m in SimPod.objects.get(job_id=job.pk, attempt=attempt).mounts}


def test_attempt_two_sees_what_attempt_one_wrote_to_its_checkpoint(lab, scratch, submit, go, tmp_path):
    job = go(submit, lab.alice, gpus=4, checkpoint={"source": "vision-scratch"},
             mounts=[{"source": "imagenet", "path": "/data"}], shm_mb=512)
    go(run_cycle)
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    first = mounts_of(job, 1)
    assert first["/checkpoint"]["dir"].endswith(f"default/vision-scratch/checkpoints/job-{job.pk}")
    assert not first["/checkpoint"]["read_only"] and first["/data"]["read_only"]
    assert first["/dev/shm"] == {"source": "", "path": "/dev/shm", "medium": "Memory", "size_mb": 512}
    Path(first["/checkpoint"]["dir"], "step-100.pt").write_text("weights at step 100")

    # a realtime job preempts it; it is requeued as attempt 2
    rt = go(submit, lab.amy, gpus=4, tier="realtime", name="rt")
    _, ctx = build_snapshot(now=timezone.now())
    go(apply_result, result=engine.CycleResult(preemptions=(engine.Preemption(
        preemptor_id=rt.pk, victim_ids=(job.pk,), reason="priority", message="rt"),)), ctx=ctx)
    go(sync_cluster)
    job.refresh_from_db()
    assert (job.state, job.attempt) == (JobState.QUEUED, 2)
    second = mounts_of(job, 2)
    assert second["/checkpoint"]["dir"] == first["/checkpoint"]["dir"]
    assert Path(second["/checkpoint"]["dir"], "step-100.pt").read_text() == "weights at step 100"
    assert Path(second["/checkpoint"]["dir"]).is_relative_to(tmp_path)
    # the pod's log says so too, the same line for both attempts (what a demo user reads with gpup logs)
    line = (f"[sim] mounts: /data <- imagenet (read-only); /checkpoint <- vision-scratch:checkpoints/job-{job.pk} "
            "(read-write)")
    assert line in AttemptLog.objects.get(job=job, attempt=1, pod=0).text  # kept when attempt 1 ended
    assert line in SimPod.objects.get(job_id=job.pk, attempt=2).log


def _ended(job, days_ago):
    Job.objects.filter(pk=job.pk).update(state=JobState.SUCCEEDED,
                                         finished_at=timezone.now() - timedelta(days=days_ago))


def test_checkpoints_are_deleted_after_the_retention_period_only(lab, scratch, submit, go, settings):
    settings.CHECKPOINT_RETENTION_DAYS = 14
    old, recent, running = (go(submit, lab.alice, name=n, checkpoint=True) for n in ("old", "recent", "running"))
    go(run_cycle)
    dirs = {}
    for job in (old, recent, running):
        d = Path(mounts_of(job, 1)["/checkpoint"]["dir"])
        (d / "last.pt").write_text("x")
        dirs[job.pk] = d
    _ended(old, 15)
    _ended(recent, 13)
    assert delete_expired_checkpoints() == 1
    assert not dirs[old.pk].exists() and dirs[recent.pk].exists() and dirs[running.pk].exists()
    assert CheckpointDir.objects.get(job=old).deleted_at is not None
    assert CheckpointDir.objects.get(job=recent).deleted_at is None
    assert delete_expired_checkpoints() == 0  # idempotent: a deleted directory is not asked for again


def test_a_job_whose_source_is_on_no_cluster_it_may_use_waits_and_says_so(lab, scratch, submit, go):
    other = Cluster.objects.create(name="campus")
    lidar = DataSource.objects.create(name="lidar", cluster=other, department=lab.vision, claim_name="lidar")
    job = go(submit, lab.alice, mounts=[{"source": "lidar", "path": "/lidar"}])
    plain = go(submit, lab.alice, name="plain")
    lidar.delete()  # the admin withdrew the source after the job was accepted
    go(run_cycle)
    job.refresh_from_db()
    plain.refresh_from_db()
    assert plain.state == JobState.ADMITTED
    assert job.state == JobState.QUEUED and job.reason_code == "data_source_unavailable"
    assert job.reason_detail["missing"] == {"campus": ["lidar"], "default": ["lidar"]}
    assert "default lacks lidar" in job.reason_message and job.estimated_start is None
