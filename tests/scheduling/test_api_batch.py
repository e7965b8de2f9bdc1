"""Bulk submission, POST /api/v1/jobs/batch: all or nothing, per-item field errors, the single submit's rules
for every job (tenancy, approvals, idempotency, timeline, pods after commit), the per-user rate in jobs, and a
query budget per job."""

from __future__ import annotations

import pytest
from django.core.cache import cache
from django.db import connection
from django.test.utils import CaptureQueriesContext

from quotas.models import ApprovalRule
from scheduling.models import Job, JobEvent, SimPod

pytestmark = pytest.mark.django_db

URL = "/api/v1/jobs/batch"


@pytest.fixture(autouse=True)
def _fresh_throttle():
    cache.clear()  # the submit rate's history lives in the cache, shared by the whole test process
    yield
    cache.clear()


@pytest.fixture
def batch(payload):
    def make(n, **overrides):
        return {"jobs": [payload(name=f"sweep-{i}", env={"LR": f"0.{i}"}, **overrides) for i in range(n)]}

    return make


def fields_of(r) -> dict:
    assert r.status_code == 400, r.content
    body = r.json()["error"]
    assert body["code"] == "validation_error"
    return body["fields"]


def test_batch_creates_every_job_in_order_with_its_event_and_gated_pods(
    lab, client_for, batch, django_capture_on_commit_callbacks
):
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        r = client_for(lab.alice).post(URL, batch(3, gpus=2), format="json")
    assert r.status_code == 201, r.content
    jobs = r.json()["jobs"]
    assert [j["name"] for j in jobs] == ["sweep-0", "sweep-1", "sweep-2"]
    assert [j["env"] for j in jobs] == [{"LR": "0.0"}, {"LR": "0.1"}, {"LR": "0.2"}]
    assert {(j["state"], j["department"], j["owner"], j["user_tier"], j["gpus"]) for j in jobs} == {
        ("queued", "vision", "alice", "standard", 2)}
    ids = [j["id"] for j in jobs]
    assert ids == sorted(ids)
    assert len(callbacks) == 1  # one message creates every job's pods, after commit
    for job_id in ids:
        assert SimPod.objects.get(job_id=job_id).gated
        assert list(JobEvent.objects.filter(job_id=job_id).values_list("to_state", "actor__username")) == [
            ("queued", "alice")]
    # every job reads back as the list endpoint shows it
    listed = {j["id"]: j for j in client_for(lab.alice).get("/api/v1/jobs?mine=1").json()["results"]}
    assert [listed[i] for i in ids] == jobs


