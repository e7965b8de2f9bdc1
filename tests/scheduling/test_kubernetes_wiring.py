"""The portal on the Kubernetes backend, end to end against the fake API server over HTTP: the cycle's
decisions become gated pods, ungated with narrowed affinity; pod states (from sync and from the watcher)
move jobs; OOM kills fail them; evictions under a PodDisruptionBudget are refused (429) and recorded; the
reconciler deletes orphans; the API being down leaves jobs waiting with a reason instead of hot-looping."""

from __future__ import annotations

import threading

import pytest

from scheduling.models import Job, JobState, Node
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.reconcile import reconcile

pytestmark = pytest.mark.django_db


def test_inventory_becomes_nodes(kube):
    nodes = {n.name: n for n in Node.objects.select_related("flavor")}
    assert set(nodes) == {"gpu-0", "gpu-1"}
    assert {n.flavor.name for n in nodes.values()} == {"a100-80gb"} and nodes["gpu-0"].gpus == 4


def test_job_runs_and_succeeds_on_kubernetes(kube, lab, submit, go):
    job = go(submit, lab.alice, gpus=2, tier="elastic", urgency="high")
    # A queued job has no pod: a gated pod would count against the namespace's ResourceQuota.
    assert kube.pod("gpu-vision", f"job-{job.pk}-a1") is None
    assert kube.count("POST", "/pods$") == 0

    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    pod = kube.pod("gpu-vision", f"job-{job.pk}-a1")
    assert not pod["spec"].get("schedulingGates")  # created at admission, pinned and ungated in one POST
    assert pod["spec"]["priorityClassName"] == "ai-elastic"
    assert pod["metadata"]["labels"]["urgency-level"] == "high"
    assert job.placement[0] in str(pod["spec"]["affinity"]["nodeAffinity"])

    kube.run("gpu-vision", f"job-{job.pk}-a1", node=job.placement[0])
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING

    kube.terminate("gpu-vision", f"job-{job.pk}-a1", exit_code=0)
    go(sync_cluster)
    job.refresh_from_db()
    assert (job.state, job.exit_code) == (JobState.SUCCEEDED, 0)


def test_oom_killed_job_fails_with_the_reason(kube, lab, submit, go):
    job = go(submit, lab.alice)
    go(run_cycle)
    name = f"job-{job.pk}-a1"
    kube.run("gpu-vision", name, node=Job.objects.get(pk=job.pk).placement[0])
    kube.oom_kill("gpu-vision", name)
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.FAILED and job.reason_code == "OOMKilled" and job.exit_code == 137


def test_watcher_moves_jobs(kube, lab, submit, go):
    from scheduling.management.commands.watch_pods import watch

    job = go(submit, lab.alice)
    go(run_cycle)
    kube.run("gpu-vision", f"job-{job.pk}-a1", node=Job.objects.get(pk=job.pk).placement[0])
    stop = threading.Event()
    n = watch(cluster="default", stop=stop, max_events=1)
    assert n == 1
    job.refresh_from_db()
    assert job.state == JobState.RUNNING


def test_the_watcher_applies_a_burst_of_events_with_one_read_of_their_jobs(kube, lab, submit, go, monkeypatch):
    from scheduling.backends.kube.status import pod_state
    from scheduling.management.commands import watch_pods

    jobs = [go(submit, lab.alice, name=f"j{i}") for i in range(3)]
    go(run_cycle)
    states = []
    for job in jobs:
        name = f"job-{job.pk}-a1"
        pending = pod_state(kube.pod("gpu-vision", name))
        kube.run("gpu-vision", name, node=Job.objects.get(pk=job.pk).placement[0])
        states += [("ADDED", pending), ("MODIFIED", pod_state(kube.pod("gpu-vision", name)))]
    applied = []
    real = watch_pods.apply_pod_states
    monkeypatch.setattr(watch_pods, "apply_pod_states",
                        lambda batch, **kw: applied.append([(s.name, s.phase) for s in batch]) or real(batch, **kw))
    go(watch_pods.apply_events, states, cluster="default", row=None)
    # one call, each pod's latest state only (its ADDED, Pending, is superseded)
    assert applied == [[(f"job-{j.pk}-a1", "Running") for j in jobs]]
    assert {j.state for j in Job.objects.filter(pk__in=[j.pk for j in jobs])} == {JobState.RUNNING}


def test_the_watcher_applies_a_deletion_after_the_states_before_it(kube, lab, submit, go, monkeypatch):
    from scheduling.backends.kube.status import pod_state
    from scheduling.management.commands import watch_pods

    a, b = go(submit, lab.alice, name="a"), go(submit, lab.alice, name="b")
    go(run_cycle)
    sa, sb = (pod_state(kube.pod("gpu-vision", f"job-{j.pk}-a1")) for j in (a, b))
    calls = []
    monkeypatch.setattr(watch_pods, "apply_pod_states", lambda batch, **kw: calls.append(("states", [s.name for s in batch])))
    monkeypatch.setattr(watch_pods, "apply_pod_deleted", lambda *, state, cluster: calls.append(("deleted", state.name)))
    watch_pods.apply_events([("MODIFIED", sa), ("DELETED", sb), ("MODIFIED", sb)], cluster="default", row=None)
    assert calls == [("states", [sa.name]), ("deleted", sb.name), ("states", [sb.name])]


