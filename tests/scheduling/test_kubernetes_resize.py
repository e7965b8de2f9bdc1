"""A resizable job on the Kubernetes backend (against the fake API server, which enforces the API server's
rules): a grow's pods created gated and pinned with the tier's PriorityClass and ungated only once all of them
exist, the job's PodDisruptionBudget following its size, a shrink through the Eviction API highest rank first
(the job keeps its larger size until the pods are gone), a 429 asked again and never deleted around, and each
running pod told its new size in its size file."""

from __future__ import annotations

import json
from datetime import datetime, timedelta

import pytest
from django.utils import timezone

from scheduling.backends.base import SIZE_ANNOTATION
from scheduling.models import Job, JobState
from scheduling.services import resizes
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.jobs import job_cancel
from scheduling.services.reconcile import reconcile

pytestmark = pytest.mark.django_db

NS = "gpu-vision"


def name(job, index):
    return f"job-{job.pk}-a{job.attempt}-{index}"


def due(job, seconds=1):
    return datetime.fromisoformat(job.resize["due_at"]) + timedelta(seconds=seconds)


def indices(kube, job):
    return sorted(int(p["metadata"]["labels"]["gpu-portal.io/pod-index"]) for p in kube.pods.values()
                  if p["metadata"]["labels"].get("gpu-portal.io/job-id") == str(job.pk)
                  and not p["metadata"].get("deletionTimestamp"))


@pytest.fixture
def running(kube, lab, submit, go):
    """Bob's 4-GPU job on one node; Alice's job of 2 to 8 one-GPU pods (its own budget: 6 available) runs at 3."""
    blocker = go(submit, lab.bob, gpus=4, name="blocker")
    go(run_cycle)
    blocker.refresh_from_db()
    kube.run("gpu-nlp", f"job-{blocker.pk}-a1")
    job = go(submit, lab.alice, gpus=1, pods=8, min_pods=2, checkpoint_interval_s=600, pdb_min_available=6,
             name="elastic")
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.size == 3, list(job.events.values_list("reason_code", "message"))
    for i in range(3):
        kube.run(NS, name(job, i))
    go(sync_cluster)
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(minutes=5))
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    return blocker, job


def grown(kube, lab, go, blocker, job):
    go(job_cancel, user=lab.bob, job=blocker)
    kube.advance(31)  # its pod is gone once its grace period has passed
    go(sync_cluster)
    go(run_cycle)
    job.refresh_from_db()
    assert job.resize["to"] == 8
    before = len(kube.requests)
    go(run_cycle, now=due(job))
    job.refresh_from_db()
    return kube.requests[before:]


def test_a_grow_makes_the_new_ranks_gated_then_ungates_them_all_and_widens_the_budget(kube, lab, go, running):
    blocker, job = running
    assert kube.pdbs[(NS, f"job-{job.pk}-a1")]["spec"]["minAvailable"] == 3  # at most its size
    calls = grown(kube, lab, go, blocker, job)
    assert job.resize is None and job.size == 8 and len(job.placement) == 8
    posts = [r for r in calls if r.method == "POST" and r.path.endswith("/pods")]
    patches = [r for r in calls if r.method == "PATCH" and f"/pods/job-{job.pk}-" in r.path]
    assert [p.body["metadata"]["name"] for p in posts] == [name(job, i) for i in range(3, 8)]
    for p in posts:  # gated, pinned to its node, the tier's class, as an admission's pods
        assert [g["name"] for g in p.body["spec"]["schedulingGates"]] == ["gpu-portal.io/admission"]
        assert p.body["spec"]["priorityClassName"] == kube.pod(NS, name(job, 0))["spec"]["priorityClassName"]
    first_ungate = calls.index(next(r for r in patches if any(
        op.get("path", "").startswith("/spec/schedulingGates") and op["op"] == "remove" for op in r.body)))
    assert calls.index(posts[-1]) < first_ungate  # none ungated before every new rank existed
    for i in range(8):
        pod = kube.pod(NS, name(job, i))
        assert not pod["spec"].get("schedulingGates")
    assert kube.pdbs[(NS, f"job-{job.pk}-a1")]["spec"]["minAvailable"] == 6
    # the new ranks end with the attempt (which started 5 minutes before), not a whole max runtime later
    assert kube.pod(NS, name(job, 7))["spec"]["activeDeadlineSeconds"] <= job.max_runtime_s - 300
    told = json.loads(kube.pod(NS, name(job, 0))["metadata"]["annotations"][SIZE_ANNOTATION])
    assert told == {"pods": 8, "world_size": 8}
    env = dict((e["name"], e.get("value")) for e in kube.pod(NS, name(job, 7))["spec"]["containers"][0]["env"])
    assert (env["PORTAL_WORLD_SIZE"], env["PORTAL_MIN_NODES"], env["PORTAL_MAX_NODES"]) == ("8", "2", "8")
    assert not [r for r in kube.requests if r.method == "DELETE" and f"job-{job.pk}-" in r.path]