def test_pods_are_created_only_after_commit(lab, client_for, batch, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        r = client_for(lab.alice).post(URL, batch(2), format="json")
        assert SimPod.objects.count() == 0
    assert r.status_code == 201 and len(callbacks) == 1  # one message for the batch's pods


def test_one_bad_item_refuses_the_whole_batch_with_that_items_field_errors(lab, client_for, batch):
    body = batch(5)
    body["jobs"][3]["gpus"] = 5  # nodes have 4 GPUs
    body["jobs"][3]["image"] = "Not An Image"
    body["jobs"][1]["privileged"] = True
    r = client_for(lab.alice).post(URL, body, format="json")
    fields = fields_of(r)
    assert set(fields) == {"jobs.3.gpus", "jobs.3.image", "jobs.1.privileged"}
    assert fields["jobs.3.gpus"][0]["code"] == "exceeds_largest_node"
    assert fields["jobs.3.image"][0]["code"] == "invalid_image"
    assert fields["jobs.1.privileged"][0]["code"] == "unknown_field"
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0 and SimPod.objects.count() == 0


def test_nested_item_errors_keep_their_path(lab, client_for, batch):
    body = batch(2)
    body["jobs"][1]["command"] = ["python", ""]
    body["jobs"][0] = "not a job"
    fields = fields_of(client_for(lab.alice).post(URL, body, format="json"))
    assert fields["jobs.1.command.1"][0]["code"] == "blank"  # as "command.1" for a single job
    assert "jobs.0.non_field_errors" in fields
    assert Job.objects.count() == 0


def test_a_failure_while_writing_rolls_back_every_job(lab, client_for, batch, monkeypatch):
    def fail(*args, **kwargs):
        raise RuntimeError("the database went away")

    monkeypatch.setattr(JobEvent.objects, "bulk_create", fail)  # after the jobs' INSERT, before commit
    client = client_for(lab.alice)
    client.raise_request_exception = False
    assert client.post(URL, batch(4), format="json").status_code == 500
    assert Job.objects.count() == 0 and JobEvent.objects.count() == 0


@pytest.mark.parametrize(
    ("body", "field", "code"),
    [
        ({"jobs": []}, "jobs", "empty"),
        ({"jobs": {"name": "x"}}, "jobs", "not_a_list"),
        ({"jobs": "train.py"}, "jobs", "not_a_list"),
        ({"jobs": None}, "jobs", "null"),
        ({}, "jobs", "required"),
        ({"jobs": [], "department": "nlp"}, "department", "unknown_field"),
        ([{"name": "x"}], "non_field_errors", "invalid"),
    ],
)
def test_malformed_batches(lab, client_for, body, field, code):
    fields = fields_of(client_for(lab.alice).post(URL, body, format="json"))
    assert fields[field][0]["code"] == code, fields
    assert Job.objects.count() == 0


def test_batch_over_the_maximum_is_refused_before_any_item_is_validated(
    lab, client_for, batch, settings, django_assert_max_num_queries
):
    settings.JOBS_BATCH_MAX = 3
    with django_assert_max_num_queries(2):  # membership; no flavor read for any item
        r = client_for(lab.alice).post(URL, batch(4, flavor="no-such-flavor"), format="json")
    fields = fields_of(r)
    assert fields == {"jobs": [{"code": "too_many", "message": fields["jobs"][0]["message"]}]}
    assert "At most 3" in fields["jobs"][0]["message"]
    assert client_for(lab.alice).post(URL, batch(3), format="json").status_code == 201


def test_default_maximum_is_500(lab, client_for, batch, settings):
    assert settings.JOBS_BATCH_MAX == 500
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"submit": "10000/min"}}
    fields = fields_of(client_for(lab.alice).post(URL, batch(501), format="json"))
    assert fields["jobs"][0]["code"] == "too_many"
    assert Job.objects.count() == 0


def test_tenancy_department_comes_from_membership_and_others_see_nothing(lab, client_for, batch):
    body = batch(2)
    body["jobs"][0]["department"] = "nlp"
    fields = fields_of(client_for(lab.alice).post(URL, body, format="json"))
    assert fields["jobs.0.department"][0]["code"] == "unknown_field"
    r = client_for(lab.bob).post(URL, batch(2), format="json")
    assert r.status_code == 201
    ids = [j["id"] for j in r.json()["jobs"]]
    assert {j["department"] for j in r.json()["jobs"]} == {"nlp"}
    assert set(Job.objects.filter(pk__in=ids).values_list("department__slug", flat=True)) == {"nlp"}
    alice = client_for(lab.alice)
    assert alice.get("/api/v1/jobs").json()["count"] == 0
    assert alice.get(f"/api/v1/jobs/{ids[0]}").status_code == 404
    assert client_for(lab.nadmin).get("/api/v1/jobs").json()["count"] == 2


def test_non_members_and_anonymous_cannot_submit(lab, client_for, batch):
    r = client_for(lab.stranger).post(URL, batch(1), format="json")
    assert r.status_code == 403 and r.json()["error"]["code"] == "permission_denied"
    assert client_for(None).post(URL, batch(1), format="json").status_code in (401, 403)
    assert Job.objects.count() == 0


