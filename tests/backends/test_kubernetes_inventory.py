"""Inventory (nodes, flavors, MIG, taints, cordons, everyone's pods), PriorityClasses and logs."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest

from portal.timestamps import split_log_stamp
from scheduling.backends.base import ClusterUnavailable
from scheduling.backends.kube import FlavorRule, KubernetesBackend, LogsUnavailable, PriorityClassNotOwned
from scheduling.backends.kube.logs import SINCE_MARGIN_S
from tests.fakes.k8s_fixtures import INSTALLATION

NS = "team-a"


# ------------------------------------------------------------------------------------------- inventory


@pytest.fixture
def cluster(kube_backend, kube_fake, make_podset):
    f = kube_fake
    f.add_node("a1", gpus=8, labels={"gpu-type": "a100"})
    f.add_node("h1", gpus=4, labels={"gpu-type": "h100"})
    # a MIG node exposes several resources: one inventory entry per (node, resource)
    f.add_node("m1", labels={"gpu-type": "a100"},
               extra={"nvidia.com/mig-3g.40gb": 2, "nvidia.com/mig-1g.10gb": 7, "nvidia.com/gpu": 0})
    f.add_node("cordoned", gpus=8, labels={"gpu-type": "a100"}, unschedulable=True)
    f.add_node("notready", gpus=8, labels={"gpu-type": "a100"}, ready=False)
    f.add_node("reserved", gpus=8, labels={"gpu-type": "a100"},
               taints=[{"key": "dedicated", "value": "infra", "effect": "NoSchedule"}])
    f.add_node("gpu-tainted", gpus=8, labels={"gpu-type": "a100"},
               taints=[{"key": "nvidia.com/gpu", "value": "present", "effect": "NoSchedule"},
                       {"key": "soft", "effect": "PreferNoSchedule"}])
    f.add_node("cpu-only", labels={"role": "cpu"})
    f.add_node("t4", gpus=2, labels={"gpu-type": "t4"})  # no flavor maps it: not in the inventory
    # pods the portal does not own still use GPUs
    f.add_foreign_pod("research", "notebook", node="a1", gpus=2)
    f.add_foreign_pod("research", "done", node="a1", gpus=4, phase="Succeeded")  # finished: uses nothing
    f.add_foreign_pod("research", "mig-user", node="m1", gpus=1, resource="nvidia.com/mig-1g.10gb")
    f.add_foreign_pod("research", "cpu-pod", node="a1")
    # one portal pod running on a1 (counted through the portal's own jobs, not as "others")
    podset = make_podset(gpus_per_pod=3)
    kube_backend.ensure_pods(podset)
    kube_backend.admit(podset, ("a1",))
    f.run(NS, "job-42-a1")
    return f


def test_inventory_nodes_per_flavor(kube_backend, cluster):
    inv = kube_backend.inventory()
    rows = {(n.name, n.flavor): (n.gpus, n.used_by_others, n.schedulable, n.taints) for n in inv.nodes}
    assert rows == {
        ("a1", "a100-80gb"): (8, 2, True, ()),
        ("h1", "h100"): (4, 0, True, ()),
        ("m1", "a100-mig-1g.10gb"): (7, 1, True, ()),
        ("m1", "a100-mig-3g.40gb"): (2, 0, True, ()),
        ("cordoned", "a100-80gb"): (8, 0, False, ("node.kubernetes.io/unschedulable",)),
        ("notready", "a100-80gb"): (8, 0, False, ()),
        ("reserved", "a100-80gb"): (8, 0, True, ("dedicated",)),
        ("gpu-tainted", "a100-80gb"): (8, 0, True, ()),  # tolerated by the portal's pods
    }
    a1 = next(n for n in inv.nodes if n.name == "a1")
    assert ("gpu-type", "a100") in a1.labels and a1.cluster == "default" and a1.usable
    assert not next(n for n in inv.nodes if n.name == "reserved").usable


def test_inventory_reports_the_portal_pods(kube_backend, cluster):
    (pod,) = kube_backend.inventory().pods
    assert (pod.name, pod.node, pod.phase) == ("job-42-a1", "a1", "Running")


def test_inventory_includes_finished_portal_pods(kube_backend, cluster):
    cluster.terminate(NS, "job-42-a1", exit_code=0)
    (pod,) = kube_backend.inventory().pods
    assert pod.phase == "Succeeded"


def test_inventory_uses_a_bounded_number_of_list_calls(kube_backend, cluster):
    before = len(cluster.requests)
    kube_backend.inventory()
    calls = cluster.requests[before:]
    assert [(r.method, r.path) for r in calls] == [
        ("GET", "/api/v1/nodes"), ("GET", "/api/v1/pods"), ("GET", "/api/v1/pods")]
    assert calls[1].query["fieldSelector"] == "status.phase!=Succeeded,status.phase!=Failed"
    assert "labelSelector" not in calls[1].query  # everyone's live pods: the portal's are read from it too
    # the portal's pods that ended: the only ones the list of live pods lacks
    assert calls[2].query["labelSelector"] == f"app.kubernetes.io/managed-by=gpu-portal,gpu-portal.io/installation={INSTALLATION}"
    assert calls[2].query["fieldSelector"] == "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"


def test_a_portal_pod_that_ends_between_the_two_pod_lists_is_read_once_as_ended(kube_backend, cluster):
    # it is live in the first list and ended in the second: never missing (a gone pod requeues an evicting
    # job), never twice, and its later state wins
    cluster.race_next(lambda f: f.terminate(NS, "job-42-a1", exit_code=0), method="GET", path=r"^/api/v1/pods$",
                      after=1)
    (pod,) = kube_backend.inventory().pods
    assert (pod.name, pod.phase) == ("job-42-a1", "Succeeded")


def test_the_portal_pods_are_read_from_everyones_live_pods_only_in_its_namespaces(kube_backend, cluster):
    cluster.add_foreign_pod("research", "look-alike", node="a1", gpus=1)
    inv = kube_backend.inventory(namespaces={"elsewhere"})
    assert inv.pods == ()
    assert [p.name for p in kube_backend.inventory(namespaces={NS}).pods] == ["job-42-a1"]


def test_inventory_paginates_large_clusters(kube_fake, sleeps):
    for i in range(7):
        kube_fake.add_node(f"n{i}", gpus=4, labels={"gpu-type": "a100"})
    backend = KubernetesBackend(host=kube_fake.url, qps=0, page_size=3, sleep=sleeps)
    assert len(backend.inventory().nodes) == 7
    assert kube_fake.count("GET", "^/api/v1/nodes$") == 3


def test_without_flavor_rules_flavors_derive_from_labels(kube_fake, sleeps):
    kube_fake.add_node("m1", labels={"gpu-type": "a100"}, extra={"nvidia.com/mig-3g.40gb": 2, "nvidia.com/gpu": 1})
    backend = KubernetesBackend(host=kube_fake.url, qps=0, sleep=sleeps)
    assert {(n.flavor, n.gpus) for n in backend.inventory().nodes} == {("a100", 1), ("a100-mig-3g.40gb", 2)}


def test_custom_resources_can_be_mapped(kube_fake, sleeps):
    kube_fake.add_node("amd", labels={"gpu-type": "mi300"}, extra={"amd.com/gpu": 8})
    backend = KubernetesBackend(host=kube_fake.url, qps=0, sleep=sleeps,
                                flavors=[FlavorRule("mi300x", "amd.com/gpu", (("gpu-type", "mi300"),))])
    assert [(n.name, n.flavor, n.gpus) for n in backend.inventory().nodes] == [("amd", "mi300x", 8)]


def test_inventory_when_the_api_is_down(kube_backend, kube_fake):
    kube_fake.fail_next(1, status=503, path="/api/v1/pods")
    with pytest.raises(ClusterUnavailable):
        kube_backend.inventory()


# ------------------------------------------------------------------------------------------- priority classes

TIERS = {"ai-realtime": 1000000, "ai-elastic": 100000, "ai-backfill": 1000}


def _writes(fake, before):
    return [(r.method, r.path.rsplit("/", 1)[-1]) for r in fake.requests[before:] if r.method != "GET"]


def test_priority_classes_created_when_missing(kube_fake, kube_backend):
    for name in TIERS:
        del kube_fake.priority_classes[name]
    changes = kube_backend.ensure_priority_classes(TIERS)
    assert changes == ["created ai-backfill (1000)", "created ai-elastic (100000)", "created ai-realtime (1000000)"]
    pc = kube_fake.priority_classes["ai-realtime"]
    assert pc["value"] == 1000000 and pc["preemptionPolicy"] == "Never"
    assert pc["metadata"]["labels"]["app.kubernetes.io/managed-by"] == "gpu-portal"
    assert kube_backend.ensure_priority_classes(TIERS) == []  # idempotent: nothing to do the second time


def test_priority_class_value_change_recreates_our_own_class(kube_fake, kube_backend):
    kube_backend.ensure_priority_classes(TIERS)
    before = len(kube_fake.requests)
    changes = kube_backend.ensure_priority_classes({**TIERS, "ai-backfill": 10})
    assert changes == ["recreated ai-backfill (1000 -> 10)"]
    assert _writes(kube_fake, before) == [("DELETE", "ai-backfill"), ("POST", "priorityclasses")]
    assert kube_fake.priority_classes["ai-backfill"]["value"] == 10


def test_priority_class_description_change_is_an_update(kube_fake, kube_backend):
    kube_backend.ensure_priority_classes(TIERS)
    changes = kube_backend.ensure_priority_classes(TIERS, descriptions={"ai-realtime": "latency-sensitive"})
    assert changes == ["updated ai-realtime"]
    assert kube_fake.priority_classes["ai-realtime"]["description"] == "latency-sensitive"


def test_a_class_we_do_not_own_is_never_changed(kube_fake, kube_backend):
    del kube_fake.priority_classes["ai-realtime"]
    kube_fake.add_priority_class("ai-realtime", 5000)  # someone else's, no portal label
    before = len(kube_fake.requests)
    with pytest.raises(PriorityClassNotOwned, match="ai-realtime"):
        kube_backend.ensure_priority_classes({**TIERS, "ai-new": 7})
    assert _writes(kube_fake, before) == []  # refused before touching anything
    assert kube_fake.priority_classes["ai-realtime"]["value"] == 5000


def test_a_foreign_class_that_already_matches_is_left_alone(kube_fake, kube_backend):
    del kube_fake.priority_classes["ai-backfill"]
    kube_fake.add_priority_class("ai-backfill", 1000, preemption_policy="Never")
    kube_backend.ensure_priority_classes(TIERS)
    assert "app.kubernetes.io/managed-by" not in kube_fake.priority_classes["ai-backfill"]["metadata"]["labels"]


def test_system_classes_are_refused(kube_backend):
    with pytest.raises(PriorityClassNotOwned, match="system"):
        kube_backend.ensure_priority_classes({"system-cluster-critical": 1})


def test_preemption_policy_per_class(kube_fake, kube_backend):
    kube_backend.ensure_priority_classes({"ai-x": 5}, preemption_policy={"ai-x": "PreemptLowerPriority"})
    assert kube_fake.priority_classes["ai-x"]["preemptionPolicy"] == "PreemptLowerPriority"


# ------------------------------------------------------------------------------------------- logs


@pytest.fixture
def running(kube_backend, kube_fake, make_podset):
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    podset = make_podset()
    kube_backend.ensure_pods(podset)
    kube_backend.admit(podset, ("n1",))
    kube_fake.run(NS, "job-42-a1")
    return podset


def test_logs_tail(kube_backend, kube_fake, running):
    kube_fake.append_log(NS, "job-42-a1", *[f"step {i}" for i in range(10)])
    assert list(kube_backend.logs(job_id=42, attempt=1, namespace=NS, tail_lines=3)) == ["step 7", "step 8", "step 9"]
    (req,) = [r for r in kube_fake.requests if r.path.endswith("/log")]
    assert req.query["tailLines"] == "3" and req.query["container"] == "main"


def test_logs_with_timestamps_since_a_time(kube_backend, kube_fake, running):
    kube_fake.append_log(NS, "job-42-a1", "step 1", "step 2")
    lines = list(kube_backend.logs(job_id=42, attempt=1, namespace=NS, timestamps=True, tail_lines=None,
                                   since=datetime.now(UTC) - timedelta(minutes=5)))
    assert [split_log_stamp(x)[1] for x in lines] == ["step 1", "step 2"]
    assert all(split_log_stamp(x)[0] is not None for x in lines)
    (req,) = [r for r in kube_fake.requests if r.path.endswith("/log")]
    # This client has no sinceTime: seconds back, with a margin for the node's clock; no tailLines
    assert req.query["timestamps"] == "true" and "tailLines" not in req.query
    assert 300 + SINCE_MARGIN_S <= int(req.query["sinceSeconds"]) <= 302 + SINCE_MARGIN_S


def test_logs_follow_streams_until_the_pod_ends(kube_backend, kube_fake, running):
    kube_fake.append_log(NS, "job-42-a1", "epoch 1")
    lines = kube_backend.logs(job_id=42, attempt=1, namespace=NS, follow=True)

    def produce():
        threading.Event().wait(0.3)
        kube_fake.append_log(NS, "job-42-a1", "epoch 2", "epoch 3")
        threading.Event().wait(0.3)
        kube_fake.terminate(NS, "job-42-a1", exit_code=0)

    t = threading.Thread(target=produce)
    t.start()
    assert list(lines) == ["epoch 1", "epoch 2", "epoch 3"]
    t.join()


def test_logs_of_a_pod_that_has_not_started(kube_backend, make_podset):
    kube_backend.ensure_pods(make_podset())
    with pytest.raises(LogsUnavailable, match="host"):
        kube_backend.logs(job_id=42, attempt=1, namespace=NS)


def test_logs_of_a_job_without_pods(kube_backend):
    with pytest.raises(LogsUnavailable):
        kube_backend.logs(job_id=1, attempt=1, namespace=NS)


def test_logs_of_a_multi_pod_job_come_from_pod_zero(kube_backend, kube_fake, make_podset):
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    podset = make_podset(pods=2, gpus_per_pod=1)
    kube_backend.ensure_pods(podset)
    kube_backend.admit(podset, ("n1", "n1"))
    for i in range(2):
        kube_fake.run(NS, f"job-42-a1-{i}")
        kube_fake.append_log(NS, f"job-42-a1-{i}", f"rank {i}")
    assert list(kube_backend.logs(job_id=42, attempt=1, namespace=NS)) == ["rank 0"]