def test_a_watch_batch_takes_what_waits_and_ends_at_the_streams_end():
    import queue

    from scheduling.management.commands.watch_pods import _END, drain

    events = queue.SimpleQueue()
    for item in (2, 3, 4, _END, 5):
        events.put(item)
    assert drain(events, 1, limit=3) == [1, 2, 3]
    assert drain(events, events.get()) == [4, _END]  # the end closes the batch
    assert drain(events, events.get()) == [5]  # nothing more waits: no blocking
    failure = RuntimeError("stream broke")
    events.put(failure)
    events.put(6)
    assert drain(events, 0) == [0, failure]


def test_the_watcher_starts_a_new_stream_when_one_ends(kube, lab, submit, go, monkeypatch):
    from scheduling.backends import get_backend
    from scheduling.backends.kube.status import pod_state
    from scheduling.management.commands.watch_pods import watch

    a, b = go(submit, lab.alice, name="a"), go(submit, lab.alice, name="b")
    go(run_cycle)
    for j in (a, b):
        kube.run("gpu-vision", f"job-{j.pk}-a1", node=Job.objects.get(pk=j.pk).placement[0])
    states = [pod_state(kube.pod("gpu-vision", f"job-{j.pk}-a1")) for j in (a, b)]
    stopped = []

    class Stream(list):
        def stop(self):
            stopped.append(self)

    streams = iter([Stream([("MODIFIED", states[0])]), Stream([("MODIFIED", states[1])])])
    monkeypatch.setattr(get_backend("default"), "watch_pods", lambda **_: next(streams))
    stop = threading.Event()
    # the first stream ends after one event (a server-side timeout): ending it must not end the watcher
    assert go(watch, cluster="default", stop=stop, max_events=2) == 2
    assert not stop.is_set() and len(stopped) == 2
    assert {j.state for j in Job.objects.filter(pk__in=(a.pk, b.pk))} == {JobState.RUNNING}


def test_eviction_blocked_by_pdb_is_recorded_and_retried_later(kube, lab, submit, go):
    from django.utils import timezone

    import engine
    from scheduling.models import PreemptionVictim
    from scheduling.services.cycle import apply_result
    from scheduling.services.snapshot import build_snapshot

    victim = go(submit, lab.bob, gpus=4, pods=1, pdb_min_available=1, name="serving")
    go(run_cycle)
    victim.refresh_from_db()
    kube.run("gpu-nlp", f"job-{victim.pk}-a1", node=victim.placement[0])
    go(sync_cluster)
    preemptor = go(submit, lab.alice, gpus=4, tier="realtime")
    _, ctx = build_snapshot(now=timezone.now())
    go(apply_result, result=engine.CycleResult(preemptions=(
        engine.Preemption(preemptor_id=preemptor.pk, victim_ids=(victim.pk,), reason="priority"),)), ctx=ctx)
    v = PreemptionVictim.objects.get(job=victim)
    assert v.status == PreemptionVictim.Status.BLOCKED
    victim.refresh_from_db()
    assert victim.state == JobState.RUNNING  # never deleted behind the PDB's back
    assert kube.pod("gpu-nlp", f"job-{victim.pk}-a1") is not None
    assert "disruption_budget" in [e.reason_code for e in victim.events.all()]
    assert kube.count("DELETE") == 0


@pytest.fixture
def full(kube, lab, submit, go):
    """bob (nlp) runs jobs a and b (2 GPUs each, his nominal quota), alice (vision) c (4 GPUs, realtime, so never
    a victim): the cluster is full, everyone has run for an hour; a realtime job of bob's may evict a or b (a
    first, by id)."""
    from datetime import timedelta

    from django.utils import timezone

    a = go(submit, lab.bob, gpus=2, name="a")
    b = go(submit, lab.bob, gpus=2, name="b")
    c = go(submit, lab.alice, gpus=4, name="c", tier="realtime")
    go(run_cycle)
    for job, ns in ((a, "gpu-nlp"), (b, "gpu-nlp"), (c, "gpu-vision")):
        job.refresh_from_db()
        assert job.state == JobState.ADMITTED
        kube.run(ns, f"job-{job.pk}-a1", node=job.placement[0])
    go(sync_cluster)
    Job.objects.filter(pk__in=(a.pk, b.pk, c.pk)).update(started_at=timezone.now() - timedelta(hours=1))
    return a, b, c


