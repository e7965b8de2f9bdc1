"""Several clusters at once: two fake Kubernetes API servers, each enforcing the API server's rules, behind
two Cluster rows. Dispatch binds each attempt to one cluster before any pod exists; one cluster failing (5xx,
a hung request, a watch whose history expired) holds up neither the other's sync nor its admissions; draining;
and re-run tasks (a worker restarted mid-way) never make a second pod anywhere.
"""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from quotas.models import Quota
from scheduling import backends, tasks
from scheduling.backends.base import PodState
from scheduling.backends.factory import kubernetes_backend
from scheduling.backends.kube import KubernetesBackend
from scheduling.models import Cluster, ClusterState, Job, JobState, Node
from scheduling.services import pod_states, podsets
from scheduling.services.cycle import run_cycle
from scheduling.services.snapshot import build_snapshot
from tests.fakes.k8s_api import FakeKube, FakeKubeServer
from tests.fakes.k8s_fixtures import TIER_CLASSES

pytestmark = pytest.mark.django_db


class Fed:
    """The two clusters: ``fake[name]`` is each one's API server, ``row[name]`` its Cluster row."""


def _fake_cluster(nodes: int) -> FakeKubeServer:
    server = FakeKubeServer(FakeKube()).start()
    fake = server.fake
    for ns in ("gpu-vision", "gpu-nlp"):
        fake.add_namespace(ns)
    for name, value in TIER_CLASSES.items():
        fake.add_priority_class(name, value, labels={"app.kubernetes.io/managed-by": "gpu-portal"},
                                preemption_policy="Never")
    # The same node names on both clusters, as two real clusters often have: a placement means nothing
    # without its cluster.
    for i in range(nodes):
        fake.add_node(f"gpu-{i}", gpus=4, labels={"gpu-type": "a100"})
    return server


def _backend(row: Cluster, fake: FakeKube, sleeps) -> KubernetesBackend:
    return kubernetes_backend(row, host=fake.url, qps=0, timeout_s=1.0, connect_timeout_s=0.5, watch_timeout_s=2,
                              sleep=sleeps)


@pytest.fixture
def fed(lab, sleeps):
    """"default" (campus, cheaper) and "cloud" (cost rank 5, data in S3), two 4-GPU nodes each, both synced."""
    Node.objects.all().delete()  # inventory comes from each cluster now
    Quota.objects.update(nominal=8, borrowing_limit=8)  # the lab's 16 GPUs, now over two clusters
    Cluster.objects.filter(pk=lab.cluster.pk).update(backend="kubernetes", labels={"site": "campus"})
    Cluster.objects.create(name="cloud", backend="kubernetes", kubeconfig="/etc/portal/cloud.kubeconfig",
                           labels={"site": "cloud", "data": "s3"}, cost_rank=5)
    w = Fed()
    w.server = {"default": _fake_cluster(2), "cloud": _fake_cluster(2)}
    w.fake = {k: s.fake for k, s in w.server.items()}
    w.row = {c.name: c for c in Cluster.objects.all()}
    for name, fake in w.fake.items():
        backends._cache[name] = _backend(w.row[name], fake, sleeps)
    tasks.sync_cluster()
    yield w
    for name, server in w.server.items():
        backends._cache.pop(name, None)
        server.stop()


def portal_pods(fake: FakeKube) -> list[str]:
    return sorted(name for (_ns, name) in fake.pods)


def all_pods(fed) -> list[tuple[str, str]]:
    return sorted((c, p) for c, f in fed.fake.items() for p in portal_pods(f))


def run(fake: FakeKube, job: Job, attempt: int = 1) -> None:
    job.refresh_from_db()
    fake.run(f"gpu-{job.department.slug}", f"job-{job.pk}-a{attempt}", node=job.placement[0])


# ------------------------------------------------------------------------------------------- dispatch


