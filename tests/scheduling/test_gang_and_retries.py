"""Multi-node jobs and retries through the portal (the simulated cluster): one failed pod ends the gang's
attempt and its other pods are removed; a failure the job's retry rules cover becomes a new attempt after a
back-off (a ``retried`` event, a notification), anything else fails the job; a preemption is no retry; every
pod's log is kept and readable by its index; and bad input is refused with field errors."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from engine import reasons
from notifications.models import Event
from scheduling.backends import get_backend
from scheduling.models import AttemptLog, Job, JobState, SimPod
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.lifecycle import requeue

pytestmark = pytest.mark.django_db


def start(go, job) -> Job:
    go(run_cycle)
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING, (job.state, job.reason_code)
    return job


def fail(go, job, index, **how) -> Job:
    assert get_backend("default").fail_pod(job_id=job.pk, attempt=job.attempt, index=index, **how) == 1
    go(sync_cluster)
    job.refresh_from_db()
    return job


def end_back_off(job) -> None:
    """The back-off's end moved into the past (a controlled clock: no waiting)."""
    Job.objects.filter(pk=job.pk).update(not_before=timezone.now() - timedelta(seconds=1))


def test_one_failed_pod_fails_the_gang_and_removes_the_others(lab, submit, go):
    job = start(go, submit(lab.alice, pods=2, gpus=2))
    SimPod.objects.filter(job_id=job.pk, index=0).update(log="rank 0 waits in all_reduce\n")
    job = fail(go, job, 1, exit_code=1, message="Traceback: boom")
    assert job.state == JobState.FAILED and job.exit_code == 1 and job.attempt == 1
    assert not SimPod.objects.filter(job_id=job.pk).exists()  # rank 0 no longer holds its GPUs
    assert not job.events.filter(reason_code="retried").exists()
    kept = {row.pod: row.text for row in AttemptLog.objects.filter(job=job, attempt=1)}
    assert set(kept) == {0, 1} and "all_reduce" in kept[0] and "boom" in kept[1]


def test_a_listed_exit_code_is_retried_after_its_back_off_then_fails_when_retries_are_used_up(lab, submit, go):
    job = start(go, submit(lab.alice, pods=2, gpus=1, max_retries=1, retry_on_exit_codes=[3]))
    before = timezone.now()
    job = fail(go, job, 1, exit_code=3)
    assert (job.state, job.attempt, job.retries, job.reason_code) == (JobState.QUEUED, 2, 1, reasons.RETRY_BACKOFF)
    assert before + timedelta(seconds=29) < job.not_before <= timezone.now() + timedelta(seconds=30)
    assert job.estimated_start == job.not_before
    event = job.events.get(reason_code="retried")
    assert event.data["cause"] == "exit_code" and event.data["exit_code"] == 3 and event.data["attempt"] == 2
    assert event.data["failed_attempt"] == 1 and event.attempt == 2
    note = Event.objects.get(kind="job.retried")
    assert note.data["attempt"] == 2 and note.data["backoff_s"] == 30
    assert not SimPod.objects.filter(job_id=job.pk, attempt=1).exists()

    go(run_cycle)  # still in its back-off: not admitted, with its own reason
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.reason_code == reasons.RETRY_BACKOFF
    end_back_off(job)
    job = start(go, job)
    assert job.attempt == 2 and SimPod.objects.filter(job_id=job.pk, attempt=2).count() == 2

    job = fail(go, job, 0, exit_code=3)
    assert job.state == JobState.FAILED and job.retries == 1 and job.exit_code == 3


@pytest.mark.parametrize(
    ("codes", "how", "retried"),
    [
        ([], {"exit_code": 137, "reason": "OOMKilled"}, False),  # out of memory: not unless asked
        ([137], {"exit_code": 137, "reason": "OOMKilled"}, True),
        ([2], {"exit_code": 1}, False),  # a bad command (not a listed code)
        ([], {"exit_code": None, "reason": "ImagePullBackOff",
              "message": "Back-off pulling image: dial tcp: i/o timeout"}, True),  # the registry's fault
        ([], {"exit_code": None, "reason": "ImagePullBackOff",
              "message": "manifest for nvcr.io/x:nope not found: manifest unknown"}, False),  # a bad image
    ],
)
def test_what_is_retried(lab, submit, go, codes, how, retried):
    job = start(go, submit(lab.alice, max_retries=2 if codes else 0, retry_on_exit_codes=codes))
    job = fail(go, job, 0, **how)
    assert (job.state == JobState.QUEUED) is retried
    assert job.events.filter(reason_code="retried").exists() is retried


def test_a_preemption_requeue_is_not_a_retry(lab, submit, go):
    job = start(go, submit(lab.alice, max_retries=1, retry_on_exit_codes=[3]))
    go(requeue, job=job, outcome="preempted", reason="preempted", message="for a realtime job")
    job.refresh_from_db()
    assert job.attempt == 2 and job.retries == 0 and job.not_before is None
    moves = [(e.from_state, e.to_state) for e in job.events.all() if e.to_state]  # the timeline's order
    assert moves[-2:] == [(JobState.RUNNING, JobState.PREEMPTED), (JobState.PREEMPTED, JobState.QUEUED)]
    assert not job.events.filter(reason_code="retried").exists()
    assert not Event.objects.filter(kind="job.retried").exists()


