"""Failure policy per role on the simulated cluster (docs/workloads.md, "Shapes"): a failed pod of a
``restart-pod`` role is replaced alone, counted on the timeline, with a cap and a back-off, while the attempt
goes on; and a job of roles ends when its roles that are not restart-pod have succeeded, its data workers
removed then."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from lab import demo
from lab.services.labfile import apply_lab
from scheduling.backends import get_backend
from scheduling.models import Job, JobState, SimPod
from scheduling.services.pod_states import POD_RESTARTED
from tests.scheduling.two_roles import TRAIN, step

pytestmark = pytest.mark.django_db

@pytest.fixture
def running(go, sim_clock):
    apply_lab(demo.LAB_FILE.read_text())
    demo.add_cpu_pool()
    bob = APIClient()
    bob.force_authenticate(get_user_model().objects.get(username="bob"))
    r = bob.post("/api/v1/jobs", TRAIN, format="json")
    assert r.status_code == 201, r.json()
    step(go, sim_clock)
    job = Job.objects.get(pk=r.json()["id"])
    assert job.state == JobState.RUNNING, job.reason_message
    return job


def _fail(job, index):
    assert get_backend("default").fail_pod(job_id=job.pk, attempt=job.attempt, index=index, exit_code=137,
                                           reason="Error") == 1


def restarts(job):
    return list(job.events.filter(reason_code=POD_RESTARTED).order_by("at").values_list("data", flat=True))


def test_a_failed_data_worker_is_replaced_alone_and_the_attempt_goes_on(running, go, sim_clock):
    job = running
    node = SimPod.objects.get(job_id=job.pk, index=2).node
    _fail(job, 2)
    step(go, sim_clock, 1)
    job.refresh_from_db()
    assert (job.state, job.attempt) == (JobState.RUNNING, 1)
    (event,) = restarts(job)
    assert (event["role"], event["index"], event["restarts"], event["exit_code"]) == ("data", 2, 1, 137)
    pod = SimPod.objects.get(job_id=job.pk, index=2)
    assert (pod.phase, pod.node, pod.attempt) == ("Running", node, 1)  # made again, same name and node
    assert SimPod.objects.get(job_id=job.pk, index=0).phase == "Running"  # the trainer never stopped


def test_a_worker_failing_again_waits_out_its_back_off(running, go, sim_clock, settings):
    settings.POD_RESTART_BACKOFF_S = 3600
    job = running
    _fail(job, 2)
    step(go, sim_clock, 1)
    _fail(job, 2)
    step(go, sim_clock, 1)
    assert len(restarts(job)) == 1  # the second failure waits an hour of the portal's time
    assert SimPod.objects.get(job_id=job.pk, index=2).phase == "Failed"
    settings.POD_RESTART_BACKOFF_S = 0  # (as if the hour had passed)
    step(go, sim_clock, 1)
    assert [e["restarts"] for e in restarts(job)] == [1, 2]
    assert SimPod.objects.get(job_id=job.pk, index=2).phase == "Running"


def test_past_the_restart_limit_a_failure_ends_the_attempt(running, go, sim_clock, settings):
    settings.POD_RESTART_LIMIT = 1
    job = running
    _fail(job, 1)
    step(go, sim_clock, 1)
    _fail(job, 2)
    step(go, sim_clock, 1)
    job.refresh_from_db()
    assert (job.state, job.attempt) == (JobState.FAILED, 1)
    assert f"job-{job.pk}-a1-2 failed" in job.reason_message
    assert len(restarts(job)) == 1


def test_a_trainer_failing_still_ends_the_attempt(running, go, sim_clock):
    job = running
    _fail(job, 0)
    step(go, sim_clock, 1)
    job.refresh_from_db()
    assert (job.state, job.attempt) == (JobState.FAILED, 1)
    assert f"job-{job.pk}-a1-0 failed" in job.reason_message
    assert restarts(job) == []


def test_the_job_succeeds_when_its_trainers_do_and_its_data_workers_are_removed(running, go, sim_clock):
    job = running
    SimPod.objects.filter(job_id=job.pk, index__in=(1, 2)).update(runtime_s=10**6)  # the workers never end
    step(go, sim_clock, 601)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED, job.reason_message
    assert "restart-pod" in job.reason_message
    assert not SimPod.objects.filter(job_id=job.pk, index__in=(1, 2)).exists()


def _bob():
    c = APIClient()
    c.force_authenticate(get_user_model().objects.get(username="bob"))
    return c


def test_logs_take_a_role_and_the_pods_rank_in_it(running):
    job = running
    r = _bob().get(f"/api/v1/jobs/{job.pk}/logs?role=data&pod=1")
    assert r.status_code == 200
    assert b"$ python loader.py" in b"".join(r.streaming_content)
    r = _bob().get(f"/api/v1/jobs/{job.pk}/logs?role=trainer")
    assert b"$ python train.py" in b"".join(r.streaming_content)
    r = _bob().get(f"/api/v1/jobs/{job.pk}/logs?pod=2")  # without a role: every pod of the job, in order
    assert r.status_code == 200 and b"$ python loader.py" in b"".join(r.streaming_content)


def test_logs_of_an_unknown_role_are_a_400_naming_the_roles(running):
    r = _bob().get(f"/api/v1/jobs/{running.pk}/logs?role=eval")
    assert r.status_code == 400
    assert "trainer, data" in str(r.json()["error"]["fields"]["role"])


def test_logs_of_a_rank_past_the_roles_pods_are_a_400(running):
    r = _bob().get(f"/api/v1/jobs/{running.pk}/logs?role=data&pod=2")
    assert r.status_code == 400
    assert "Role data has pods 0 to 1" in str(r.json()["error"]["fields"]["pod"])


def test_the_job_page_groups_the_pods_by_role_with_their_replacements(running, go, sim_clock, client):
    job = running
    _fail(job, 2)
    step(go, sim_clock, 1)
    client.force_login(get_user_model().objects.get(username="bob"))
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    trainer = html[html.index('data-role="trainer"'):html.index('data-role="data"')]
    data = html[html.index('data-role="data"'):]
    assert f"job-{job.pk}-a1-0" in trainer and f"job-{job.pk}-a1-1" not in trainer
    assert "4 GPU(s)" in trainer and "replaced alone" in data
    row = data[data.index('data-pod="2"'):]
    row = row[:row.index("</tr>")]
    assert "<td>1</td>" in row and "<td>1</td><td><code>" in row  # rank 1 of data, replaced once
    assert "pod=2" in row  # its log on the logs page, whose pod selector reaches the data workers too
    logs = client.get(f"/jobs/{job.pk}/logs/?pod=2").content.decode()
    assert "python loader.py" in logs


def test_the_clone_spec_grows_the_data_workers_of_a_job_that_has_them(running):
    spec = _bob().get(f"/api/v1/jobs/{running.pk}/spec?add_data_workers=3").json()
    assert [(r["name"], r["pods"]) for r in spec["roles"]] == [("trainer", 1), ("data", 5)]


@pytest.mark.parametrize("count", ["abc", "0", "65"])
def test_a_bad_number_of_data_workers_is_a_400(running, count):
    r = _bob().get(f"/api/v1/jobs/{running.pk}/spec?add_data_workers={count}")
    assert r.status_code == 400 and "add_data_workers" in r.json()["error"]["fields"]


def test_a_job_without_gpus_gets_no_data_workers():
    from portal.errors import ValidationFailed
    from scheduling.services.templates import with_data_workers

    with pytest.raises(ValidationFailed) as caught:
        with_data_workers({"name": "tokenise", "flavor": "cpu", "gpus": 0, "pods": 2, "cpu": "8"}, 2)
    assert caught.value.fields["add_data_workers"][0]["code"] == "no_gpus"