def test_each_cluster_is_synced_into_its_own_nodes(fed):
    rows = sorted(Node.objects.values_list("cluster__name", "name", "gpus"))
    assert rows == [("cloud", "gpu-0", 4), ("cloud", "gpu-1", 4), ("default", "gpu-0", 4), ("default", "gpu-1", 4)]
    assert all(c.reachable and c.last_sync_at for c in Cluster.objects.all())
    snapshot, _ = build_snapshot(now=timezone.now())
    info = {c.name: c for c in snapshot.clusters}
    assert info["cloud"].labels == (("data", "s3"), ("site", "cloud")) and info["cloud"].cost_rank == 5
    assert info["default"].state == "active"


def test_dispatch_binds_each_attempt_to_one_cluster_before_any_pod_exists(fed, lab, submit, go):
    cheap = go(submit, lab.alice, gpus=4, name="cheap")
    pinned = go(submit, lab.alice, gpus=4, name="pinned", cluster_selector={"site": "cloud"})
    likes_s3 = go(submit, lab.bob, gpus=4, name="likes-s3", cluster_preference={"data": "s3"})
    assert all_pods(fed) == []  # queued: bound to nothing, so no pod anywhere
    go(run_cycle)
    where = {j.name: (j.state, j.cluster.name) for j in Job.objects.select_related("cluster")}
    assert where == {"cheap": (JobState.ADMITTED, "default"),  # the lower cost rank
                     "pinned": (JobState.ADMITTED, "cloud"),  # its required label
                     "likes-s3": (JobState.ADMITTED, "cloud")}  # its preferred label
    assert all_pods(fed) == sorted([("default", f"job-{cheap.pk}-a1"), ("cloud", f"job-{pinned.pk}-a1"),
                                    ("cloud", f"job-{likes_s3.pk}-a1")])
    event = pinned.events.get(to_state=JobState.ADMITTED)
    assert event.data["cluster"] == "cloud" and event.attempt == 1
    # Each pod is pinned to the node of its own cluster that the admission chose.
    pinned.refresh_from_db()
    pod = fed.fake["cloud"].pod("gpu-vision", f"job-{pinned.pk}-a1")
    assert pinned.placement[0] in str(pod["spec"]["affinity"]) and pinned.placement[0] in fed.fake["cloud"].nodes


def test_same_node_names_on_two_clusters_are_two_nodes(fed, lab, submit, go):
    jobs = [go(submit, lab.alice if i % 2 else lab.bob, gpus=4, name=f"j{i}") for i in range(4)]
    go(run_cycle)
    placed = sorted((j.cluster.name, j.placement[0]) for j in Job.objects.filter(pk__in=[j.pk for j in jobs]))
    assert placed == [("cloud", "gpu-0"), ("cloud", "gpu-1"), ("default", "gpu-0"), ("default", "gpu-1")]
    fifth = go(submit, lab.alice, gpus=1, name="fifth")
    go(run_cycle)
    fifth.refresh_from_db()
    assert fifth.state == JobState.QUEUED  # 16 GPUs, 16 used: nothing double-booked on a same-named node


def test_a_job_bound_to_one_cluster_is_moved_only_by_that_clusters_pods(fed, lab, submit, go):
    job = go(submit, lab.alice, gpus=4, cluster_selector={"site": "cloud"})
    go(run_cycle)
    run(fed.fake["cloud"], job)
    # A stray pod of the same attempt on the other cluster (a bug, a hand-made pod) must not move the job ...
    stray = PodState(job_id=job.pk, attempt=1, index=0, name=f"job-{job.pk}-a1", namespace="gpu-vision",
                     phase="Failed", gated=False, reason="Error", exit_code=1)
    pod_states.apply_pod_states([stray], cluster=fed.row["default"])
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    # ... its own cluster's sync does.
    go(tasks.sync_one, fed.row["cloud"].pk)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.cluster.name == "cloud"


# ------------------------------------------------------------------------------------------- failures