def test_idempotent_retry_returns_the_same_jobs_and_another_body_is_refused(lab, client_for, batch):
    c = client_for(lab.alice)
    first = c.post(URL, batch(3), format="json", HTTP_IDEMPOTENCY_KEY="sweep-42")
    again = c.post(URL, batch(3), format="json", HTTP_IDEMPOTENCY_KEY="sweep-42")
    assert (first.status_code, again.status_code) == (201, 200), again.content
    assert [j["id"] for j in again.json()["jobs"]] == [j["id"] for j in first.json()["jobs"]]
    assert again.json() == first.json()
    assert Job.objects.count() == 3 and JobEvent.objects.count() == 3
    for other in (batch(3, gpus=2), batch(2), batch(4)):  # changed item, fewer items, more items
        r = c.post(URL, other, format="json", HTTP_IDEMPOTENCY_KEY="sweep-42")
        assert r.status_code == 422 and r.json()["error"]["code"] == "idempotency_key_reused", r.content
    assert Job.objects.count() == 3
    # the batch key is the batch's own: the single endpoint and another user treat it as new
    single = c.post("/api/v1/jobs", batch(1)["jobs"][0], format="json", HTTP_IDEMPOTENCY_KEY="sweep-42")
    assert single.status_code == 201
    bob = client_for(lab.bob).post(URL, batch(3), format="json", HTTP_IDEMPOTENCY_KEY="sweep-42")
    assert bob.status_code == 201
    assert c.post(URL, batch(1), format="json", HTTP_IDEMPOTENCY_KEY="k" * 201).status_code == 400


def test_replay_shows_the_jobs_as_they_are_now(lab, client_for, batch):
    c = client_for(lab.alice)
    first = c.post(URL, batch(2), format="json", HTTP_IDEMPOTENCY_KEY="k").json()["jobs"]
    c.post(f"/api/v1/jobs/{first[1]['id']}/cancel", {}, format="json")
    again = c.post(URL, batch(2), format="json", HTTP_IDEMPOTENCY_KEY="k")
    assert again.status_code == 200
    assert [j["state"] for j in again.json()["jobs"]] == ["queued", "cancelled"]


def test_approval_rules_apply_to_each_job_of_a_batch(lab, client_for, batch, django_capture_on_commit_callbacks):
    ApprovalRule.objects.create(department=lab.vision, gpus_above=2)
    body = batch(3)
    body["jobs"][1]["gpus"] = 4
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        r = client_for(lab.alice).post(URL, body, format="json")
    assert r.status_code == 201, r.content
    jobs = r.json()["jobs"]
    assert [j["state"] for j in jobs] == ["queued", "pending_approval", "queued"]
    assert jobs[1]["reason"]["code"] == "awaiting_approval" and "4 GPUs > 2" in jobs[1]["reason"]["message"]
    # one pod message (the queued jobs'), and one notifications message (the admins hear of the waiting job)
    assert len(callbacks) == 2 and not SimPod.objects.filter(job_id=jobs[1]["id"]).exists()
    event = JobEvent.objects.get(job_id=jobs[1]["id"])
    assert event.to_state == "pending_approval" and "4 GPUs > 2" in event.message
    # the same job submitted alone lands in the same state
    single = client_for(lab.alice).post("/api/v1/jobs", body["jobs"][1], format="json")
    assert single.json()["state"] == "pending_approval"


def test_throttle_counts_every_job_of_a_batch(lab, client_for, batch, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"submit": "5/min"}}
    c = client_for(lab.alice)
    assert c.post(URL, batch(3), format="json").status_code == 201
    assert c.post("/api/v1/jobs", batch(1)["jobs"][0], format="json").status_code == 201  # 4 of 5 used
    r = c.post(URL, batch(2), format="json")  # would make 6
    assert r.status_code == 429 and r.json()["error"]["code"] == "throttled"
    assert 0 < int(r["Retry-After"]) <= 60
    assert c.post(URL, batch(1), format="json").status_code == 201  # exactly 5
    assert c.post("/api/v1/jobs", batch(1)["jobs"][0], format="json").status_code == 429
    assert client_for(lab.amy).post(URL, batch(5), format="json").status_code == 201  # per user
    assert Job.objects.count() == 10


