"""The portal on the Kubernetes backend where only a real API server shows the difference (against the fake,
which enforces the same rules): pods created at admission (no gated pod of a queued job counts against a
namespace quota), terminating victims that keep their GPUs until they are gone, gangs whose eviction is refused
halfway, scheduler failures waited on for a bounded time, nodes that vanished, and the API calls per admission.
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.utils import timezone

import engine
from scheduling.models import Cluster, Job, JobState, PreemptionVictim
from scheduling.services.cycle import apply_result, run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.pod_states import apply_pod_deleted
from scheduling.services.reconcile import reconcile
from scheduling.services.snapshot import build_snapshot

pytestmark = pytest.mark.django_db


def pod_name(job, attempt=1, index=None):
    return f"job-{job.pk}-a{attempt}" + ("" if index is None else f"-{index}")


def ns(job):
    return f"gpu-{job.department.slug}"


def started(kube, go, *jobs):
    """Run the cycle, then let kube-scheduler bind and the kubelet run each job's pods; sync."""
    go(run_cycle)
    for job in jobs:
        job.refresh_from_db()
        assert job.state == JobState.ADMITTED, (job.pk, job.reason_code, job.reason_message)
        names = [pod_name(job)] if job.pods == 1 else [pod_name(job, index=i) for i in range(job.pods)]
        for name in names:
            kube.run(ns(job), name)
    go(sync_cluster)
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(started_at=timezone.now() - timedelta(hours=1))


def preempt(go, preemptor, *victims):
    _, ctx = build_snapshot(now=timezone.now())
    go(apply_result, result=engine.CycleResult(preemptions=(
        engine.Preemption(preemptor_id=preemptor.pk, victim_ids=tuple(v.pk for v in victims), reason="priority"),)),
        ctx=ctx)


# ------------------------------------------------------------------------------------------- API calls


def test_an_admission_costs_one_api_call_per_pod(kube, lab, submit, go):
    jobs = [go(submit, lab.alice, gpus=1, name=f"j{i}") for i in range(4)]
    gang = go(submit, lab.bob, gpus=2, pods=2, name="gang")
    assert kube.count("POST") == 0  # submitting costs no API call
    before = len(kube.requests)
    go(run_cycle)
    pod_calls = [(r.method, r.path) for r in kube.requests[before:] if r.path.startswith("/api/v1/namespaces/")]
    # Before: 5 calls per single-pod job (a POST at submission; then at admission a POST answered 409, a GET
    # to adopt, a LIST of the attempt, a PATCH). Now one POST each, and a POST + a PATCH per gang pod, plus the
    # gang's headless Service (one POST).
    assert len(pod_calls) == 4 + 1 + 2 * 2, pod_calls
    assert [m for m, _ in pod_calls].count("POST") == 7 and [m for m, _ in pod_calls].count("PATCH") == 2
    for job in [*jobs, gang]:
        job.refresh_from_db()
        assert job.state == JobState.ADMITTED


# ------------------------------------------------------------------------------------------- quota


def test_a_long_queue_does_not_fill_the_namespace_quota(kube, lab, submit, go):
    kube.add_resource_quota("gpu-vision", "gpu-portal-ceiling", {"requests.nvidia.com/gpu": "8", "pods": "500"})
    jobs = [go(submit, lab.alice, gpus=2, name=f"q{i}") for i in range(6)]  # 12 GPUs queued, quota 8
    assert kube.quota_used("gpu-vision", "gpu-portal-ceiling")["requests.nvidia.com/gpu"] == 0
    go(run_cycle)
    states = sorted(Job.objects.filter(pk__in=[j.pk for j in jobs]).values_list("state", flat=True))
    assert states.count(JobState.ADMITTED) == 4  # alice's quota and borrowing: 8 GPUs on 2 nodes
    assert not [r for r in kube.requests if r.method == "POST" and r.path.endswith("/pods")
                and r.body and r.body.get("spec", {}).get("schedulingGates")]


