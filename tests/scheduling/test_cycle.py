"""The admission cycle end to end on the simulated cluster: submit -> admitted -> running -> succeeded,
preemption and requeue, reconcile, and the invariants of the adapters (bounded queries, events only on
change, cancelled meanwhile is skipped)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

import engine
from portal.timestamps import split_log_stamp
from scheduling.backends import get_backend
from scheduling.models import Job, JobEvent, JobState, Preemption, PreemptionVictim, SimPod
from scheduling.services.cycle import apply_result, run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.reconcile import reconcile
from scheduling.services.snapshot import build_snapshot

pytestmark = pytest.mark.django_db



def _finish_all_pods():
    SimPod.objects.filter(phase="Running").update(started_at=timezone.now() - timedelta(days=30))


def test_job_goes_queued_admitted_running_succeeded(lab, submit, go):
    job = go(submit, lab.alice, gpus=2)
    outcome = go(run_cycle)
    assert outcome.admitted == 1
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and len(job.placement) == 1 and job.cluster.name == "default"
    pod = SimPod.objects.get(job_id=job.pk)
    assert not pod.gated and pod.node == job.placement[0] and pod.phase == "Running"

    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.started_at is not None

    _finish_all_pods()
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED and job.exit_code == 0 and job.finished_at
    assert [e.to_state for e in job.events.filter(kind="transition")] == [
        "queued", "admitted", "running", "succeeded"]


def test_failed_pod_fails_the_job_with_its_exit_code(lab, submit, go):
    job = go(submit, lab.alice, env={"SIM_EXIT_CODE": "3"})
    go(run_cycle)
    go(sync_cluster)
    _finish_all_pods()
    go(sync_cluster)
    job.refresh_from_db()
    assert (job.state, job.exit_code) == (JobState.FAILED, 3)


def test_gang_job_is_placed_whole(lab, submit, go):
    job = go(submit, lab.alice, gpus=4, pods=2)
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and sorted(job.placement) == ["n0", "n1"]
    assert SimPod.objects.filter(job_id=job.pk, gated=False).count() == 2


def test_pending_reason_written_once_not_every_cycle(lab, submit, go):
    big = [go(submit, lab.alice, gpus=4, name=f"big{i}") for i in range(2)]
    waiting = go(submit, lab.alice, gpus=4, name="waits")
    go(run_cycle)
    waiting.refresh_from_db()
    assert waiting.state == JobState.QUEUED and waiting.reason_code not in ("", "queued")
    assert waiting.reason_message
    n_events = JobEvent.objects.filter(job=waiting).count()
    for _ in range(3):
        go(run_cycle)
    assert JobEvent.objects.filter(job=waiting).count() == n_events
    assert all(Job.objects.get(pk=b.pk).state == JobState.ADMITTED for b in big)


def test_cancelled_meanwhile_is_not_admitted(lab, submit, go):
    job = go(submit, lab.alice)
    snapshot, ctx = build_snapshot(now=timezone.now())
    result = engine.schedule(snapshot)
    assert [a.job_id for a in result.admissions] == [job.pk]
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)
    assert apply_result(result=result, ctx=ctx)[0] == 0
    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED


def test_snapshot_queries_are_bounded(lab, submit, go, django_assert_max_num_queries):
    for i in range(25):
        go(submit, lab.alice if i % 2 else lab.bob, name=f"j{i}")
    go(run_cycle)
    # + the clusters (states, labels, cost ranks), the quota refusals, user limits, right-sizing's predicted run
    # times, the teams' quota splits, the bookings and the maintenance windows: a fixed count, not one per job
    with django_assert_max_num_queries(16):
        snapshot, _ = build_snapshot(now=timezone.now())
    assert len(snapshot.pending) + len(snapshot.running) == 25


def test_file_lock_is_exclusive(lab):
    """The embedded (SQLite) lock. PostgreSQL's advisory lock is re-entrant within one session, so it is
    tested across sessions in test_postgres.py instead."""
    from django.db import connection

    from scheduling.services.locks import exclusive

    if connection.vendor == "postgresql":
        pytest.skip("advisory locks are tested across sessions in test_postgres.py")
    with exclusive("admission-cycle") as first:
        assert first
        with exclusive("admission-cycle") as second:
            assert not second
    with exclusive("admission-cycle") as again:
        assert again


def test_preemption_chain_on_simulated_cluster(lab, submit, go):
    """A decided preemption is carried out: eviction requested and accepted, victim requeued as a new
    attempt keeping its submission time, restarted later; the audit trail has every step."""
    victim = go(submit, lab.bob, gpus=4, name="victim")
    go(run_cycle)
    go(sync_cluster)
    victim.refresh_from_db()
    assert victim.state == JobState.RUNNING
    submitted = victim.submitted_at
    preemptor = go(submit, lab.alice, gpus=4, tier="realtime", name="rt")

    snapshot, ctx = build_snapshot(now=timezone.now())
    decision = engine.CycleResult(preemptions=(engine.Preemption(preemptor_id=preemptor.pk,
                                                             victim_ids=(victim.pk,), reason="priority",
                                                             message="realtime job needs 4 GPUs"),))
    go(apply_result, result=decision, ctx=ctx)
    record = Preemption.objects.get()
    v = PreemptionVictim.objects.get()
    assert (record.preemptor_id, v.job_id, v.attempt) == (preemptor.pk, victim.pk, 1)
    assert v.status == PreemptionVictim.Status.EVICTED and v.eviction_requested_at and v.evicted_at
    assert SimPod.objects.get(job_id=victim.pk, attempt=1).reason == "Evicted"
    preemptor.refresh_from_db()
    assert preemptor.reason_code == "preemption_in_progress"

    go(sync_cluster)
    victim.refresh_from_db()
    assert (victim.state, victim.attempt, victim.preemption_count) == (JobState.QUEUED, 2, 1)
    assert victim.submitted_at == submitted and victim.placement == []
    assert SimPod.objects.filter(job_id=victim.pk, attempt=2, gated=True).exists()
    assert not SimPod.objects.filter(job_id=victim.pk, attempt=1).exists()
    v.refresh_from_db()
    assert v.status == PreemptionVictim.Status.REQUEUED and v.requeued_at

    # the evicted job's place is taken; once there is room it restarts and the chain is closed
    Job.objects.filter(pk=preemptor.pk).update(state=JobState.CANCELLED)
    go(run_cycle)
    go(sync_cluster)
    victim.refresh_from_db()
    assert victim.state == JobState.RUNNING
    v.refresh_from_db()
    assert v.status == PreemptionVictim.Status.RESTARTED and v.restarted_at
    chain = [e.reason_code for e in victim.events.order_by("at", "id")]
    for step in ("preempted_priority", "eviction_requested", "eviction_accepted", "Evicted", "queued",
                 "restarted"):
        assert step in chain, (step, chain)


def test_reconcile_repairs_drift(lab, submit, go):
    running = go(submit, lab.bob, name="lost-pods")
    go(run_cycle)
    go(sync_cluster)
    queued = submit(lab.alice, name="lost-create", gpus=4)  # on-commit never ran: the create task was lost
    assert not SimPod.objects.filter(job_id=queued.pk).exists()
    Job.objects.filter(pk=running.pk).update(started_at=timezone.now() - timedelta(minutes=5))
    SimPod.objects.filter(job_id=running.pk).delete()  # the node vanished with its pods
    orphan = SimPod.objects.create(namespace="gpu-vision", name="job-999-a1", job_id=999, attempt=1)

    counts = go(reconcile)
    assert counts["created"] == 1 and counts["requeued"] == 1 and counts["orphans_deleted"] == 1
    assert SimPod.objects.filter(job_id=queued.pk).count() == 1
    running.refresh_from_db()
    assert (running.state, running.attempt) == (JobState.QUEUED, 2)
    assert not SimPod.objects.filter(pk=orphan.pk).exists()
    again = go(reconcile)
    assert again.get("requeued", 0) == 0 and again.get("orphans_deleted", 0) == 0


def test_tasks_are_idempotent(lab, submit, go):
    from scheduling import tasks

    job = go(submit, lab.alice)
    assert tasks.create_pods(job.pk, 1) == "created"
    assert SimPod.objects.filter(job_id=job.pk).count() == 1
    assert tasks.create_pods(job.pk, 2) == "stale"
    go(run_cycle)
    assert tasks.admit_pods(job.pk, 1) == "admitted"  # second run is a no-op
    assert tasks.delete_pods(job.pk, 1, "gpu-vision") == "live"  # never deletes a live attempt's pods
    assert SimPod.objects.filter(job_id=job.pk, gated=False).count() == 1


def test_logs_of_a_running_job(lab, submit, go, client_for):
    job = go(submit, lab.alice, command=["python", "train.py", "--lr", "0.1"])
    go(run_cycle)
    r = client_for(lab.alice).get(f"/api/v1/jobs/{job.pk}/logs?tail=5")
    assert r.status_code == 200 and "python train.py --lr 0.1" in b"".join(r.streaming_content).decode()


def test_logs_with_timestamps_resume_from_a_stamp(lab, submit, go, client_for):
    job = go(submit, lab.alice, command=["python", "train.py"])
    go(run_cycle)
    api = client_for(lab.alice)
    stamped = b"".join(api.get(f"/api/v1/jobs/{job.pk}/logs?timestamps=1").streaming_content).decode().splitlines()
    assert split_log_stamp(stamped[0])[1] == "$ python train.py"
    first, _ = split_log_stamp(stamped[0])
    assert first is not None and all(split_log_stamp(x)[0] >= first for x in stamped)
    # From the first line's stamp on: every line (a since_time takes no tail), the first one included.
    again = api.get(f"/api/v1/jobs/{job.pk}/logs", {"since_time": stamped[0].split(" ")[0], "tail": 1})
    assert b"".join(again.streaming_content).decode().splitlines() == [split_log_stamp(x)[1] for x in stamped]
    later = api.get(f"/api/v1/jobs/{job.pk}/logs", {"since_time": "2999-01-01T00:00:00Z"})
    assert b"".join(later.streaming_content) == b""


def test_backend_is_the_simulated_one_by_default(lab):
    from scheduling.backends.simulated import SimulatedBackend

    assert isinstance(get_backend(), SimulatedBackend)
