"""Table-driven tests of the namespace-quota constraint: a Kubernetes ResourceQuota that refused a department's
request keeps jobs of that size (department, flavor, at least that many GPUs) off that cluster, with their own
reason, until the refusal expires (the adapter drops it earlier once the quota changes)."""

from __future__ import annotations

from dataclasses import replace

import pytest
from core_builders import NOW, Result, Snap, job

from engine import NamespaceQuotaLimit, reasons, schedule


def limit(cluster="east", dept="A", flavor="a100", gpus=4, until=NOW + 300) -> NamespaceQuotaLimit:
    return NamespaceQuotaLimit(cluster=cluster, department=dept, flavor=flavor, total_gpus=gpus, until=until)


def decide(snap: Snap, *limits: NamespaceQuotaLimit) -> Result:
    return Result(schedule(replace(snap.build(), namespace_quotas=tuple(limits))))


def one_cluster() -> Snap:
    return Snap().node("n0", gpus=8, cluster="east").quota("A", 16).quota("B", 16)


@pytest.mark.parametrize(
    ("limits", "pending", "admitted", "code"),
    [
        # no refusal: admitted
        ((), job(1, gpus=4), True, None),
        # refused at this size: waits with its own reason, whatever room the cluster has
        ((limit(gpus=4),), job(1, gpus=4), False, reasons.NAMESPACE_QUOTA),
        # a larger request is refused too
        ((limit(gpus=4),), job(1, gpus=6), False, reasons.NAMESPACE_QUOTA),
        # a smaller one may still fit the namespace's quota
        ((limit(gpus=4),), job(1, gpus=2), True, None),
        # another department's namespace, another flavor, another cluster: not this job's
        ((limit(dept="B"),), job(1, gpus=4), True, None),
        ((limit(flavor="h100"),), job(1, gpus=4), True, None),
        ((limit(cluster="west"),), job(1, gpus=4), True, None),
        # the refusal has expired (bounded: a quota whose change was never seen does not block forever)
        ((limit(until=NOW),), job(1, gpus=4), True, None),
        ((limit(until=NOW - 1),), job(1, gpus=4), True, None),
    ],
)
def test_a_refused_namespace_keeps_jobs_of_that_size_off_its_cluster(limits, pending, admitted, code):
    res = decide(one_cluster().pending(pending), *limits)
    assert (1 in res.admitted) is admitted
    if code is not None:
        assert res.code(1) == code
        reason = res.reason[1]
        assert reason.detail["clusters"] == ["east"] and reason.detail["requested"] == pending.total_gpus
        assert "east" in reason.message and reason.estimated_start is None


def test_the_job_goes_to_another_cluster_whose_namespace_takes_it():
    snap = Snap().node("n0", gpus=8, cluster="east").node("n0", gpus=8, cluster="west").quota("A", 16)
    snap.cluster("east", cost_rank=0).cluster("west", cost_rank=5)
    assert decide(snap.pending(job(1, gpus=4))).admitted[1].cluster == "east"
    assert decide(snap, limit(cluster="east")).admitted[1].cluster == "west"
    assert decide(snap, limit(cluster="east"), limit(cluster="west")).code(1) == reasons.NAMESPACE_QUOTA


def test_the_refused_gpus_go_to_other_work_in_the_same_cycle():
    snap = one_cluster().pending(job(1, gpus=8, submitted_at=NOW - 600), job(2, dept="B", gpus=8))
    assert set(decide(snap).admitted) == {1}
    res = decide(snap, limit(gpus=8))
    assert set(res.admitted) == {2} and res.code(1) == reasons.NAMESPACE_QUOTA
