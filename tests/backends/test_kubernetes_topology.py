"""Topology on the Kubernetes backend: the inventory brings the nodes' rack labels to the engine, which places a
gang that requires a rack in one, and the admission pins each pod to the node the engine chose."""

from __future__ import annotations

from engine import schedule
from engine.types import ClusterInfo, PendingJob, Quota, RunningJob, Snapshot

NS = "team-a"
RACK = "topology.kubernetes.io/rack"


def test_a_required_rack_reaches_the_pods_through_the_inventory(kube_backend, kube_fake, make_podset):
    for name, rack in (("a0", "r0"), ("a1", "r0"), ("b0", "r1"), ("b1", "r1")):
        kube_fake.add_node(name, gpus=8, labels={"gpu-type": "a100", RACK: rack})
    inv = kube_backend.inventory()
    nodes = tuple(n for n in inv.nodes if n.flavor == "a100-80gb")
    assert {dict(n.labels)[RACK] for n in nodes} == {"r0", "r1"}
    # a0 and b1 are busy: 16 GPUs free, 8 per rack; a second job frees b1 sooner than a0
    running = (RunningJob(90, "d", "a100-80gb", "elastic", ("a0",), 8, started_at=0.0, max_runtime_s=7200.0),
               RunningJob(91, "d", "a100-80gb", "elastic", ("b1",), 8, started_at=0.0, max_runtime_s=3600.0))
    gang = PendingJob(1, "d", "a100-80gb", pods=2, gpus_per_pod=8, topology_level=RACK, topology_required=True)
    snap = Snapshot(now=600.0, nodes=nodes, running=running, pending=(gang,),
                    quotas=(Quota("d", "a100-80gb", 64),),
                    clusters=(ClusterInfo("default", topology_levels=(RACK, "kubernetes.io/hostname")),))
    (reason,) = schedule(snap).pending
    assert reason.detail["reserved_from"] == 3600.0  # r1 frees first, when job 91 ends
    # once it has, the gang goes to r1 whole and each pod is pinned to its node
    (admission,) = schedule(Snapshot(now=3600.0, nodes=nodes, running=running[:1], pending=(gang,),
                                     quotas=snap.quotas, clusters=snap.clusters)).admissions
    assert sorted(admission.placement) == ["b0", "b1"]
    podset = make_podset(pods=2)
    kube_backend.ensure_pods(podset)
    kube_backend.admit(podset, admission.placement)
    for index, node in enumerate(admission.placement):
        pod = kube_fake.pod(NS, f"job-42-a1-{index}")
        (term,) = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
            "nodeSelectorTerms"]
        assert term["matchFields"] == [{"key": "metadata.name", "operator": "In", "values": [node]}]
