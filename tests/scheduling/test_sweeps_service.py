"""Sweeps through the portal (the simulated cluster): an array is one request of N tasks, each a job with its
index in its environment and command; its throttle holds through admission cycles; a job waits for another
job or a whole array and is ended (with a notification) when its dependency can never be met; a job is held
and released in its place; the array is cancelled in one call."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

import engine
from engine import reasons
from notifications.models import Event
from scheduling.backends import get_backend
from scheduling.models import Job, JobArray, JobDependency, JobState, SimPod
from scheduling.services.cycle import apply_result, run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.snapshot import build_snapshot
from scheduling.services.sweeps import job_hold

pytestmark = pytest.mark.django_db


def submit_array(client, payload, array="0-3", **fields):
    body = payload(name="sweep", command=["python", "train.py", "--seed", "{{index}}", "--of", "{{ count }}"],
                   env={"LR_INDEX": "lr-{{index}}", "SIM_DURATION_S": "600"}, **fields)
    return client.post("/api/v1/arrays", {**body, "array": array}, format="json")


def tasks_of(array_id):
    return list(Job.objects.filter(array_id=array_id).order_by("array_index"))


def cycle_and_sync(go):
    go(run_cycle)
    go(sync_cluster)


def test_an_array_is_one_request_of_tasks_with_their_index_in_env_and_command(lab, client_for, payload, go):
    r = submit_array(client_for(lab.alice), payload, array="0-6:2,9%2")
    assert r.status_code == 201, r.json()
    body = r.json()
    assert (body["size"], body["throttle"], body["indices"]) == (5, 2, "0-6:2,9%2")
    assert body["counts"]["queued"] == 5 and body["tasks_url"] == f"/api/v1/jobs?array={body['id']}"
    tasks = tasks_of(body["id"])
    assert [t.array_index for t in tasks] == [0, 2, 4, 6, 9]
    assert tasks[1].command == ["python", "train.py", "--seed", "2", "--of", "5"]
    assert tasks[1].env["LR_INDEX"] == "lr-2"
    go(run_cycle)
    pod = SimPod.objects.get(job_id=tasks[1].pk)
    assert {k: pod.env[k] for k in ("PORTAL_ARRAY_ID", "PORTAL_ARRAY_INDEX", "PORTAL_ARRAY_COUNT")} == {
        "PORTAL_ARRAY_ID": str(body["id"]), "PORTAL_ARRAY_INDEX": "2", "PORTAL_ARRAY_COUNT": "5"}
    listed = client_for(lab.alice).get(f"/api/v1/jobs?array={body['id']}").json()["results"]
    assert [j["array_index"] for j in listed] == [0, 2, 4, 6, 9]
    assert all(j["array"] == body["id"] for j in listed)


def test_the_throttle_keeps_at_most_k_tasks_admitted_through_cycles(lab, client_for, payload, go, sim_clock):
    array_id = submit_array(client_for(lab.alice), payload, array="0-5%2").json()["id"]
    for _ in range(4):
        cycle_and_sync(go)
        active = Job.objects.filter(array_id=array_id, state__in=(JobState.ADMITTED, JobState.RUNNING)).count()
        assert active <= 2
        waiting = Job.objects.filter(array_id=array_id, state=JobState.QUEUED)
        assert all(j.reason_code == reasons.ARRAY_THROTTLED for j in waiting)
        assert all(j.estimated_start is not None for j in waiting)  # honest: after a task of its array ends
        sim_clock.advance(700)
        go(sync_cluster)
    cycle_and_sync(go)
    sim_clock.advance(700)
    go(sync_cluster)
    assert set(Job.objects.filter(array_id=array_id).values_list("state", flat=True)) == {JobState.SUCCEEDED}


def test_a_job_waits_for_a_whole_array_then_runs(lab, client_for, payload, go, sim_clock):
    client = client_for(lab.alice)
    array_id = submit_array(client, payload, array="0-1").json()["id"]
    r = client.post("/api/v1/jobs", payload(name="eval", after=f"afterok:a{array_id}"), format="json")
    assert r.status_code == 201, r.json()
    assert r.json()["after"] == [{"condition": "afterok", "array": array_id}]
    evaluation = Job.objects.get(pk=r.json()["id"])
    cycle_and_sync(go)
    evaluation.refresh_from_db()
    assert (evaluation.state, evaluation.reason_code) == (JobState.QUEUED, reasons.WAITING_FOR_DEPENDENCY)
    assert evaluation.reason_detail["dependency"] == f"array {array_id}"
    task_end = max(t.started_at for t in tasks_of(array_id))
    assert evaluation.estimated_start is not None and evaluation.estimated_start >= task_end
    sim_clock.advance(700)
    go(sync_cluster)
    cycle_and_sync(go)
    evaluation.refresh_from_db()
    assert evaluation.state == JobState.RUNNING


def test_a_dependency_that_can_never_be_met_ends_the_job_with_a_notification(lab, client_for, payload, go, submit):
    first = submit(lab.alice, name="train")
    go(run_cycle)
    then = submit(lab.alice, name="export", after=[{"condition": "afterok", "job": first.pk}])
    on_failure = submit(lab.alice, name="alert", after=f"afternotok:{first.pk}")
    go(sync_cluster)
    assert get_backend("default").fail_pod(job_id=first.pk, attempt=1, index=0, exit_code=1) == 1
    go(sync_cluster)
    go(run_cycle)
    then.refresh_from_db()
    assert (then.state, then.reason_code) == (JobState.CANCELLED, reasons.DEPENDENCY_NEVER_SATISFIED)
    assert then.events.filter(to_state=JobState.CANCELLED, reason_code=reasons.DEPENDENCY_NEVER_SATISFIED).exists()
    note = Event.objects.get(kind="job.dependency_never_satisfied")
    assert note.data["job_id"] == then.pk and note.user_ids == [lab.alice.pk]
    on_failure.refresh_from_db()
    assert on_failure.state in (JobState.ADMITTED, JobState.RUNNING)


def test_hold_keeps_the_place_and_release_puts_it_back(lab, client_for, payload, go, submit):
    client = client_for(lab.alice)
    job = submit(lab.alice, name="held")
    submitted = job.submitted_at
    r = client.post(f"/api/v1/jobs/{job.pk}/hold")
    assert r.status_code == 200 and r.json()["held"] is True and r.json()["reason"]["code"] == reasons.HELD
    assert client.post(f"/api/v1/jobs/{job.pk}/hold").status_code == 200  # idempotent
    go(run_cycle)
    job.refresh_from_db()
    assert (job.state, job.reason_code, job.submitted_at) == (JobState.QUEUED, reasons.HELD, submitted)
    assert client_for(lab.vadmin).post(f"/api/v1/jobs/{job.pk}/release").status_code == 200
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED and job.submitted_at == submitted
    kinds = [(e.kind, e.reason_code, e.actor.username if e.actor else None) for e in job.events.exclude(kind="transition")
             if e.kind in ("hold", "release")]
    assert kinds == [("hold", "held", "alice"), ("release", "released", "vadmin")]
    r = client.post(f"/api/v1/jobs/{job.pk}/hold")
    assert r.status_code == 409  # admitted: no longer waiting


def test_hold_and_release_are_the_owners_and_admins_only(lab, client_for, submit):
    job = submit(lab.alice)
    assert client_for(lab.amy).post(f"/api/v1/jobs/{job.pk}/hold").status_code == 403
    assert client_for(lab.bob).post(f"/api/v1/jobs/{job.pk}/hold").status_code == 404
    assert client_for(lab.nadmin).post(f"/api/v1/jobs/{job.pk}/release").status_code == 404


def test_an_array_is_cancelled_in_one_call_or_only_its_waiting_tasks(lab, client_for, payload, go):
    client = client_for(lab.alice)
    array_id = submit_array(client, payload, array="0-9%3").json()["id"]
    cycle_and_sync(go)
    r = client.post(f"/api/v1/arrays/{array_id}/cancel", {"waiting_only": True}, format="json")
    assert r.status_code == 200 and r.json()["counts"]["cancelled"] == 7 and r.json()["counts"]["running"] == 3
    r = client.post(f"/api/v1/arrays/{array_id}/cancel", {}, format="json")
    assert r.json()["counts"]["cancelled"] == 10
    assert client_for(lab.amy).post(f"/api/v1/arrays/{array_id}/cancel").status_code == 403
    assert client_for(lab.bob).post(f"/api/v1/arrays/{array_id}/cancel").status_code == 404


def test_an_array_is_held_and_released_as_a_unit(lab, client_for, payload, go):
    client = client_for(lab.alice)
    array_id = submit_array(client, payload, array="0-3").json()["id"]
    assert client.post(f"/api/v1/arrays/{array_id}/hold").status_code == 200
    go(run_cycle)
    assert set(Job.objects.filter(array_id=array_id).values_list("reason_code", flat=True)) == {reasons.HELD}
    assert client.post(f"/api/v1/arrays/{array_id}/release").status_code == 200
    go(run_cycle)
    assert Job.objects.filter(array_id=array_id, state=JobState.ADMITTED).count() == 4


def test_dependencies_change_while_waiting_and_a_cycle_is_refused(lab, client_for, payload, submit):
    client = client_for(lab.alice)
    a = submit(lab.alice, name="a", gpus=4, pods=2)
    b = submit(lab.alice, name="b", after=f"afterany:{a.pk}")
    r = client.post(f"/api/v1/jobs/{a.pk}/dependencies", {"after": f"afterok:{b.pk}"}, format="json")
    assert r.status_code == 400 and r.json()["error"]["fields"]["after"][0]["code"] == "cycle"
    assert f"job {a.pk} -> job {b.pk} -> job {a.pk}" in r.json()["error"]["fields"]["after"][0]["message"]
    r = client.post(f"/api/v1/jobs/{a.pk}/dependencies", {"after": f"afterok:{a.pk}"}, format="json")
    assert r.status_code == 400 and r.json()["error"]["fields"]["after"][0]["code"] == "cycle"
    c = submit(lab.alice, name="c")
    r = client.post(f"/api/v1/jobs/{b.pk}/dependencies", {"after": [{"condition": "afterok", "job": c.pk}]},
                    format="json")
    assert r.status_code == 200 and r.json()["after"] == [{"condition": "afterok", "job": c.pk}]
    assert b.events.filter(kind="dependencies").count() == 1


def test_a_task_may_not_wait_for_its_own_array(lab, client_for, payload):
    client = client_for(lab.alice)
    array_id = submit_array(client, payload, array="0-1").json()["id"]
    task = tasks_of(array_id)[0]
    r = client.post(f"/api/v1/jobs/{task.pk}/dependencies", {"after": f"afterany:a{array_id}"}, format="json")
    assert r.status_code == 400 and r.json()["error"]["fields"]["after"][0]["code"] == "cycle"


def test_another_departments_jobs_and_arrays_are_unknown(lab, client_for, payload, submit):
    theirs = submit(lab.bob, name="theirs")
    their_array = submit_array(client_for(lab.bob), payload, array="0-1").json()["id"]
    client = client_for(lab.alice)
    for after, code in ((f"afterok:{theirs.pk}", "unknown_job"), (f"afterok:a{their_array}", "unknown_array"),
                        ("afterok:999999", "unknown_job")):
        r = client.post("/api/v1/jobs", payload(after=after), format="json")
        assert r.status_code == 400 and r.json()["error"]["fields"]["after"][0]["code"] == code, r.json()
        assert "theirs" not in str(r.json()) and "bob" not in str(r.json())
    assert client.get(f"/api/v1/arrays/{their_array}").status_code == 404
    assert client.get(f"/api/v1/jobs?array={their_array}").json()["results"] == []
    assert [a["id"] for a in client.get("/api/v1/arrays").json()["results"]] == []
    assert not JobDependency.objects.exists()


def test_a_dependency_already_impossible_is_refused_at_submission(lab, client_for, payload, submit):
    done = submit(lab.alice)
    Job.objects.filter(pk=done.pk).update(state=JobState.FAILED)
    r = client_for(lab.alice).post("/api/v1/jobs", payload(after=f"afterok:{done.pk}"), format="json")
    assert r.status_code == 400 and r.json()["error"]["fields"]["after"][0]["code"] == "never_satisfied"
    r = client_for(lab.alice).post("/api/v1/jobs", payload(after=f"afternotok:{done.pk}"), format="json")
    assert r.status_code == 201


@pytest.mark.parametrize(("field", "value", "code"), [
    ("array", "", "blank"),
    ("array", "5-2", "invalid_array"),
    ("array", "0-3:0", "invalid_array"),
    ("array", "x", "invalid_array"),
    ("array", "0-3%0", "invalid_array"),
    ("array", "0-3%x", "invalid_array"),
    ("array", "1,1", "invalid_array"),
    ("array", "0-1000", "invalid_array"),  # 1001 tasks, over ARRAY_MAX_TASKS
    ("array", "0-99999999", "invalid_array"),
    ("command", ["run", "{{idx}}"], "invalid_placeholder"),
    ("command", ["run", "{{index"], "invalid_placeholder"),
    ("env", {"X": "{{ nope }}"}, "invalid_placeholder"),
    ("after", "afterwards:1", "invalid"),
    ("after", "afterok:", "invalid"),
    ("after", "afterok:b7", "invalid"),
    ("after", [{"condition": "afterok"}], "invalid"),
    ("after", [{"condition": "afterok", "job": 1, "array": 2}], "invalid"),
    ("after", [{"condition": "maybe", "job": 1}], "invalid_condition"),
    ("after", [{"condition": "afterok", "job": True}], "invalid"),
    ("after", 7, "invalid"),
    ("after", [{"condition": "afterok", "job": 2**63}], "invalid"),
    ("after", "afterok:99999999999999999999", "invalid"),
])
def test_bad_array_input_is_a_400_on_its_field(lab, client_for, payload, field, value, code):
    body = {**payload(), "array": "0-3", field: value}
    r = client_for(lab.alice).post("/api/v1/arrays", body, format="json")
    assert r.status_code == 400, r.json()
    assert r.json()["error"]["fields"][field][0]["code"] == code, r.json()
    assert not JobArray.objects.exists() and not Job.objects.exists()


def test_the_array_bound_is_a_lab_setting(lab, client_for, payload, settings):
    settings.ARRAY_MAX_TASKS = 4
    r = client_for(lab.alice).post("/api/v1/arrays", {**payload(), "array": "0-4"}, format="json")
    assert r.status_code == 400 and "At most 4 tasks" in r.json()["error"]["fields"]["array"][0]["message"]
    assert client_for(lab.alice).post("/api/v1/arrays", {**payload(), "array": "0-3"}, format="json").status_code == 201


def test_a_plain_job_keeps_braces_as_text(lab, client_for, payload):
    r = client_for(lab.alice).post("/api/v1/jobs", payload(command=["echo", "{{index}}"]), format="json")
    assert r.status_code == 201 and r.json()["command"] == ["echo", "{{index}}"]


@pytest.mark.parametrize("value", ["x", "-1", "11839960533301361452777472"])
def test_the_jobs_list_filter_by_array_must_be_an_id(lab, client_for, value):
    r = client_for(lab.alice).get(f"/api/v1/jobs?array={value}")
    assert r.status_code == 400 and "array" in r.json()["error"]["fields"]


def test_an_array_retry_with_the_same_key_is_the_same_array(lab, client_for, payload):
    client = client_for(lab.alice)
    body = {**payload(), "array": "0-2"}
    first = client.post("/api/v1/arrays", body, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    again = client.post("/api/v1/arrays", body, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert (first.status_code, again.status_code) == (201, 200) and first.json()["id"] == again.json()["id"]
    other = client.post("/api/v1/arrays", {**body, "array": "0-3"}, format="json", HTTP_IDEMPOTENCY_KEY="k1")
    assert other.status_code == 422
    assert Job.objects.count() == 3


def _array_queries(client, payload, n):
    with CaptureQueriesContext(connection) as q:
        assert submit_array(client, payload, array=f"0-{n - 1}%4").status_code == 201
    # SQLite splits a bulk INSERT by its parameter limit (a job has ~55 columns): count the rest
    return sum(1 for x in q.captured_queries if not x["sql"].startswith("INSERT"))


def test_an_arrays_submission_and_its_reads_do_not_grow_with_its_tasks(lab, client_for, payload):
    client = client_for(lab.alice)
    _array_queries(client, payload, 2)  # the first request of a client reads what later ones have cached
    assert _array_queries(client, payload, 5) == _array_queries(client, payload, 60)
    counts = []
    for _ in range(2):
        with CaptureQueriesContext(connection) as q:
            assert client.get("/api/v1/arrays").status_code == 200
        counts.append(len(q.captured_queries))
        submit_array(client, payload, array="0-9")
    assert counts[0] == counts[1]
    ids = [a["id"] for a in client.get("/api/v1/arrays").json()["results"]]
    with CaptureQueriesContext(connection) as q:
        listed = client.get(f"/api/v1/jobs?array={ids[0]}&page_size=100").json()["results"]
    assert len(listed) == 10 and len(q.captured_queries) <= 6  # member, count, page, dependencies (+ savepoints)


def test_a_job_held_after_the_snapshot_is_not_admitted_by_that_cycle(lab, submit):
    job = submit(lab.alice)
    snapshot, ctx = build_snapshot(now=timezone.now())
    result = engine.schedule(snapshot)
    assert [a.job_id for a in result.admissions] == [job.pk]
    job_hold(user=lab.alice, job=Job.objects.get(pk=job.pk))  # between the decision and its apply
    assert apply_result(result=result, ctx=ctx).admitted == 0
    job.refresh_from_db()
    assert (job.state, job.reason_code) == (JobState.QUEUED, reasons.HELD)