def test_an_admission_the_namespace_quota_refuses_backs_off_visibly_then_gives_the_gpus_back(
        kube, lab, submit, go, monkeypatch):
    """One retry chain per attempt (one refused create per back-off step, whoever asks), the refusal becomes
    the engine's constraint with its own reason (the requeued job is not readmitted onto the same GPUs), and
    it lifts when the namespace's quota changes."""
    from scheduling import tasks
    from scheduling.models import NamespaceQuotaRefusal

    kube.add_resource_quota("gpu-vision", "gpu-portal-ceiling", {"requests.nvidia.com/gpu": "2"})
    # a's pod first, in a cycle of its own: a message's creates overlap, so two admissions of one cycle would
    # race for the namespace's last GPUs, and this is about the one that comes second.
    a = go(submit, lab.alice, gpus=2, name="a")
    go(run_cycle)
    b = go(submit, lab.alice, gpus=2, name="b")
    chained = []
    monkeypatch.setattr(tasks.admit_pods, "apply_async", lambda args, countdown: chained.append((args, countdown)))
    go(run_cycle)
    a.refresh_from_db()
    b.refresh_from_db()
    assert a.state == b.state == JobState.ADMITTED
    assert kube.pod("gpu-vision", pod_name(a)) is not None and kube.pod("gpu-vision", pod_name(b)) is None
    assert chained == [((b.pk, 1), 2.0)]  # the chain's next step, in 2 s
    event = b.events.get(reason_code="namespace_quota")
    assert "exceeded quota: gpu-portal-ceiling" in event.message
    refusal = NamespaceQuotaRefusal.objects.get(job=b, attempt=1)
    assert refusal.step == 1 and refusal.total_gpus == 2 and refusal.quota_version.startswith("gpu-portal-ceiling@")
    assert refusal.quotas["gpu-portal-ceiling"]["used"]["requests.nvidia.com/gpu"] == "2"
    posts = kube.count("POST", "/pods$")
    # Before its step is due, neither a duplicate task nor the reconciler starts a second chain.
    assert tasks._admit(b.pk, 1, fresh=False) == "backing_off"
    Job.objects.filter(pk__in=(a.pk, b.pk)).update(admitted_at=timezone.now() - timedelta(seconds=40))
    sent = []
    monkeypatch.setattr("portal.dispatch.send_now", lambda *args: sent.append(args))
    for _ in range(5):
        assert go(reconcile).get("admitted") is None
    assert sent == [] and kube.count("POST", "/pods$") == posts
    # The step is due: one create (reading first: no re-POST of a's pod), the next step twice as long.
    NamespaceQuotaRefusal.objects.filter(pk=refusal.pk).update(next_retry_at=timezone.now())
    assert tasks._admit(b.pk, 1, fresh=False) == "quota_backoff"
    assert kube.count("POST", "/pods$") == posts + 1 and chained[-1] == ((b.pk, 1), 4.0)
    assert b.events.filter(reason_code="namespace_quota").count() == 1  # said once per attempt
    # After a bounded wait the GPUs go back to the queue, and the engine does not readmit the job there.
    Job.objects.filter(pk=b.pk).update(admitted_at=timezone.now() - timedelta(minutes=6))
    assert go(reconcile).get("requeued") == 1
    go(run_cycle)
    b.refresh_from_db()
    assert (b.state, b.attempt, b.reason_code) == (JobState.QUEUED, 2, "namespace_quota")
    assert kube.count("POST", "/pods$") == posts + 1
    # The team raises the quota: the sync sees its new version, and the job is admitted.
    backend_core = __import__("scheduling.backends", fromlist=["get_backend"]).get_backend("default").core
    backend_core.patch_namespaced_resource_quota("gpu-portal-ceiling", "gpu-vision",
                                                 {"spec": {"hard": {"requests.nvidia.com/gpu": "4"}}})
    assert go(sync_cluster).get("quota_refusals_cleared") == 1
    go(run_cycle)
    b.refresh_from_db()
    assert (b.state, b.attempt) == (JobState.ADMITTED, 2)
    assert kube.pod("gpu-vision", pod_name(b, attempt=2)) is not None


def refused_by_the_namespace_quota(kube, lab, submit, go, monkeypatch):
    """Two 2-GPU jobs of vision under a namespace quota of 2 GPUs: the second's start is refused once (the
    refusal's step 1, its next try due now). Returns that job and the retry steps the chain scheduled."""
    from scheduling import tasks
    from scheduling.models import NamespaceQuotaRefusal

    kube.add_resource_quota("gpu-vision", "gpu-portal-ceiling", {"requests.nvidia.com/gpu": "2"})
    go(submit, lab.alice, gpus=2, name="a")
    go(run_cycle)  # (a's pod first: a message's creates overlap)
    b = go(submit, lab.alice, gpus=2, name="b")
    chained = []
    monkeypatch.setattr(tasks.admit_pods, "apply_async", lambda args, countdown: chained.append((args, countdown)))
    go(run_cycle)
    assert chained == [((b.pk, 1), 2.0)]
    NamespaceQuotaRefusal.objects.filter(job=b, attempt=1).update(next_retry_at=timezone.now())
    return b, chained


