"""Jobs API: submit (idempotent), list (filters, pagination, pinned query counts), detail, cancel."""

from __future__ import annotations

import pytest

from scheduling.models import Job, JobEvent, SimPod

pytestmark = pytest.mark.django_db


def test_submit_returns_the_job_with_its_first_event_and_creates_gated_pods(
    lab, client_for, payload, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True):
        r = client_for(lab.alice).post("/api/v1/jobs", payload(gpus=2, tier="realtime"), format="json")
    assert r.status_code == 201, r.content
    body = r.json()
    assert r["Location"] == f"/api/v1/jobs/{body['id']}"
    assert (body["state"], body["department"], body["owner"], body["user_tier"]) == (
        "queued", "vision", "alice", "standard")
    assert body["reason"]["code"] == "queued"
    assert [e["to_state"] for e in body["events"]] == ["queued"]
    pod = SimPod.objects.get(job_id=body["id"])
    assert (pod.name, pod.gated, pod.namespace) == (f"job-{body['id']}-a1", True, "gpu-vision")


def test_pods_are_created_only_after_commit(lab, client_for, payload, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        r = client_for(lab.alice).post("/api/v1/jobs", payload(), format="json")
        assert SimPod.objects.count() == 0
    assert r.status_code == 201 and len(callbacks) == 1


def test_idempotent_submission(lab, client_for, payload):
    c = client_for(lab.alice)
    first = c.post("/api/v1/jobs", payload(), format="json", HTTP_IDEMPOTENCY_KEY="nb-cell-7")
    again = c.post("/api/v1/jobs", payload(), format="json", HTTP_IDEMPOTENCY_KEY="nb-cell-7")
    assert (first.status_code, again.status_code) == (201, 200)
    assert first.json()["id"] == again.json()["id"]
    assert Job.objects.count() == 1
    other = c.post("/api/v1/jobs", payload(gpus=2), format="json", HTTP_IDEMPOTENCY_KEY="nb-cell-7")
    assert other.status_code == 422
    assert other.json()["error"]["code"] == "idempotency_key_reused"
    assert Job.objects.count() == 1
    # keys are per user: another user's identical key is another job
    bob = client_for(lab.bob).post("/api/v1/jobs", payload(), format="json", HTTP_IDEMPOTENCY_KEY="nb-cell-7")
    assert bob.status_code == 201 and bob.json()["id"] != first.json()["id"]
    too_long = c.post("/api/v1/jobs", payload(), format="json", HTTP_IDEMPOTENCY_KEY="k" * 201)
    assert too_long.status_code == 400


def test_list_filters_and_pagination(lab, submit, client_for):
    for i in range(3):
        submit(lab.alice, name=f"a{i}")
    submit(lab.amy, name="amy-job", tier="backfill")
    submit(lab.bob, name="nlp-job")
    c = client_for(lab.alice)
    page = c.get("/api/v1/jobs?page_size=2").json()
    assert page["count"] == 4 and len(page["results"]) == 2 and page["next"]
    assert [j["name"] for j in c.get("/api/v1/jobs?mine=1").json()["results"]] == ["a2", "a1", "a0"]
    assert [j["name"] for j in c.get("/api/v1/jobs?tier=backfill").json()["results"]] == ["amy-job"]
    assert c.get("/api/v1/jobs?state=running").json()["count"] == 0
    assert c.get("/api/v1/jobs?q=amy").json()["count"] == 1
    assert client_for(lab.root).get("/api/v1/jobs?department=nlp").json()["count"] == 1


@pytest.mark.parametrize("n", [3, 30])
def test_list_query_count_does_not_grow_with_jobs(lab, submit, client_for, django_assert_max_num_queries, n):
    for i in range(n):
        submit(lab.alice, name=f"j{i}")
    c = client_for(lab.alice)
    with django_assert_max_num_queries(4):
        r = c.get("/api/v1/jobs?page_size=100")
    assert r.json()["count"] == n


def test_detail_query_count(lab, submit, client_for, django_assert_max_num_queries):
    job = submit(lab.alice)
    for i in range(20):
        JobEvent.objects.create(job=job, kind="note", message=f"n{i}", actor=lab.alice)
    with django_assert_max_num_queries(6):
        r = client_for(lab.alice).get(f"/api/v1/jobs/{job.pk}")
    assert len(r.json()["events"]) == 21
    assert r.json()["queue_position"] == 1


def test_cancel_is_idempotent_and_recorded(lab, submit, client_for):
    job = submit(lab.alice)
    c = client_for(lab.alice)
    first = c.post(f"/api/v1/jobs/{job.pk}/cancel", {"comment": "wrong config"}, format="json")
    second = c.post(f"/api/v1/jobs/{job.pk}/cancel", {}, format="json")
    assert first.status_code == second.status_code == 200
    assert second.json()["state"] == "cancelled"
    cancels = [e for e in second.json()["events"] if e["to_state"] == "cancelled"]
    assert len(cancels) == 1 and cancels[0]["message"] == "wrong config" and cancels[0]["actor"] == "alice"


def test_finished_jobs_cannot_be_cancelled(lab, submit, client_for):
    job = submit(lab.alice)
    Job.objects.filter(pk=job.pk).update(state="succeeded")
    r = client_for(lab.alice).post(f"/api/v1/jobs/{job.pk}/cancel", {}, format="json")
    assert r.status_code == 409 and r.json()["error"]["code"] == "invalid_state"


def test_unknown_job_and_method(lab, client_for):
    c = client_for(lab.alice)
    assert c.get("/api/v1/jobs/999999").json()["error"]["code"] == "not_found"
    r = c.delete("/api/v1/jobs/1")
    assert r.status_code in (404, 405)


def test_me(lab, client_for):
    assert client_for(lab.vadmin).get("/api/v1/me").json() == {
        "username": "vadmin", "email": "vadmin@x.test",
        "membership": {"department": "vision", "role": "department_admin", "user_tier": "pi"},
    }


def test_flavors_list_capacity(lab, client_for):
    flavors = {f["name"]: f for f in client_for(lab.alice).get("/api/v1/flavors").json()["results"]}
    assert flavors["a100-80gb"]["total_gpus"] == 8 and flavors["a100-80gb"]["nodes"] == 2


def test_openapi_schema_documents_jobs(client):
    schema = client.get("/api/schema/?format=json").json()
    assert "/api/v1/jobs" in schema["paths"] or "/api/v1/jobs/" in schema["paths"]
