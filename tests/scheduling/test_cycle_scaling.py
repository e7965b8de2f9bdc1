"""The cycle's and the sync's database work does not grow one statement per waiting or finishing job."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import engine
from scheduling.models import AttemptLog, Job, JobEvent, JobState, SimPod
from scheduling.services.cycle import apply_result, run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.snapshot import build_snapshot

pytestmark = pytest.mark.django_db



def _queries_of_a_cycle_with(n, lab, submit, go):
    """n gangs of 3 x 4 GPUs wait on 2 nodes of 4: every one gets a new reason in the first cycle."""
    Job.objects.filter(state=JobState.QUEUED).update(state=JobState.CANCELLED)  # out of the way
    jobs = [go(submit, lab.alice if i % 2 else lab.bob, name=f"big{i}", gpus=4, pods=2) for i in range(n)]
    # grown past the pool after submission (submission refuses a gang that never fits: rows from before it)
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(pods=3)
    with CaptureQueriesContext(connection) as q:
        outcome = go(run_cycle)
    assert outcome.admitted == 0 and outcome.reasons_changed == n
    for job in jobs:
        job.refresh_from_db()
        assert job.reason_code != "queued" and job.reason_message
        assert job.events.filter(kind="reason", reason_code=job.reason_code, attempt=job.attempt).count() == 1
    return len(q.captured_queries)


def test_pending_reasons_are_written_in_constant_statements(lab, submit, go):
    assert _queries_of_a_cycle_with(3, lab, submit, go) == _queries_of_a_cycle_with(12, lab, submit, go)


def test_a_job_requeued_meanwhile_keeps_its_own_reason(lab, submit, go):
    job = go(submit, lab.alice, gpus=4, pods=2)
    Job.objects.filter(pk=job.pk).update(pods=3)  # never fits: it stays pending
    snapshot, ctx = build_snapshot(now=timezone.now())
    result = engine.schedule(snapshot)
    assert [p.job_id for p in result.pending] == [job.pk]
    Job.objects.filter(pk=job.pk).update(attempt=2, reason_code="queued")  # a new attempt since the decision
    assert apply_result(result=result, ctx=ctx)[2] == 0
    assert Job.objects.get(pk=job.pk).reason_code == "queued"
    assert not JobEvent.objects.filter(job=job, kind="reason").exists()


def test_sync_finishes_many_jobs_with_the_same_timeline_as_one(lab, submit, go):
    jobs = [go(submit, lab.alice, name=f"s{i}", gpus=1) for i in range(6)]
    assert go(run_cycle).admitted == 6
    go(sync_cluster)  # running
    SimPod.objects.filter(phase="Running").update(started_at=timezone.now() - timedelta(days=30))
    go(sync_cluster)  # the simulated kubelet ends them all at once; the sync settles them in one transaction
    for job in jobs:
        job.refresh_from_db()
        assert job.state == JobState.SUCCEEDED
        assert [(e.from_state, e.to_state) for e in job.events.filter(kind="transition")] == [
            ("", "queued"), ("queued", "admitted"), ("admitted", "running"), ("running", "succeeded")]
    assert set(SimPod.objects.values_list("phase", "reason")) == {("Succeeded", "Completed")}
    assert all(log.endswith("done\n") for log in SimPod.objects.values_list("log", flat=True))


def test_a_cycle_ungates_its_admissions_in_few_messages_and_a_failure_is_retried_alone(
    lab, submit, monkeypatch, django_capture_on_commit_callbacks
):
    from scheduling import tasks
    from scheduling.services import cycle, pods

    jobs = [submit(lab.alice, name=f"a{i}", gpus=1) for i in range(5)]
    monkeypatch.setattr(cycle, "ADMIT_BATCH", 2)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        assert run_cycle().admitted == 5
    # 2 + 2 + 1 admissions, not one message per admitted job; and one message for all their notifications
    assert len(callbacks) == 3 + 1
    real, retried = pods.Admission.run, []

    def flaky(admission):
        assert admission.fresh  # the cycle's own first try: create without reading first
        if admission.job.pk == jobs[1].pk:
            raise tasks.BackendError("apiserver hiccup")
        return real(admission)

    monkeypatch.setattr(pods.Admission, "run", flaky)
    monkeypatch.setattr(tasks.admit_pods, "delay", lambda j, a: retried.append((j, a)))
    outcome = tasks.admit_pods_many([[j.pk, j.attempt] for j in jobs])
    assert outcome == {"admitted": 4, "retrying": 1} and retried == [(jobs[1].pk, 1)]
    assert SimPod.objects.filter(gated=False).count() == 4


def test_a_pod_task_run_reads_the_policy_and_the_cluster_once_and_a_failure_is_retried_alone(
    lab, submit, monkeypatch
):
    from scheduling import tasks
    from scheduling.services import pods

    jobs = [submit(lab.alice, name=f"c{i}", gpus=1) for i in range(5)]
    SimPod.objects.all().delete()  # made at submission (eagerly in tests): the task makes them again
    real, retried = pods.create_pods, []

    def flaky(*, job_id, attempt, read=None):
        if job_id == jobs[2].pk:
            raise tasks.BackendError("apiserver hiccup")
        return real(job_id=job_id, attempt=attempt, read=read)

    monkeypatch.setattr(pods, "create_pods", flaky)
    monkeypatch.setattr(tasks.create_pods, "delay", lambda j, a: retried.append((j, a)))
    with CaptureQueriesContext(connection) as q:
        outcome = tasks.create_pods_many([[j.pk, j.attempt] for j in jobs])
    assert outcome == {"created": 4, "retrying": 1} and retried == [(jobs[2].pk, 1)]
    assert SimPod.objects.count() == 4
    sql = [x["sql"] for x in q.captured_queries]
    assert sum('FROM "scheduling_policyversion"' in s for s in sql) <= 1, "\n".join(sql)
    assert sum(s.startswith('SELECT') and 'FROM "scheduling_cluster"' in s for s in sql) <= 2, "\n".join(sql)
    # outside a task run every read goes to the database: an edit is seen at once
    assert tasks.create_pods_many([[jobs[0].pk, 1]]) == {"created": 1}


@pytest.mark.django_db(transaction=True)  # real commits: each job's transaction runs its callbacks as a worker's
def test_a_sync_that_finishes_many_jobs_sends_one_message_per_task(lab, submit, monkeypatch):
    from portal import broker
    from scheduling.services.inventory import sync_one

    jobs = [submit(lab.alice, name=f"s{i}", gpus=1) for i in range(4)]
    assert run_cycle().admitted == 4
    sync_one(cluster_id=None)  # running
    SimPod.objects.filter(phase="Running").update(started_at=timezone.now() - timedelta(days=30))
    sent, send = [], broker.send
    monkeypatch.setattr(broker, "send", lambda task, *args: sent.append((task.name, args)) or send(task, *args))
    sync_one(cluster_id=None)  # each job ends in a transaction of its own
    assert all(j.state == JobState.SUCCEEDED for j in Job.objects.filter(pk__in=[j.pk for j in jobs]))
    assert sorted(name for name, _ in sent) == ["notifications.deliver", "scheduling.pods.keep_logs"]
    [(pairs,)] = [args for name, args in sent if name == "scheduling.pods.keep_logs"]
    assert sorted(pairs) == sorted([j.pk, j.attempt] for j in jobs)
    assert len(dict(sent)["notifications.deliver"][0]) == 4  # the four job.succeeded events
    assert AttemptLog.objects.filter(job__in=jobs).count() == 4  # the one message kept every log


def test_a_cycle_admits_in_constant_statements_with_the_same_timeline(lab, submit, go):
    """One compare-and-set UPDATE for all admitted jobs; their timeline events and notifications are inserted
    together at the end of the loop; a department without a wallet is not asked for one per job."""
    from notifications.models import Event

    def admit(n: int) -> int:
        Job.objects.filter(state__in=(JobState.QUEUED, JobState.ADMITTED)).update(state=JobState.CANCELLED)
        jobs = [go(submit, lab.alice if i % 2 else lab.bob, name=f"j{i}", gpus=1) for i in range(n)]
        with CaptureQueriesContext(connection) as q:
            assert run_cycle().admitted == n  # the cycle's own statements: its messages are not sent here
        for job in jobs:
            assert [(e.from_state, e.to_state) for e in job.events.filter(kind="transition")] == [
                ("", "queued"), ("queued", "admitted")]
            assert Event.objects.filter(kind="job.admitted", data__job_id=job.pk).count() == 1
        return len(q.captured_queries)

    assert admit(6) == admit(2)


def test_an_admission_decided_for_an_attempt_that_moved_on_is_not_applied(lab, submit):
    first, second = submit(lab.alice, name="a", gpus=1), submit(lab.bob, name="b", gpus=1)
    snapshot, ctx = build_snapshot(now=timezone.now())
    result = engine.schedule(snapshot)
    assert {a.job_id for a in result.admissions} == {first.pk, second.pk}
    Job.objects.filter(pk=first.pk).update(attempt=2)  # requeued as a new attempt since the decision
    assert apply_result(result=result, ctx=ctx).admitted == 1
    assert Job.objects.get(pk=first.pk).state == JobState.QUEUED
    assert not JobEvent.objects.filter(job=first, kind="transition", to_state=JobState.ADMITTED).exists()
    second.refresh_from_db()
    assert second.state == JobState.ADMITTED and second.cluster == lab.cluster and second.placement
    assert second.reason_code == "admitted" and second.admitted_at == ctx.now and second.queue_rank is None


def test_the_simulated_sync_reads_the_pods_of_active_jobs_only(lab, submit, go):
    """Every waiting job has its gated pod (created at submission) and every ended job keeps its pods until the
    reconciler deletes them: the sync reads neither, so what it reads does not grow with the queue."""
    from scheduling.backends import get_backend

    ended = go(submit, lab.alice, name="ended", gpus=1)
    go(run_cycle)
    go(sync_cluster)
    SimPod.objects.filter(job_id=ended.pk).update(started_at=timezone.now() - timedelta(days=30))
    go(sync_cluster)
    assert Job.objects.get(pk=ended.pk).state == JobState.SUCCEEDED
    running = go(submit, lab.alice, name="running", gpus=1)
    go(run_cycle)
    go(sync_cluster)
    waiting = [go(submit, lab.bob, name=f"w{i}", gpus=1).pk for i in range(3)]  # not decided on yet
    backend = get_backend("default")
    assert {p.job_id for p in backend.inventory().pods} == {ended.pk, running.pk, *waiting}
    assert {p.job_id for p in backend.sync_inventory().pods} == {running.pk}
    assert Job.objects.get(pk=running.pk).state == JobState.RUNNING


def test_a_sync_requeues_a_podless_eviction_only_when_it_was_one_before_the_pods_were_listed(lab, submit, go):
    """A job admitted, then chosen as a victim, after the sync listed the pods has pods the list could not
    show: it is left to the next sync."""
    from scheduling.services.lifecycle import GANG_BROKEN
    from scheduling.services.pod_states import apply_pod_states, podless

    job = go(submit, lab.alice, gpus=1)
    go(run_cycle)
    go(sync_cluster)
    Job.objects.filter(pk=job.pk).update(reason_code=GANG_BROKEN)
    job.refresh_from_db()
    assert [j.pk for j in podless(job.cluster)] == [job.pk]
    assert go(apply_pod_states, [], complete=True, cluster=job.cluster, listed=set()) == {}
    assert Job.objects.get(pk=job.pk).state == JobState.RUNNING
    counts = go(apply_pod_states, [], complete=True, cluster=job.cluster, listed={(job.pk, job.attempt)})
    assert counts == {"preempted": 1}
    assert Job.objects.get(pk=job.pk).state == JobState.QUEUED


def test_a_sync_reads_as_much_with_a_long_queue_as_with_a_short_one(lab, submit, go, monkeypatch):
    """The same statements and the same pods read by a sync with 2 jobs waiting and with 12."""
    from scheduling.backends.simulated import SimulatedBackend

    read = []
    real = SimulatedBackend.sync_inventory

    def counted(self, **kw):
        inv = real(self, **kw)
        read.append(len(inv.pods))
        return inv

    monkeypatch.setattr(SimulatedBackend, "sync_inventory", counted)
    go(submit, lab.alice, name="running", gpus=1)
    go(run_cycle)
    go(sync_cluster)

    def a_sync_with(waiting):
        for i in range(waiting):
            go(submit, lab.bob, name=f"w{waiting}-{i}", gpus=1)
        with CaptureQueriesContext(connection) as q:
            go(sync_cluster)
        return len(q.captured_queries), read[-1]

    assert a_sync_with(2) == a_sync_with(10) == (a_sync_with(0)[0], 1)