def test_a_due_quota_retry_taken_by_another_worker_costs_no_second_create(kube, lab, submit, go, monkeypatch):
    """A duplicate task (a redelivered message) and the chain's own step may find the same step due at once:
    the one that takes it first creates, the other backs off without a create and without a second chain."""
    from scheduling.models import NamespaceQuotaRefusal
    from scheduling.services import namespace_quotas, pods

    b, chained = refused_by_the_namespace_quota(kube, lab, submit, go, monkeypatch)
    posts = kube.count("POST", "/pods$")
    claim = namespace_quotas.quota_try(job=b, now=timezone.now())  # another worker took the due step
    assert claim is not None and claim.refusal is not None
    assert pods.admit_pods(job_id=b.pk, attempt=1, fresh=False) == ("backing_off", None)
    assert kube.count("POST", "/pods$") == posts and len(chained) == 1
    # The taker's API server did not answer: the step is due again at once, for that task's own retry.
    namespace_quotas.quota_try_unanswered(claim=claim)
    assert NamespaceQuotaRefusal.objects.get(job=b).next_retry_at == claim.due
    assert pods.admit_pods(job_id=b.pk, attempt=1, fresh=False) == ("quota_backoff", 4.0)
    assert kube.count("POST", "/pods$") == posts + 1


def test_an_unreachable_api_server_gives_the_quota_retry_back(kube, lab, submit, go, monkeypatch):
    from scheduling.backends.base import ClusterUnavailable
    from scheduling.models import NamespaceQuotaRefusal
    from scheduling.services import pods

    b, _ = refused_by_the_namespace_quota(kube, lab, submit, go, monkeypatch)
    due = NamespaceQuotaRefusal.objects.get(job=b).next_retry_at
    kube.fail_next(100, status=503)
    with pytest.raises(ClusterUnavailable):
        pods.admit_pods(job_id=b.pk, attempt=1, fresh=False)
    kube.faults.clear()
    assert NamespaceQuotaRefusal.objects.get(job=b).next_retry_at == due  # not held for the claim's minute
    assert pods.admit_pods(job_id=b.pk, attempt=1, fresh=False)[0] == "quota_backoff"


# ------------------------------------------------------------------------------------------- eviction


@pytest.fixture
def full(kube, lab, submit, go):
    """bob's elastic job v (4 GPUs) and alice's realtime job c (4 GPUs) fill both nodes, for an hour."""
    v = go(submit, lab.bob, gpus=4, name="v")
    c = go(submit, lab.alice, gpus=4, name="c", tier="realtime")
    started(kube, go, v, c)
    return v, c


def test_a_victims_gpus_stay_used_until_its_pod_is_gone(kube, lab, submit, go, full):
    v, _ = full
    rt = go(submit, lab.bob, gpus=4, tier="realtime", name="rt")
    go(run_cycle)
    victim = PreemptionVictim.objects.get()
    assert (victim.job_id, victim.status) == (v.pk, PreemptionVictim.Status.EVICTED)
    assert kube.pod("gpu-nlp", pod_name(v))["metadata"]["deletionTimestamp"]  # terminating, grace 30 s

    go(sync_cluster)
    v.refresh_from_db()
    assert v.state == JobState.RUNNING and v.attempt == 1 and v.placement  # still holds its GPUs
    snapshot, ctx = build_snapshot(now=timezone.now())
    running = {r.id: r for r in snapshot.running}
    assert running[v.pk].evicting_for == rt.pk and running[v.pk].preemptible is False
    assert ctx.evicting == {v.pk}
    go(run_cycle)
    rt.refresh_from_db()
    assert rt.state == JobState.QUEUED  # nothing admitted onto GPUs a terminating pod still holds
    assert kube.count("DELETE") == 0

    kube.advance(31)  # the grace period passes: the kubelet has stopped the pod
    go(sync_cluster)
    v.refresh_from_db()
    assert (v.state, v.attempt) == (JobState.QUEUED, 2)
    victim.refresh_from_db()
    assert victim.status == PreemptionVictim.Status.REQUEUED
    go(run_cycle)
    rt.refresh_from_db()
    assert rt.state == JobState.ADMITTED and rt.attempt == 1
    assert kube.schedule("gpu-nlp", pod_name(rt)) == rt.placement[0]  # kube-scheduler binds it at once


def test_the_watcher_requeues_a_victim_when_its_pod_is_deleted(kube, lab, submit, go, full, monkeypatch):
    from scheduling.backends import get_backend
    from scheduling.backends.kube.status import pod_state
    from scheduling.management.commands.watch_pods import watch

    v, _ = full
    go(submit, lab.bob, gpus=4, tier="realtime", name="rt")
    go(run_cycle)
    gone = pod_state(kube.pod("gpu-nlp", pod_name(v)))
    kube.finish_termination("gpu-nlp", pod_name(v))

    class Stream(list):
        def stop(self):
            pass

    monkeypatch.setattr(get_backend("default"), "watch_pods", lambda **_: Stream([("DELETED", gone)]))
    import threading

    assert go(watch, cluster="default", stop=threading.Event(), max_events=1) == 1
    v.refresh_from_db()
    assert (v.state, v.attempt, v.preemption_count) == (JobState.QUEUED, 2, 1)