def test_a_foreign_pdb_with_no_room_keeps_its_pods_from_being_chosen(kube, lab, submit, go, full):
    from scheduling.models import PreemptionVictim

    a, b, _ = full
    # A team's PDB over job a's pod, created by someone else (not labelled as the portal's), allowing nothing.
    kube.add_pdb("gpu-nlp", "serving", {"minAvailable": 1,
                                        "selector": {"matchLabels": {"gpu-portal.io/job-id": str(a.pk)}}})
    rt = go(submit, lab.bob, gpus=2, tier="realtime")
    go(run_cycle)
    assert list(PreemptionVictim.objects.filter(preemption__preemptor=rt).values_list("job_id", flat=True)) == [b.pk]
    assert kube.pod("gpu-nlp", f"job-{b.pk}-a1")["metadata"].get("deletionTimestamp")  # evicted, not refused
    assert not kube.pod("gpu-nlp", f"job-{a.pk}-a1")["metadata"].get("deletionTimestamp")


def test_a_namespace_wide_pdb_with_no_room_explains_the_wait(kube, lab, submit, go, full):
    from scheduling.models import PreemptionVictim

    kube.add_pdb("gpu-nlp", "freeze", {"minAvailable": "100%", "selector": {}})  # every pod of the namespace
    rt = go(submit, lab.bob, gpus=2, tier="realtime")
    go(run_cycle)
    rt.refresh_from_db()
    assert rt.state == JobState.QUEUED and rt.reason_code == "disruption_budget"
    assert rt.reason_detail["budgets"] == ["gpu-nlp/freeze"]
    assert not PreemptionVictim.objects.exists()
    assert not [r for r in kube.requests if r.path.endswith("/eviction")]  # no round wasted on a 429


def test_a_pod_under_its_own_and_a_namespace_pdb_is_not_chosen(kube, lab, submit, go):
    """The Eviction API refuses (500) any pod that more than one PDB selects, whatever their room."""
    from datetime import timedelta

    from django.utils import timezone

    a = go(submit, lab.bob, gpus=2, pods=2, pdb_min_available=1, name="a")  # its own PDB allows 1
    c = go(submit, lab.alice, gpus=4, name="c", tier="realtime")  # never a victim: only a could make room
    go(run_cycle)
    a.refresh_from_db()
    c.refresh_from_db()
    for i, node in enumerate(a.placement):
        kube.run("gpu-nlp", f"job-{a.pk}-a1-{i}", node=node)
    kube.run("gpu-vision", f"job-{c.pk}-a1", node=c.placement[0])
    go(sync_cluster)
    Job.objects.filter(pk__in=(a.pk, c.pk)).update(started_at=timezone.now() - timedelta(hours=1))
    kube.add_pdb("gpu-nlp", "generous", {"minAvailable": 0, "selector": {}})
    rt = go(submit, lab.bob, gpus=4, tier="realtime")
    go(run_cycle)
    rt.refresh_from_db()
    assert rt.reason_code == "disruption_budget"
    assert rt.reason_detail["budgets"] == [f"gpu-nlp/generous & gpu-nlp/job-{a.pk}-a1"]


def test_without_the_clusters_pdbs_a_cycle_still_decides_on_the_jobs_own(kube, lab, submit, go, full, caplog):
    from scheduling.models import PreemptionVictim

    a, _, _ = full
    kube.add_pdb("gpu-nlp", "serving", {"minAvailable": 1,
                                        "selector": {"matchLabels": {"gpu-portal.io/job-id": str(a.pk)}}})
    rt = go(submit, lab.bob, gpus=2, tier="realtime")
    kube.fail_next(1, status=503, path="poddisruptionbudgets")
    go(run_cycle)  # the PDB list fails: logged, budgets as before this change (a has none of its own)
    assert "disruption budgets unavailable" in caplog.text
    assert list(PreemptionVictim.objects.filter(preemption__preemptor=rt).values_list("job_id", flat=True)) == [a.pk]
    assert PreemptionVictim.objects.get(job=a).status == PreemptionVictim.Status.BLOCKED  # the API still refuses


def test_reconciler_deletes_orphan_pods(kube, lab, submit, go):
    job = go(submit, lab.alice)
    go(run_cycle)
    Job.objects.filter(pk=job.pk).update(state=JobState.CANCELLED)  # pods left behind by a crash
    counts = go(reconcile)
    assert counts["orphans_deleted"] == 1
    assert kube.pod("gpu-vision", f"job-{job.pk}-a1") is None or kube.pod(
        "gpu-vision", f"job-{job.pk}-a1")["metadata"].get("deletionTimestamp")


def test_cluster_down_leaves_job_waiting_with_a_reason(kube, lab, submit, go):
    kube.fail_next(50, status=503)
    job = go(submit, lab.alice)  # submitting needs no cluster: the pods come at admission
    assert sync_cluster() == {"unreachable": 1}
    go(run_cycle)
    job.refresh_from_db()
    # the documented reason, not "no_capacity": the engine saw no schedulable node because of the outage
    assert job.state == JobState.QUEUED and job.reason_code == "cluster_unreachable"
    assert "unreachable" in job.reason_message and job.reason_detail == {"clusters": ["default"]}
