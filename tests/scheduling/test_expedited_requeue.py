"""Expedited requeue through the portal (the simulated cluster): a job whose pods were lost with their node waits
again first in its tier, after a back-off, and says so on its timeline; the policy caps it per job; a preemption
or the job's own failure is never expedited; and a policy version saved before the rule existed keeps the old
behaviour (its normal place)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from engine.policy import policy_to_dict
from engine.types import Policy
from notifications.models import Event
from scheduling.backends import get_backend
from scheduling.models import Job, JobState, PolicyVersion
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.lifecycle import EXPEDITED_REQUEUE, requeue
from scheduling.services.policy import policy_update

pytestmark = pytest.mark.django_db


def start(go, job) -> Job:
    go(run_cycle)
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING, (job.state, job.reason_code)
    return job


def lose_node(go, job, reason="NodeLost") -> Job:
    assert get_backend("default").fail_pod(job_id=job.pk, attempt=job.attempt, index=0, exit_code=None,
                                           reason=reason, message="node n0 is gone") == 1
    go(sync_cluster)
    go(sync_cluster)  # a gang's other pods were evicted meanwhile: now the attempt is over
    job.refresh_from_db()
    return job


def end_back_off(job) -> None:
    Job.objects.filter(pk=job.pk).update(not_before=timezone.now() - timedelta(seconds=1))


def older_rival(lab, submit) -> Job:
    """An 8-GPU job of another department, waiting for hours at high urgency: in its normal place a requeued
    job waits behind it."""
    rival = submit(lab.bob, name="rival", gpus=4, pods=2, urgency="high")
    Job.objects.filter(pk=rival.pk).update(submitted_at=timezone.now() - timedelta(hours=5))
    return rival


@pytest.mark.parametrize("reason", ["NodeLost", "NodeShutdown"])
def test_a_job_that_lost_its_node_goes_ahead_of_its_tier_after_its_back_off(lab, submit, go, reason):
    job = start(go, submit(lab.alice, gpus=4, pods=2))
    rival = older_rival(lab, submit)
    before = timezone.now()
    job = lose_node(go, job, reason)
    assert (job.state, job.attempt, job.expedited_requeues) == (JobState.QUEUED, 2, 1)
    assert before <= job.expedited_at <= timezone.now()
    assert before + timedelta(seconds=29) < job.not_before <= timezone.now() + timedelta(seconds=30)
    event = job.events.get(reason_code=EXPEDITED_REQUEUE)
    assert reason in event.message and "1 of 3" in event.message and "elastic" in event.message
    assert event.data["expedited"] and event.data["backoff_s"] == 30
    assert Event.objects.get(kind="job.retried").data["backoff_s"] == 30  # its owner hears of the back-off

    go(run_cycle)  # in its back-off: the rival does not take the GPUs it will start on
    job.refresh_from_db(), rival.refresh_from_db()
    assert job.state == rival.state == JobState.QUEUED
    assert job.reason_detail["expedited_since"] and job.reason_detail["reserved_from"]
    end_back_off(job)
    job = start(go, job)
    rival.refresh_from_db()
    assert rival.state == JobState.QUEUED


def test_without_expedited_requeue_the_job_waits_in_its_normal_place(lab, submit, go):
    policy_update(user=lab.root, data={**policy_to_dict(Policy()), "expedited_requeues": 0}, comment="off")
    job = start(go, submit(lab.alice, gpus=4, pods=2))
    rival = older_rival(lab, submit)
    job = lose_node(go, job)
    assert job.expedited_at is None and job.expedited_requeues == 0 and job.not_before is None
    assert "expedited requeue is off" in job.events.get(reason_code="requeued", kind="requeue").message
    go(run_cycle)
    rival.refresh_from_db()
    assert rival.state == JobState.ADMITTED


def test_a_policy_saved_before_the_rule_existed_keeps_the_old_behaviour(lab, submit, go):
    old = policy_to_dict(Policy())
    del old["expedited_requeues"], old["expedited_backoff_s"]
    PolicyVersion.objects.create(version=1, data=old, author=lab.root)
    job = lose_node(go, start(go, submit(lab.alice, gpus=4)))
    assert job.state == JobState.QUEUED and job.expedited_at is None


def test_the_cap_per_job_then_its_normal_place(lab, submit, go):
    policy_update(user=lab.root, data={**policy_to_dict(Policy()), "expedited_requeues": 2}, comment="two")
    job = submit(lab.alice, gpus=4)
    for number in (1, 2):
        job = lose_node(go, start(go, job))
        assert (job.expedited_requeues, job.expedited_at is not None) == (number, True)
        end_back_off(job)
    job = lose_node(go, start(go, job))
    assert job.expedited_requeues == 2 and job.expedited_at is None and job.state == JobState.QUEUED
    assert "used up" in job.events.filter(kind="requeue").order_by("-pk")[0].message


def test_a_preemption_clears_an_expedited_place_and_is_never_expedited(lab, submit, go):
    job = lose_node(go, start(go, submit(lab.alice, gpus=4)))
    assert job.expedited_at is not None
    end_back_off(job)
    job = start(go, job)
    go(requeue, job=job, outcome="preempted", reason="preempted", message="for a realtime job")
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.expedited_at is None and job.expedited_requeues == 1
    assert not job.events.filter(kind="requeue", attempt=job.attempt).exists()


@pytest.mark.parametrize("how", [{"exit_code": 1, "reason": "Error"}, {"exit_code": None, "reason": "Evicted"}])
def test_the_jobs_own_failure_or_a_kubelet_eviction_is_not_expedited(lab, submit, go, how):
    job = start(go, submit(lab.alice, gpus=1, max_retries=1, retry_on_exit_codes=[1]))
    assert get_backend("default").fail_pod(job_id=job.pk, attempt=job.attempt, index=0, **how) == 1
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.expedited_at is None
    assert not job.events.filter(reason_code=EXPEDITED_REQUEUE).exists()