def test_one_cluster_down_does_not_hold_up_the_others_sync_or_admissions(fed, lab, submit, go):
    on_cloud = go(submit, lab.bob, gpus=4, name="on-cloud", cluster_selector={"site": "cloud"})
    go(run_cycle)
    run(fed.fake["cloud"], on_cloud)
    go(tasks.sync_cluster)
    on_cloud.refresh_from_db()
    assert on_cloud.state == JobState.RUNNING
    before = Cluster.objects.get(name="default").last_sync_at

    fed.fake["cloud"].fail_next(1000, status=503)
    go(tasks.sync_cluster)  # fans out: the cloud's sync fails on its own
    cloud, default = Cluster.objects.get(name="cloud"), Cluster.objects.get(name="default")
    assert not cloud.reachable and "503" in cloud.last_error
    assert default.reachable and default.last_sync_at > before
    # Its running job says why and stays where it is: its pod may still run, so it is never started elsewhere.
    on_cloud.refresh_from_db()
    assert (on_cloud.state, on_cloud.cluster.name, on_cloud.attempt) == (JobState.RUNNING, "cloud", 1)
    assert on_cloud.reason_code == "cluster_unreachable" and "never started elsewhere" in on_cloud.reason_message
    # The other cluster goes on admitting; the reconcilers take no job for lost.
    new = go(submit, lab.alice, gpus=4, name="new")
    go(run_cycle)
    new.refresh_from_db()
    assert (new.state, new.cluster.name) == (JobState.ADMITTED, "default")
    Job.objects.filter(pk=on_cloud.pk).update(started_at=timezone.now() - timedelta(hours=1))
    go(tasks.reconcile)
    go(tasks.sync_cluster)
    on_cloud.refresh_from_db()
    assert (on_cloud.state, on_cloud.attempt) == (JobState.RUNNING, 1)
    assert [p for c, p in all_pods(fed) if p.startswith(f"job-{on_cloud.pk}-")] == [f"job-{on_cloud.pk}-a1"]
    assert on_cloud.events.filter(reason_code="cluster_unreachable").count() == 1  # once per outage
    # Back: the reason is cleared, once.
    fed.fake["cloud"].faults.clear()
    go(tasks.sync_cluster)
    on_cloud.refresh_from_db()
    assert Cluster.objects.get(name="cloud").reachable
    assert on_cloud.reason_code == JobState.RUNNING
    assert on_cloud.events.filter(reason_code="cluster_reachable").count() == 1


def test_a_hung_cluster_times_out_alone(fed, lab, submit, go):
    # Hung for longer than any test runs (the fake ends the hang when it stops): only the client's own
    # timeout can end the sync, and the server is still holding the request when it has.
    fed.fake["cloud"].hang_next(5, seconds=600, path="/api/v1/nodes")
    assert tasks.sync_one(fed.row["cloud"].pk) == {"unreachable": 1}
    assert fed.fake["cloud"].hanging >= 1  # the client's own timeout, not the hung server's
    assert not Cluster.objects.get(name="cloud").reachable
    # Meanwhile the other cluster syncs and admits as usual.
    job = go(submit, lab.alice, gpus=2)
    assert tasks.sync_one(fed.row["default"].pk).get("unreachable") is None
    go(run_cycle)
    job.refresh_from_db()
    assert (job.state, job.cluster.name) == (JobState.ADMITTED, "default")


def test_jobs_waiting_only_for_an_unreachable_cluster_are_never_bound_elsewhere(fed, lab, submit, go):
    fed.fake["cloud"].fail_next(1000, status=500)
    go(tasks.sync_cluster)
    job = go(submit, lab.alice, gpus=2, cluster_selector={"site": "cloud"})
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.cluster_id is None
    assert job.reason_code == "cluster_unreachable" and job.reason_detail == {"clusters": ["cloud"]}
    assert all_pods(fed) == []
    anywhere = go(submit, lab.alice, gpus=2)  # the campus cluster still serves everyone else
    go(run_cycle)
    anywhere.refresh_from_db()
    assert (anywhere.state, anywhere.cluster.name) == (JobState.ADMITTED, "default")