def test_a_shrink_evicts_the_highest_ranks_and_waits_for_them_to_be_gone(kube, lab, submit, go, running):
    blocker, job = running
    grown(kube, lab, go, blocker, job)
    for i in range(3, 8):
        kube.run(NS, name(job, i))
    go(sync_cluster)
    session = go(submit, lab.bob, gpus=2, tier="realtime", name="rt")
    go(run_cycle)
    job.refresh_from_db()
    assert job.resize["to"] == 6 and job.resize["for_job"] == session.pk
    before = len(kube.requests)
    go(run_cycle, now=due(job))
    evictions = [r.path.split("/")[-2] for r in kube.requests[before:] if r.path.endswith("/eviction")]
    assert evictions == [name(job, 7), name(job, 6)]  # highest rank first
    job.refresh_from_db()
    assert job.size == 8 and job.resize["state"] == resizes.APPLYING  # terminating pods still hold their GPUs
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING  # the leaving ranks are not the job's state
    before = len(kube.requests)
    go(reconcile)  # nor a broken gang whose other ranks the reconciler would evict
    assert not [r for r in kube.requests[before:] if r.path.endswith("/eviction")]

    kube.advance(31)
    go(run_cycle, now=due(job) + timedelta(seconds=resizes.RETRY_S + 1))
    job.refresh_from_db()
    assert job.resize is None and job.size == 6 and indices(kube, job) == list(range(6))
    assert not [r for r in kube.requests if r.method == "DELETE" and f"job-{job.pk}-" in r.path]
    assert json.loads(kube.pod(NS, name(job, 5))["metadata"]["annotations"][SIZE_ANNOTATION])["pods"] == 6


def test_a_refused_eviction_is_asked_again_never_deleted_around(kube, lab, submit, go, running):
    blocker, job = running
    grown(kube, lab, go, blocker, job)
    for i in range(3, 8):
        kube.run(NS, name(job, i))
    go(sync_cluster)
    kube.unready(NS, name(job, 2))  # 7 healthy of 8, 6 available wanted: one more pod may go, not two
    go(submit, lab.bob, gpus=2, tier="realtime", name="rt")
    go(run_cycle)
    job.refresh_from_db()
    for k in range(3):
        go(run_cycle, now=due(job) + timedelta(seconds=k * (resizes.RETRY_S + 1)))
    job.refresh_from_db()
    assert job.size == 8 and job.resize["state"] == resizes.APPLYING
    assert indices(kube, job) == list(range(7))  # rank 7 went; rank 6's eviction is refused, asked again
    refused = job.events.filter(reason_code="disruption_budget")
    assert refused.count() == 1 and "asking again, never deleting it" in refused.get().message
    assert not [r for r in kube.requests if r.method == "DELETE" and f"job-{job.pk}-" in r.path]
    evictions = [r for r in kube.requests if r.path.endswith(f"{name(job, 6)}/eviction")]
    assert len(evictions) == 3  # once per try