def test_an_externally_deleted_pod_requeues_its_job_at_once(kube, lab, submit, go, full):
    from scheduling.backends.kube.status import pod_state

    v, _ = full
    state = pod_state(kube.pod("gpu-nlp", pod_name(v)))
    kube.finish_termination("gpu-nlp", pod_name(v))  # kubectl delete --force
    assert go(apply_pod_deleted, state=state) == "requeued"
    v.refresh_from_db()
    assert (v.state, v.attempt) == (JobState.QUEUED, 2)
    assert "disappeared" in v.events.filter(to_state=JobState.QUEUED).last().message


def test_a_gang_is_requeued_only_once_every_pod_is_evicted_and_never_deleted_past_its_pdb(kube, lab, submit, go):
    g = go(submit, lab.bob, gpus=2, pods=2, name="gang")
    c = go(submit, lab.alice, gpus=2, pods=2, name="c", tier="realtime")
    started(kube, go, g, c)
    # A team's PDB guards only the gang's second pod.
    kube.add_pdb("gpu-nlp", "second", {"minAvailable": 1, "selector": {
        "matchLabels": {"gpu-portal.io/job-id": str(g.pk), "gpu-portal.io/pod-index": "1"}}})
    rt = go(submit, lab.alice, gpus=4, tier="realtime", name="rt")
    preempt(go, rt, g)
    victim = PreemptionVictim.objects.get()
    assert victim.status == PreemptionVictim.Status.REQUESTED  # in flight: one pod went, one was refused
    assert kube.pod("gpu-nlp", pod_name(g, index=0))["metadata"].get("deletionTimestamp")
    assert not kube.pod("gpu-nlp", pod_name(g, index=1))["metadata"].get("deletionTimestamp")
    assert "asking again" in g.events.filter(reason_code="disruption_budget").get().message

    kube.advance(31)
    go(sync_cluster)
    g.refresh_from_db()
    assert g.state == JobState.RUNNING and g.attempt == 1  # pod 1 still runs: not requeued, not deleted
    assert go(reconcile).get("evictions_retried") == 1  # refused again, said once
    assert g.events.filter(reason_code="disruption_budget").count() == 1
    assert kube.count("DELETE") == 0

    kube.pdbs.clear()  # the team relaxes its budget
    go(reconcile)
    assert kube.pod("gpu-nlp", pod_name(g, index=1))["metadata"].get("deletionTimestamp")
    kube.advance(31)
    go(sync_cluster)
    g.refresh_from_db()
    assert (g.state, g.attempt) == (JobState.QUEUED, 2)


@pytest.mark.parametrize("drain", ["kubelet", "eviction_api"])
def test_a_gang_that_lost_a_pod_to_someone_else_evicts_the_rest_and_never_deletes_them(
        kube, lab, submit, go, monkeypatch, drain):
    """Someone else takes pod 0 of a running gang (the kubelet under node pressure, or a drain through the
    Eviction API, seen by the watcher after its grace period), while a team's PDB covers pod 1. The watcher's
    event names pod 0 only: the job must not be requeued on its strength (that deleted pod 1 behind its PDB).
    Pod 1 goes through the Eviction API, the 429 is honoured and said on the job, and the job is requeued
    only once pod 1 may go."""
    import threading
    from dataclasses import replace

    from scheduling.backends import get_backend
    from scheduling.backends.kube.status import pod_state
    from scheduling.management.commands.watch_pods import watch

    g = go(submit, lab.bob, gpus=2, pods=2, name="gang")
    started(kube, go, g)
    g.refresh_from_db()
    assert g.state == JobState.RUNNING
    kube.add_pdb("gpu-nlp", "team", {"minAvailable": 1, "selector": {
        "matchLabels": {"gpu-portal.io/job-id": str(g.pk), "gpu-portal.io/pod-index": "1"}}})
    first, second = pod_name(g, index=0), pod_name(g, index=1)
    backend = get_backend("default")
    if drain == "kubelet":
        kube.kubelet_evict("gpu-nlp", first)
        event = pod_state(kube.pod("gpu-nlp", first))
    else:
        backend.core.create_namespaced_pod_eviction(first, "gpu-nlp", {
            "apiVersion": "policy/v1", "kind": "Eviction", "metadata": {"name": first, "namespace": "gpu-nlp"}})
        event = pod_state(kube.pod("gpu-nlp", first))
        assert event.deleting and event.reason == "Evicted"
        event = replace(event, deletion_deadline=timezone.now().timestamp() - 1)  # seen after its grace period

    class Stream(list):
        def stop(self):
            pass

    monkeypatch.setattr(backend, "watch_pods", lambda **_: Stream([("MODIFIED", event)]))
    assert go(watch, cluster="default", stop=threading.Event(), max_events=1) == 1
    g.refresh_from_db()
    assert (g.state, g.attempt) == (JobState.RUNNING, 1)  # not requeued while pod 1 runs
    assert kube.count("DELETE", f"/pods/{second}$") == 0
    assert not kube.pod("gpu-nlp", second)["metadata"].get("deletionTimestamp")
    assert kube.count("POST", f"/pods/{second}/eviction$") == 1  # asked through the Eviction API: 429
    assert g.reason_code == "disruption_budget" and "team" in g.reason_message  # its state says why
    assert g.events.filter(reason_code="gang_broken").count() == 1

    assert go(reconcile).get("evictions_retried") == 1  # asked again, with the reconciler's cadence
    go(sync_cluster)
    g.refresh_from_db()
    assert (g.state, g.attempt) == (JobState.RUNNING, 1)
    assert kube.count("DELETE", f"/pods/{second}$") == 0
    assert kube.count("POST", f"/pods/{second}/eviction$") == 2
    assert g.events.filter(reason_code="disruption_budget").count() == 1  # said once

    kube.pdbs.clear()  # the team relaxes its budget
    go(reconcile)
    assert kube.pod("gpu-nlp", second)["metadata"].get("deletionTimestamp")
    kube.advance(31)
    go(sync_cluster)
    g.refresh_from_db()
    assert (g.state, g.attempt) == (JobState.QUEUED, 2)
    assert kube.count("DELETE", f"/pods/{second}$") == 0  # evicted, never deleted while it ran