def test_watch_410_on_one_cluster_relists_while_the_other_admits(fed, lab, submit, go):
    from scheduling.management.commands.watch_pods import watch

    on_cloud = go(submit, lab.bob, gpus=4, cluster_selector={"site": "cloud"}, name="on-cloud")
    go(run_cycle)
    on_cloud.refresh_from_db()
    cloud = fed.fake["cloud"]
    pod, node = f"job-{on_cloud.pk}-a1", on_cloud.placement[0]

    def meanwhile(fake):  # between the watcher's list and its watch: the pod runs, then history is compacted
        fake.run("gpu-nlp", pod, node=node)
        fake.compact()  # the watch's resourceVersion is now too old: 410 Gone, re-list

    cloud.race_next(meanwhile, method="GET", path=r"^/api/v1/pods$", after=1)
    before = len(cloud.requests)
    # The initial list (the admitted pod), then the watch: expired, re-listed (the pod running).
    stop = threading.Event()
    backstop = threading.Timer(120, stop.set)  # a watcher that never re-lists fails here instead of hanging
    backstop.start()
    try:
        n = watch(cluster="cloud", stop=stop, max_events=2)
    finally:
        backstop.cancel()
    assert n == 2
    gets = [r for r in cloud.requests[before:] if r.method == "GET" and r.path == "/api/v1/pods"]
    watching = [r.query.get("watch") in ("true", "True", "1") for r in gets]
    assert watching[:3] == [False, True, False]  # list, watch, and the re-list after the 410
    assert all(watching[3:])  # then at most the watch resumed from the re-list (its reader reads ahead): no list
    on_cloud.refresh_from_db()
    assert on_cloud.state == JobState.RUNNING
    other = go(submit, lab.alice, gpus=4)
    go(run_cycle)
    other.refresh_from_db()
    assert (other.state, other.cluster.name) == (JobState.ADMITTED, "default")


# ------------------------------------------------------------------------------------------- draining


def test_draining_stops_admissions_lets_work_finish_then_cordons(fed, lab, submit, go, client_for):
    running = go(submit, lab.bob, gpus=4, name="running", cluster_selector={"site": "cloud"})
    go(run_cycle)
    run(fed.fake["cloud"], running)
    go(tasks.sync_cluster)
    r = client_for(lab.root).patch("/api/v1/clusters/cloud", {"state": "draining", "comment": "maintenance"},
                                   format="json")
    assert r.status_code == 200 and r.json()["state"] == "draining"
    r = client_for(lab.alice).patch("/api/v1/clusters/cloud", {"state": "active"}, format="json")
    assert r.status_code == 403

    pinned = go(submit, lab.alice, gpus=1, name="pinned", cluster_selector={"site": "cloud"})
    anywhere = go(submit, lab.alice, gpus=4, name="anywhere", cluster_preference={"site": "cloud"})
    go(run_cycle)
    pinned.refresh_from_db()
    anywhere.refresh_from_db()
    assert pinned.state == JobState.QUEUED and pinned.reason_code == "clusters_unavailable"
    assert (anywhere.state, anywhere.cluster.name) == (JobState.ADMITTED, "default")  # not the draining one
    running.refresh_from_db()
    assert running.state == JobState.RUNNING  # running work is left to finish

    fed.fake["cloud"].terminate("gpu-nlp", f"job-{running.pk}-a1", exit_code=0)
    go(tasks.sync_cluster)
    running.refresh_from_db()
    assert running.state == JobState.SUCCEEDED
    assert Cluster.objects.get(name="cloud").state == ClusterState.CORDONED  # drained: still closed
    from portal.models import AuditEntry

    assert AuditEntry.objects.filter(action="cluster.update", new__state="cordoned").exists()