def test_a_batch_larger_than_the_rate_is_refused_with_a_hint_to_split_it(lab, client_for, batch, settings):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"submit": "5/min"}}
    r = client_for(lab.alice).post(URL, batch(6), format="json")
    assert r.status_code == 429 and "Retry-After" not in r
    assert "at most 5" in r.json()["error"]["message"]
    assert client_for(lab.alice).post(URL, batch(5), format="json").status_code == 201  # nothing was counted


@pytest.fixture
def no_pod_tasks(monkeypatch):
    """Pod creation runs in a worker in production; keep its queries out of the request's count."""
    from scheduling import tasks

    monkeypatch.setattr(tasks.create_pods, "delay", lambda *a, **k: None)
    monkeypatch.setattr(tasks.create_pods_many, "delay", lambda *a, **k: None)


@pytest.mark.parametrize("n", [10, 100])
def test_query_budget_per_job(lab, client_for, batch, no_pod_tasks, settings, n,
                              django_capture_on_commit_callbacks):
    settings.REST_FRAMEWORK = {**settings.REST_FRAMEWORK, "DEFAULT_THROTTLE_RATES": {"submit": "10000/min"}}
    body = batch(n)
    body["jobs"][0]["tier"] = "realtime"
    with django_capture_on_commit_callbacks(execute=True), CaptureQueriesContext(connection) as q:
        r = client_for(lab.alice).post(URL, body, format="json", HTTP_IDEMPOTENCY_KEY=f"sweep-{n}")
    assert r.status_code == 201, r.content
    sql = [x["sql"] for x in q.captured_queries]
    # membership, flavor (once per distinct flavor), approval rule, allowance, one INSERT of jobs, one of
    # events, + transaction statements: constant, however many jobs. A generous bound per job all the same.
    # SQLite splits a bulk INSERT to stay under its limit of bound variables (999), so there the INSERTs grow
    # with the batch, one per few dozen jobs; PostgreSQL takes each in one statement.
    inserts = [s for s in sql if s.startswith("INSERT INTO")]
    job_inserts = sum(s.startswith('INSERT INTO "scheduling_job" ') for s in sql)
    assert len(sql) - len(inserts) <= 10, "\n".join(sql)
    assert len(sql) / n <= 1.2
    assert sum('FROM "quotas_flavor"' in s for s in sql) == 1
    if connection.vendor == "postgresql":
        assert len(sql) <= 12, "\n".join(sql)
        assert job_inserts == 1
    else:  # as many INSERTs as SQLite's 999 bound variables need for the job's columns
        from scheduling.models import Job

        per_insert = max(1, 999 // len([f for f in Job._meta.concrete_fields if not f.primary_key]))
        assert 1 <= job_inserts <= -(-n // per_insert)


def test_a_batch_publishes_one_pod_message_for_all_its_jobs(lab, client_for, batch, monkeypatch,
                                                           django_capture_on_commit_callbacks):
    from scheduling import tasks

    sent = []
    monkeypatch.setattr(tasks.create_pods_many, "delay", lambda *a: sent.append(("create_many", *a)))
    monkeypatch.setattr(tasks.create_pods, "delay", lambda *a: sent.append(("create", *a)))
    with django_capture_on_commit_callbacks(execute=True):
        r = client_for(lab.alice).post(URL, batch(5), format="json")
    assert r.status_code == 201, r.content
    ids = [j["id"] for j in r.json()["jobs"]]
    assert sent == [("create_many", [[pk, 1] for pk in ids])]


def test_openapi_schema_documents_the_batch(client):
    schema = client.get("/api/schema/?format=json").json()
    path = next(p for p in schema["paths"] if p.rstrip("/") == "/api/v1/jobs/batch")
    post = schema["paths"][path]["post"]
    assert post["requestBody"]["content"]["application/json"]["schema"]["$ref"].endswith("/JobBatchSubmitRequest")
    assert post["responses"]["201"]["content"]["application/json"]["schema"]["$ref"].endswith("/JobBatch")
    assert any(p["name"] == "Idempotency-Key" for p in post["parameters"])
    items = schema["components"]["schemas"]["JobBatchSubmitRequest"]["properties"]["jobs"]["items"]
    assert items["$ref"].endswith("/JobSubmitRequest")