def test_reason_and_detail_name_the_same_victims(kube, lab, submit, go, full):
    v, c = full
    first = go(submit, lab.bob, gpus=4, tier="realtime", name="first")
    preempt(go, first, v)  # v's eviction is under way, for another job
    Job.objects.filter(pk=c.pk).update(tier="elastic")
    rt = go(submit, lab.alice, gpus=4, tier="realtime", name="rt")
    _, ctx = build_snapshot(now=timezone.now())
    # The engine names v again along with c; only c is new: the reason and its detail must agree.
    go(apply_result, result=engine.CycleResult(
        preemptions=(engine.Preemption(preemptor_id=rt.pk, victim_ids=(v.pk, c.pk), reason="priority"),),
        pending=(engine.PendingReason(job_id=rt.pk, code="preemption_in_progress", message="x",
                                    detail={"victims": [v.pk, c.pk]}),)), ctx=ctx)
    rt.refresh_from_db()
    assert rt.reason_message == f"preempting job(s) {c.pk} (priority)"
    assert rt.reason_detail["victims"] == [c.pk]


# ------------------------------------------------------------------------------------------- scheduling


def test_an_unschedulable_pod_is_waited_on_for_a_bounded_time(kube, lab, submit, go):
    job = go(submit, lab.alice, gpus=2)
    go(run_cycle)
    job.refresh_from_db()
    kube.mark_unschedulable("gpu-vision", pod_name(job), "0/2 nodes are available: 1 Insufficient nvidia.com/gpu")
    go(sync_cluster)
    job.refresh_from_db()
    assert (job.state, job.attempt) == (JobState.ADMITTED, 1)  # kube-scheduler retries by itself
    kube.mark_unschedulable("gpu-vision", pod_name(job), "still", ago=61)
    go(sync_cluster)
    job.refresh_from_db()
    assert (job.state, job.attempt) == (JobState.QUEUED, 2)


def test_a_placement_on_a_vanished_node_is_given_up_at_once(kube, lab, submit, go):
    job = go(submit, lab.alice, gpus=2)
    go(run_cycle)
    job.refresh_from_db()
    kube.remove_node(job.placement[0])
    assert kube.schedule("gpu-vision", pod_name(job)) is None  # SchedulerError: nodeinfo not found
    go(sync_cluster)  # the inventory drops the node, and the job's pod is mapped
    job.refresh_from_db()
    assert (job.state, job.attempt) == (JobState.QUEUED, 2)
    event = job.events.filter(to_state=JobState.QUEUED).last()
    assert "SchedulerError" in event.message and "nodeinfo not found" in event.message


def test_no_decision_on_an_inventory_not_read_since_start(kube, lab, submit, go):
    Cluster.objects.update(last_sync_at=None)  # Node rows left from before (a demo seed, a stale database)
    job = go(submit, lab.alice, gpus=1)
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.reason_code == "cluster_unreachable"
    assert "not been read" in job.reason_message
    assert kube.count("POST") == 0
    go(sync_cluster)
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED


