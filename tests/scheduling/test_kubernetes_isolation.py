"""The cluster's pods are the portal's only where the portal put them: in the job's own namespace, with this
installation's label. A look-alike anywhere else (the portal's labels copied into another namespace, or another
installation's pod of the same job id in the job's namespace), created and deleted, moves no job, is never
counted as the portal's capacity, and is never listed, evicted or deleted by the portal.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.backends import get_backend
from scheduling.models import Job, JobEvent, JobState, Node
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.pod_states import apply_pod_deleted, apply_pod_states
from scheduling.services.reconcile import reconcile

pytestmark = pytest.mark.django_db

FOREIGN_NS = "someone-elses"


def pod_name(job):
    return f"job-{job.pk}-a{job.attempt}"


def running_job(kube, lab, submit, go):
    job = go(submit, lab.alice, gpus=1, name="victim")
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    kube.run("gpu-vision", pod_name(job))
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING
    # long past every grace period: a missing pod would be taken for lost at once
    Job.objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(hours=1),
                                         admitted_at=timezone.now() - timedelta(hours=1))
    job.refresh_from_db()
    return job


def look_alike(kube, job, *, ns, name, installation=None, phase="Running", gpus=1):
    """A pod carrying the labels of ``job``'s own pod (its installation's too, unless another is given)."""
    labels = dict(kube.pod("gpu-vision", pod_name(job))["metadata"]["labels"])
    if installation is not None:
        labels["gpu-portal.io/installation"] = installation
    kube.add_foreign_pod(ns, name, node="gpu-1", gpus=gpus, phase=phase, labels=labels)
    return labels


def delete(kube, ns, name):
    kube.handle("DELETE", f"/api/v1/namespaces/{ns}/pods/{name}", {}, b"")
    kube.finish_termination(ns, name)


def snapshot(job):
    job.refresh_from_db()
    return job.state, job.attempt, job.reason_code, JobEvent.objects.filter(job=job).count()


def act_as_every_reader(kube, go, job, ns, name):
    """What the watcher, the sync and the reconciler each do with the look-alike there, then with it gone."""
    backend = get_backend("default")
    state = backend.pod_state(kube.pod(ns, name))
    if state is not None:  # the watch yields only this installation's pods; the namespace is checked above it
        go(apply_pod_states, [state])
    go(sync_cluster)
    go(reconcile)
    delete(kube, ns, name)
    if state is not None:
        go(apply_pod_deleted, state=state)
    go(sync_cluster)
    go(reconcile)


def test_a_look_alike_in_another_namespace_changes_nothing(kube, lab, submit, go):
    job = running_job(kube, lab, submit, go)
    before = snapshot(job)
    look_alike(kube, job, ns=FOREIGN_NS, name="imposter", phase="Failed")
    seen = len(kube.requests)
    act_as_every_reader(kube, go, job, FOREIGN_NS, "imposter")
    assert snapshot(job) == before
    assert kube.pod("gpu-vision", pod_name(job)) is not None
    # nothing was listed, evicted or deleted in a namespace the portal does not own
    touched = [(r.method, r.path) for r in kube.requests[seen:] if f"/namespaces/{FOREIGN_NS}/" in r.path]
    assert touched == [(("DELETE", f"/api/v1/namespaces/{FOREIGN_NS}/pods/imposter"))]  # the test's own delete


def test_another_installations_pod_in_the_jobs_namespace_changes_nothing(kube, lab, submit, go):
    job = running_job(kube, lab, submit, go)
    before = snapshot(job)
    look_alike(kube, job, ns="gpu-vision", name="their-job", installation="another-portal", phase="Failed")
    seen = len(kube.requests)
    go(sync_cluster)
    go(reconcile)
    assert snapshot(job) == before
    assert kube.pod("gpu-vision", "their-job") is not None  # never taken for an orphan of ours
    writes = [(r.method, r.path) for r in kube.requests[seen:] if r.method in ("DELETE", "POST", "PATCH")]
    assert writes == []
    act_as_every_reader(kube, go, job, "gpu-vision", "their-job")
    assert snapshot(job) == before


def test_a_look_alike_never_starts_an_admitted_job(kube, lab, submit, go):
    job = go(submit, lab.alice, gpus=1, name="waiting")
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    look_alike(kube, job, ns=FOREIGN_NS, name="fake-start")
    look_alike(kube, job, ns="gpu-vision", name="their-start", installation="another-portal")
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED  # its own pod has not run yet


def test_a_look_alike_still_uses_its_node(kube, lab, submit, go):
    job = running_job(kube, lab, submit, go)
    look_alike(kube, job, ns=FOREIGN_NS, name="imposter", gpus=2)
    look_alike(kube, job, ns="gpu-vision", name="their-job", installation="another-portal", gpus=1)
    go(sync_cluster)
    # the two look-alikes' GPUs are used by others; the job's own pod (on gpu-0 or gpu-1) is the portal's
    used = dict(Node.objects.values_list("name", "used_by_others"))
    assert used["gpu-1"] == 3
    assert used["gpu-0"] == 0


def test_a_dead_attempts_look_alike_elsewhere_is_never_deleted(kube, lab, submit, go):
    job = running_job(kube, lab, submit, go)
    labels = look_alike(kube, job, ns=FOREIGN_NS, name="old-attempt")
    kube.pod(FOREIGN_NS, "old-attempt")["metadata"]["labels"] = {**labels, "gpu-portal.io/attempt": "7"}
    kube.add_foreign_pod("gpu-vision", "theirs-old", node="gpu-1",
                         labels={**labels, "gpu-portal.io/installation": "another-portal",
                                 "gpu-portal.io/attempt": "7"})
    seen = len(kube.requests)
    go(reconcile)
    assert kube.pod(FOREIGN_NS, "old-attempt") is not None
    assert kube.pod("gpu-vision", "theirs-old") is not None
    assert [r for r in kube.requests[seen:] if r.method in ("DELETE", "POST")] == []