def test_requeued_work_may_move_to_another_cluster(fed, lab, submit, go):
    job = go(submit, lab.alice, gpus=4, cluster_preference={"site": "cloud"})
    go(run_cycle)
    job.refresh_from_db()
    assert job.cluster.name == "cloud"
    run(fed.fake["cloud"], job)
    go(tasks.sync_cluster)
    Cluster.objects.filter(name="cloud").update(state=ClusterState.DRAINING)
    # the kubelet evicts the pod: the attempt ends and the job is requeued
    fed.fake["cloud"].kubelet_evict("gpu-vision", f"job-{job.pk}-a1")
    fed.fake["cloud"].advance(60)
    go(tasks.sync_cluster)
    job.refresh_from_db()
    assert (job.state, job.attempt, job.cluster_id) == (JobState.QUEUED, 2, None)
    go(run_cycle)
    job.refresh_from_db()
    assert (job.state, job.attempt, job.cluster.name) == (JobState.ADMITTED, 2, "default")
    assert ("default", f"job-{job.pk}-a2") in all_pods(fed)
    assert ("cloud", f"job-{job.pk}-a2") not in all_pods(fed)


# ------------------------------------------------------------------------------------------- restarts


def test_re_run_tasks_never_make_a_second_pod_on_any_cluster(fed, lab, submit, go,
                                                              django_capture_on_commit_callbacks):
    jobs = [go(submit, lab.alice, gpus=4, name="a"),
            go(submit, lab.bob, gpus=4, name="b", cluster_selector={"site": "cloud"}),
            go(submit, lab.bob, gpus=2, name="c")]
    # The cycle commits its admissions, and the worker dies before it sends a single pod (the messages lost).
    with django_capture_on_commit_callbacks(execute=False):
        run_cycle()
    assert all_pods(fed) == []
    bound = {j.pk: j.cluster.name for j in Job.objects.filter(pk__in=[j.pk for j in jobs])}
    assert set(bound.values()) == {"default", "cloud"} and bound[jobs[1].pk] == "cloud"
    # Every task a restarted worker might run, more than once, in any order.
    Job.objects.filter(pk__in=bound).update(admitted_at=timezone.now() - timedelta(seconds=40))
    for _ in range(2):
        go(tasks.reconcile)
        for j in jobs:
            tasks.admit_pods(j.pk, 1)
            tasks.create_pods(j.pk, 1)
        tasks.admit_pods_many([[j.pk, 1] for j in jobs])
        go(tasks.sync_cluster)
    expected = sorted((bound[j.pk], f"job-{j.pk}-a1") for j in jobs)
    assert all_pods(fed) == expected  # one pod per job, each on the cluster its admission chose
    posts = fed.fake["default"].count("POST", "/pods$") + fed.fake["cloud"].count("POST", "/pods$")
    assert posts >= len(jobs)  # retried creates were answered 409 and adopted, never a second pod


def test_a_stray_pod_of_a_live_attempt_on_another_cluster_is_deleted(fed, lab, submit, go):
    job = go(submit, lab.alice, gpus=4, cluster_selector={"site": "cloud"})
    go(run_cycle)
    job.refresh_from_db()
    # a pod of the same attempt on the wrong cluster (made by hand, or by a bug): the reconciler removes it ...
    backends.get_backend("default").ensure_pods(podsets.podset_for(job))
    assert ("default", f"job-{job.pk}-a1") in all_pods(fed)
    assert go(tasks.reconcile_one, fed.row["default"].pk).get("orphans_deleted") == 1
    pod = fed.fake["default"].pod("gpu-vision", f"job-{job.pk}-a1")
    assert pod is None or pod["metadata"].get("deletionTimestamp")
    # ... and never the job's own pod on its own cluster.
    assert fed.fake["cloud"].pod("gpu-vision", f"job-{job.pk}-a1")["metadata"].get("deletionTimestamp") is None
    assert tasks.delete_pods(job.pk, 1, "gpu-vision", "cloud") == "live"