def test_logs_answer_a_clear_error_when_the_kubelet_does_not(kube, lab, submit, go, client_for):
    job = go(submit, lab.alice, gpus=1)
    go(run_cycle)
    kube.run("gpu-vision", pod_name(job))
    kube.fail_next(1, status=500, path="/log$")
    resp = client_for(lab.alice).get(f"/api/v1/jobs/{job.pk}/logs")
    assert resp.status_code == 409
    assert resp.json()["error"]["code"] == "logs_unavailable"


def test_a_cancelled_jobs_terminating_pod_keeps_its_gpus_until_gone(kube, lab, submit, go):
    from scheduling.models import Node
    from scheduling.services.jobs import job_cancel

    job = go(submit, lab.alice, gpus=4, name="big")
    started(kube, go, job)
    job.refresh_from_db()
    node = job.placement[0]
    go(job_cancel, user=lab.alice, job=job)
    assert kube.pod("gpu-vision", pod_name(job))["metadata"]["deletionTimestamp"]  # grace 30 s
    go(sync_cluster)
    assert Node.objects.get(name=node).used_by_others == 4
    nxt = go(submit, lab.bob, gpus=4, name="next")
    go(run_cycle)
    nxt.refresh_from_db()
    assert nxt.state == JobState.ADMITTED and nxt.placement[0] != node  # not into the terminating pod's GPUs
    kube.advance(31)
    go(sync_cluster)
    assert Node.objects.get(name=node).used_by_others == 0


def test_a_preemptor_waiting_for_its_victims_gets_no_new_ones(kube, lab, submit, go):
    """Whatever the engine proposes, a pending job whose victims are still terminating evicts nobody else."""
    a = go(submit, lab.bob, gpus=2, name="a")
    b = go(submit, lab.bob, gpus=2, name="b")
    c = go(submit, lab.alice, gpus=4, name="c")
    started(kube, go, a, b, c)
    rt = go(submit, lab.bob, gpus=2, tier="realtime", name="rt")
    preempt(go, rt, a)
    assert kube.pod("gpu-nlp", pod_name(a))["metadata"]["deletionTimestamp"]
    go(sync_cluster)
    _, ctx = build_snapshot(now=timezone.now())
    assert ctx.evicting_for == {a.pk: rt.pk}
    go(apply_result, result=engine.CycleResult(preemptions=(
        engine.Preemption(preemptor_id=rt.pk, victim_ids=(b.pk,), reason="priority"),)), ctx=ctx)
    assert list(PreemptionVictim.objects.values_list("job_id", flat=True)) == [a.pk]  # b is left alone
    assert not kube.pod("gpu-nlp", pod_name(b))["metadata"].get("deletionTimestamp")
    rt.refresh_from_db()
    assert rt.reason_code == "preemption_in_progress" and rt.reason_detail["victims"] == [a.pk]
    assert str(a.pk) in rt.reason_message


def test_the_reconciler_never_recreates_a_pod_of_an_admitted_job_being_evicted(kube, lab, submit, go):
    a = go(submit, lab.bob, gpus=4, name="a")
    c = go(submit, lab.alice, gpus=4, name="c", tier="realtime")
    go(run_cycle)
    a.refresh_from_db()
    assert a.state == JobState.ADMITTED  # created, not yet running
    rt = go(submit, lab.bob, gpus=4, tier="realtime", name="rt")
    preempt(go, rt, a)
    assert kube.pod("gpu-nlp", pod_name(a)) is None  # a pending pod is evicted at once
    Job.objects.filter(pk=a.pk).update(admitted_at=timezone.now() - timedelta(seconds=40))
    posts = kube.count("POST", "/pods$")
    counts = go(reconcile)
    assert "admitted" not in counts and kube.count("POST", "/pods$") == posts
    go(sync_cluster)
    a.refresh_from_db()
    assert (a.state, a.attempt, a.preemption_count) == (JobState.QUEUED, 2, 1)  # its pods are gone: preempted
    assert c.pk


def test_pods_the_cluster_refuses_fail_the_job_instead_of_holding_its_gpus(kube, lab, submit, go):
    job = go(submit, lab.alice, gpus=2)
    del kube.namespaces["gpu-vision"]  # the department's namespace was never created
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.reason_code == "InvalidPodSpec"
    assert "gpu-vision" in job.reason_message and "not found" in job.reason_message


# ------------------------------------------------------------------------------------------- gangs: failure policy