@pytest.mark.parametrize(("reason", "told"), [("NodeLost", True), ("NodeShutdown", True), ("Unschedulable", False)])
def test_a_pod_lost_with_its_node_is_a_new_attempt_its_owner_hears_of(lab, submit, go, reason, told):
    """Not the job's failure: a new attempt, counted in no ``max_retries``, with a ``job.retried`` notification
    (cause platform); a lost node's is an expedited requeue, with its short back-off (test_expedited_requeue.py).
    A placement kube-scheduler could not bind never ran: placed again at once, silently."""
    job = start(go, submit(lab.alice, pods=2, gpus=1))
    job = fail(go, job, 1, exit_code=None, reason=reason, message="node sim-a100-1 is gone")
    go(sync_cluster)  # the gang's other pod was evicted meanwhile: now the attempt is over
    job.refresh_from_db()
    assert (job.state, job.attempt, job.retries) == (JobState.QUEUED, 2, 0)
    assert (job.not_before is not None) is told and (job.expedited_at is not None) is told
    assert job.preemption_count == 0 and not Event.objects.filter(kind="job.preempted").exists()  # not preempted
    assert job.events.filter(to_state=JobState.QUEUED, message__contains=reason).exists()  # on the timeline
    notes = list(Event.objects.filter(kind="job.retried"))
    assert bool(notes) is told
    if told:
        assert (notes[0].data["cause"], notes[0].data["attempt"], notes[0].data["backoff_s"]) == ("platform", 2, 30)
        assert reason in notes[0].data["message"]


def test_every_pod_log_is_readable_by_its_index(lab, submit, go, client_for, client):
    job = start(go, submit(lab.alice, pods=2, gpus=1))
    SimPod.objects.filter(job_id=job.pk, index=1).update(log="I am rank 1\n")
    api = client_for(lab.alice)
    r = api.get(f"/api/v1/jobs/{job.pk}/logs?pod=1")
    assert r.status_code == 200 and b"".join(r.streaming_content).startswith(b"I am rank 1\n")
    r = api.get(f"/api/v1/jobs/{job.pk}/logs")
    assert b"I am rank 1" not in b"".join(r.streaming_content)  # pod 0 by default
    for bad, message in (("2", "pods 0 to 1"), ("-1", "pods 0 to 1"), ("x", "integer")):
        r = api.get(f"/api/v1/jobs/{job.pk}/logs?pod={bad}")
        assert r.status_code == 400 and message in r.json()["error"]["fields"]["pod"][0]["message"], r.json()
    client.force_login(lab.alice)
    page = client.get(f"/jobs/{job.pk}/logs/?pod=1").content.decode()
    assert "I am rank 1" in page and "Pod 1" in page and "?attempt=1&amp;pod=0" in page
    job = fail(go, job, 0, exit_code=1)  # the attempt ends: both pods' logs are kept
    r = api.get(f"/api/v1/jobs/{job.pk}/logs?pod=1&attempt=1")
    assert b"I am rank 1" in b"".join(r.streaming_content)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("max_retries", 11), ("max_retries", -1), ("max_retries", "2"), ("max_retries", 1.5),
        ("retry_on_exit_codes", [0]), ("retry_on_exit_codes", [256]), ("retry_on_exit_codes", ["1"]),
        ("retry_on_exit_codes", [1, 1]), ("retry_on_exit_codes", 3), ("retry_on_exit_codes", list(range(1, 40))),
        ("env", {"MASTER_ADDR": "x"}), ("env", {"WORLD_SIZE": "8"}), ("env", {"PORTAL_ATTEMPT": "9"}),
        ("env", {"RANK": "0"}),
    ],
)
def test_bad_retry_and_rendezvous_input_is_a_400_on_its_field(lab, client_for, payload, field, value):
    body = payload(**{field: value, **({"max_retries": 2} if field == "retry_on_exit_codes" else {})})
    r = client_for(lab.alice).post("/api/v1/jobs", body, format="json")
    assert r.status_code == 400, r.json()
    assert any(key.split(".")[0] == field for key in r.json()["error"]["fields"]), r.json()


def test_exit_codes_without_max_retries_are_refused(lab, client_for, payload):
    r = client_for(lab.alice).post("/api/v1/jobs", payload(retry_on_exit_codes=[3]), format="json")
    assert r.status_code == 400 and "max_retries" in r.json()["error"]["fields"]["retry_on_exit_codes"][0]["message"]


def test_the_retry_settings_are_stored_and_shown(lab, client_for, payload):
    r = client_for(lab.alice).post("/api/v1/jobs", payload(max_retries=3, retry_on_exit_codes=[143, 3]),
                                   format="json")
    assert r.status_code == 201, r.json()
    body = r.json()
    assert (body["max_retries"], body["retry_on_exit_codes"], body["retries"]) == (3, [3, 143], 0)