def test_a_failed_rank_ends_the_gang_its_peers_are_evicted_and_its_service_goes(kube, lab, submit, go):
    gang = go(submit, lab.bob, gpus=2, pods=2, name="ddp")
    started(kube, go, gang)
    assert (ns(gang), pod_name(gang)) in kube.services
    kube.terminate(ns(gang), pod_name(gang, index=1), exit_code=1)
    go(sync_cluster)
    gang.refresh_from_db()
    assert gang.state == JobState.FAILED and gang.exit_code == 1
    peer = kube.pod(ns(gang), pod_name(gang, index=0))
    # still running when the attempt ended: evicted (a team's PodDisruptionBudget would still hold), not deleted
    assert peer["metadata"].get("deletionTimestamp")
    assert any(c["type"] == "DisruptionTarget" for c in peer["status"]["conditions"])
    assert (ns(gang), pod_name(gang)) not in kube.services


def test_a_retried_gang_gets_a_new_service_and_new_names(kube, lab, submit, go):
    gang = go(submit, lab.bob, gpus=2, pods=2, name="ddp", max_retries=1, retry_on_exit_codes=[3])
    started(kube, go, gang)
    kube.terminate(ns(gang), pod_name(gang, index=0), exit_code=3)
    go(sync_cluster)
    gang.refresh_from_db()
    assert (gang.state, gang.attempt) == (JobState.QUEUED, 2)
    assert (ns(gang), pod_name(gang)) not in kube.services
    for i in range(2):
        kube.finish_termination(ns(gang), pod_name(gang, index=i))
    Job.objects.filter(pk=gang.pk).update(not_before=timezone.now() - timedelta(seconds=1))
    go(run_cycle)
    gang.refresh_from_db()
    assert gang.state == JobState.ADMITTED and (ns(gang), pod_name(gang, attempt=2)) in kube.services
    env = {e["name"]: e["value"] for e in kube.pod(ns(gang), pod_name(gang, 2, 1))["spec"]["containers"][0]["env"]}
    assert env["PORTAL_ATTEMPT"] == "2" and env["MASTER_ADDR"] == f"job-{gang.pk}-a2-0.job-{gang.pk}-a2"


def test_a_failed_gang_with_its_own_budget_still_frees_its_peers(kube, lab, submit, go):
    # pdb_min_available = pods: once a rank failed, that budget would allow no eviction of the others, ever
    gang = go(submit, lab.bob, gpus=2, pods=2, name="ddp", pdb_min_available=2)
    started(kube, go, gang)
    assert (ns(gang), pod_name(gang)) in kube.pdbs
    kube.terminate(ns(gang), pod_name(gang, index=1), exit_code=1)
    go(sync_cluster)
    gang.refresh_from_db()
    assert gang.state == JobState.FAILED
    assert kube.pod(ns(gang), pod_name(gang, index=0))["metadata"].get("deletionTimestamp")
    assert (ns(gang), pod_name(gang)) not in kube.pdbs


def test_an_ended_attempt_deletes_only_the_objects_it_had(kube, lab, submit, go, settings):
    """A batch job's attempt had one pod: no Service, Ingress or PodDisruptionBudget to delete (each a 404)."""
    from scheduling.backends import get_backend
    from scheduling.backends.kube.routes import RouteConfig
    from scheduling.services.jobs import job_cancel

    get_backend("default").routes = RouteConfig(ingress_class="nginx")  # an ingress controller on the cluster
    job = go(submit, lab.alice, gpus=1, name="batch")
    started(kube, go, job)
    seen = len(kube.requests)
    go(job_cancel, user=lab.alice, job=job)
    deletes = [r.path for r in kube.requests[seen:] if r.method == "DELETE"]
    assert deletes == [f"/api/v1/namespaces/gpu-vision/pods/{pod_name(job)}"]


def test_an_admitted_job_whose_pods_never_start_says_so_and_shows_in_the_metric(kube, lab, submit, go, monkeypatch,
                                                                                 client):
    """Its start message sat behind other work (or was lost): past the bound the job's reason says not_started,
    once on its timeline, and /metrics shows how long it has waited (the PortalAdmittedJobNotStarted alert)."""
    from portal import dispatch
    from scheduling.models import JobEvent

    job = go(submit, lab.alice, gpus=1, name="stuck")
    monkeypatch.setattr(dispatch, "after_commit", lambda *a, **k: None)  # the start message never arrives
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and kube.pod("gpu-vision", pod_name(job)) is None
    asked = []
    monkeypatch.setattr(dispatch, "send_now", lambda name, *args: asked.append((name, *args)))
    Job.objects.filter(pk=job.pk).update(admitted_at=timezone.now() - timedelta(seconds=90))
    go(reconcile)
    job.refresh_from_db()
    assert job.reason_code == JobState.ADMITTED and asked == [("scheduling.pods.admit", job.pk, 1)]  # asked again
    Job.objects.filter(pk=job.pk).update(admitted_at=timezone.now() - timedelta(seconds=150))
    go(reconcile)
    go(reconcile)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.reason_code == "not_started"
    assert re.search(r"^admitted 1[5-9]\d s ago and its pods have not started", job.reason_message)
    assert JobEvent.objects.filter(job=job, reason_code="not_started").count() == 1
    text = client.get("/metrics").content.decode()
    value = float(next(line.split()[-1] for line in text.splitlines()
                       if line.startswith("portal_admitted_not_started_oldest_seconds ")))
    assert value >= 150


# ------------------------------------------------------------------------------------------- fractions


@pytest.fixture
def shared_gpu(kube, lab, submit, go):
    """The lab's A100s shared through HAMi; nlp holds seven GPUs whole and two quarters (nb1, nb2) on the last,
    all elastic and an hour in: a whole GPU for vision's realtime job must come from the quarters together."""
    import json

    from quotas.models import GpuSharing

    lab.a100.sharing = GpuSharing.HAMI
    lab.a100.save()
    for i in range(2):  # HAMi advertises each of a node's 4 GPUs as 10 units, and registers the 4 GPUs
        kube.add_node(f"gpu-{i}", gpus=40, labels={"gpu-type": "a100"})
        kube.nodes[f"gpu-{i}"]["metadata"]["annotations"] = {"hami.io/node-nvidia-register": json.dumps(
            [{"id": f"GPU-{i}-{d}", "index": d, "count": 10, "devmem": 81920} for d in range(4)])}
    go(sync_cluster)
    whole = [go(submit, lab.bob, gpus=g, name=f"w{g}") for g in (4, 3)]
    started(kube, go, *whole)
    quarters = [go(submit, lab.bob, gpus=1, gpu_memory_gib=20, name=f"nb{i}") for i in (1, 2)]
    started(kube, go, *quarters)
    for q in quarters:
        q.refresh_from_db()
    assert quarters[0].placement == quarters[1].placement and quarters[0].gpu_devices == quarters[1].gpu_devices
    return quarters


def test_the_fractions_sharing_a_gpu_are_evicted_together_through_the_eviction_api(kube, lab, submit, go,
                                                                                   shared_gpu):
    nb1, nb2 = shared_gpu
    where = nb1.placement
    rt = go(submit, lab.alice, gpus=1, tier="realtime", name="rt")
    go(run_cycle)
    # one preemption, each quarter a victim of it, each pod asked to leave through the Eviction API
    victims = PreemptionVictim.objects.select_related("preemption").order_by("job_id")
    assert [(v.job_id, v.preemption.preemptor_id, v.status) for v in victims] == [
        (nb1.pk, rt.pk, PreemptionVictim.Status.EVICTED), (nb2.pk, rt.pk, PreemptionVictim.Status.EVICTED)]
    for q in (nb1, nb2):
        assert kube.count("POST", f"/pods/{pod_name(q)}/eviction$") == 1
        assert kube.pod("gpu-nlp", pod_name(q))["metadata"]["deletionTimestamp"]
    assert kube.count("DELETE") == 0
    rt.refresh_from_db()
    assert rt.reason_code == "preemption_in_progress" and rt.reason_detail["victims"] == [nb1.pk, nb2.pk]
    assert rt.reason_message == f"preempting job(s) {nb1.pk}, {nb2.pk} (priority)"

    kube.advance(31)  # both pods are gone: both requeued, and the GPU is whole again
    go(sync_cluster)
    for q in (nb1, nb2):
        q.refresh_from_db()
        assert (q.state, q.attempt, q.preemption_count) == (JobState.QUEUED, 2, 1)
    go(run_cycle)
    rt.refresh_from_db()
    assert rt.state == JobState.ADMITTED and rt.placement == where


def test_a_budget_that_protects_one_fraction_keeps_both_from_being_evicted(kube, lab, submit, go, shared_gpu):
    nb1, nb2 = shared_gpu
    # a team's PDB guards nb1's pod alone: evicting nb2 alone would free nothing, so neither quarter goes and
    # the realtime job takes the next way in, the 3-GPU job (it loses more work, but may be evicted)
    kube.add_pdb("gpu-nlp", "nb1", {"minAvailable": 1, "selector": {
        "matchLabels": {"gpu-portal.io/job-id": str(nb1.pk)}}})
    rt = go(submit, lab.alice, gpus=1, tier="realtime", name="rt")
    go(run_cycle)
    assert list(PreemptionVictim.objects.values_list("job__name", flat=True)) == ["w3"]
    for q in (nb1, nb2):
        assert kube.count("POST", f"/pods/{pod_name(q)}/eviction$") == 0
        assert not kube.pod("gpu-nlp", pod_name(q))["metadata"].get("deletionTimestamp")
    rt.refresh_from_db()
    assert rt.reason_code == "preemption_in_progress"
