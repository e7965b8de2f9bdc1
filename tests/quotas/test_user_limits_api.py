"""Per-user limits end to end: set by department admins (API), enforced by the engine (GPUs held at once) and the
submit path (jobs waiting), every bad input refused."""

from __future__ import annotations

import pytest

from portal.models import AuditEntry, Membership
from quotas.models import UserLimit
from scheduling.models import Job, JobState
from scheduling.services.cycle import run_cycle

pytestmark = pytest.mark.django_db


def _put(client, url, body):
    return client.put(url, body, format="json")


def test_a_member_s_gpu_limit_keeps_their_next_job_waiting_with_its_reason(lab, submit, go, client_for):
    admin = client_for(lab.vadmin)
    r = _put(admin, "/api/v1/user-limits/alice", {"max_gpus": 2})
    assert r.status_code == 200 and r.json() == {"department": "vision", "user": "alice", "max_gpus": 2,
                                                 "max_queued": None}
    first = go(submit, lab.alice, name="a1", gpus=2)
    second = go(submit, lab.alice, name="a2", gpus=2)
    other = go(submit, lab.amy, name="amy", gpus=2)
    go(run_cycle)
    for job in (first, second, other):
        job.refresh_from_db()
    assert first.state == JobState.ADMITTED and other.state == JobState.ADMITTED
    assert second.state == JobState.QUEUED and second.reason_code == "user_gpu_limit"
    assert second.reason_detail == {"user": "alice", "limit": 2, "held": 2, "requested": 2}
    assert "alice holds 2 of 2 GPUs" in second.reason_message
    assert second.estimated_start is not None  # once her first job's max runtime is over
    assert second.events.filter(kind="reason", reason_code="user_gpu_limit").count() == 1
    # Raising the limit lets it in at the next cycle.
    _put(admin, "/api/v1/user-limits/alice", {"max_gpus": 4})
    go(run_cycle)
    second.refresh_from_db()
    assert second.state == JobState.ADMITTED


def test_the_department_s_limit_applies_to_every_member_without_their_own(lab, submit, go, client_for):
    admin = client_for(lab.vadmin)
    assert _put(admin, "/api/v1/departments/vision/user-limit", {"max_gpus": 1}).status_code == 200
    assert _put(admin, "/api/v1/user-limits/alice", {"max_gpus": 3}).status_code == 200
    alice = go(submit, lab.alice, name="a", gpus=3)
    amy = go(submit, lab.amy, name="amy", gpus=2)
    go(run_cycle)
    alice.refresh_from_db()
    amy.refresh_from_db()
    assert alice.state == JobState.ADMITTED
    assert amy.reason_code == "user_gpu_limit" and amy.reason_detail.get("never") is True
    assert amy.estimated_start is None
    rows = admin.get("/api/v1/user-limits").json()
    assert rows == [{"department": "vision", "user": None, "max_gpus": 1, "max_queued": None},
                    {"department": "vision", "user": "alice", "max_gpus": 3, "max_queued": None}]
    assert admin.delete("/api/v1/user-limits/alice").status_code == 204
    assert admin.delete("/api/v1/departments/vision/user-limit").status_code == 204
    assert admin.get("/api/v1/user-limits").json() == []
    actions = list(AuditEntry.objects.filter(action__startswith="user_limit.").values_list("action", flat=True))
    assert actions.count("user_limit.set") == 2 and actions.count("user_limit.delete") == 2


@pytest.mark.parametrize(("body", "field"), [
    ({"max_gpus": -1}, "max_gpus"),
    ({"max_gpus": 0}, "max_gpus"),
    ({"max_gpus": 9}, "max_gpus"),  # over vision's quota: nominal 4 + borrowing 4
    ({"max_gpus": "many"}, "max_gpus"),
    ({}, "max_gpus"),
    ({"max_gpus": 2, "max_queued": 0}, "max_queued"),
    ({"max_gpus": 2, "max_queued": -3}, "max_queued"),
    ({"max_gpus": 2, "max_jobs": 3}, "max_jobs"),  # an unknown field
])
@pytest.mark.parametrize("url", ["/api/v1/user-limits/alice", "/api/v1/departments/vision/user-limit"])
def test_bad_limits_are_a_400_with_the_field(lab, client_for, body, field, url):
    r = _put(client_for(lab.vadmin), url, body)
    assert r.status_code == 400, r.content
    assert field in r.json()["error"]["fields"]
    assert not UserLimit.objects.exists()


def test_over_the_quota_says_how_much_the_department_can_hold(lab, client_for):
    r = _put(client_for(lab.vadmin), "/api/v1/user-limits/alice", {"max_gpus": 9})
    assert "At most 8 GPUs" in r.json()["error"]["fields"]["max_gpus"][0]["message"]
    assert _put(client_for(lab.vadmin), "/api/v1/user-limits/alice", {"max_gpus": 8}).status_code == 200


def test_who_may_set_limits_and_whom(lab, client_for):
    body = {"max_gpus": 2}
    # unknown member, another department's member and department: 404, as if they did not exist
    assert _put(client_for(lab.vadmin), "/api/v1/user-limits/nobody", body).status_code == 404
    assert _put(client_for(lab.vadmin), "/api/v1/user-limits/bob", body).status_code == 404
    assert _put(client_for(lab.nadmin), "/api/v1/user-limits/alice", body).status_code == 404
    assert _put(client_for(lab.nadmin), "/api/v1/departments/vision/user-limit", body).status_code == 404
    assert client_for(lab.nadmin).delete("/api/v1/user-limits/alice").status_code == 404
    assert _put(client_for(lab.vadmin), "/api/v1/user-limits/stranger", body).status_code == 404
    # a researcher of the department: 403
    assert _put(client_for(lab.alice), "/api/v1/user-limits/amy", body).status_code == 403
    assert _put(client_for(lab.alice), "/api/v1/departments/vision/user-limit", body).status_code == 403
    assert client_for(lab.alice).get("/api/v1/user-limits").status_code == 403
    assert not UserLimit.objects.exists()
    # a platform admin sets any department's
    assert _put(client_for(lab.root), "/api/v1/user-limits/bob", body).status_code == 200
    assert [r["user"] for r in client_for(lab.nadmin).get("/api/v1/user-limits").json()] == ["bob"]
    assert client_for(lab.vadmin).get("/api/v1/user-limits").json() == []


def test_the_waiting_jobs_limit_refuses_a_submission_with_429(lab, client_for, payload):
    _put(client_for(lab.vadmin), "/api/v1/user-limits/alice", {"max_gpus": 4, "max_queued": 2})
    c = client_for(lab.alice)
    assert c.post("/api/v1/jobs", payload(name="j1"), format="json").status_code == 201
    accepted = c.post("/api/v1/jobs", payload(name="j2"), format="json", HTTP_IDEMPOTENCY_KEY="k2")
    assert accepted.status_code == 201
    r = c.post("/api/v1/jobs", payload(name="j3"), format="json")
    assert r.status_code == 429 and "Retry-After" not in r
    error = r.json()["error"]
    assert error["code"] == "limit_reached" and error["detail"] == {"limit": 2, "waiting": 2, "submitting": 1}
    assert "2 job(s) waiting" in error["message"]
    # a retry of an accepted submission is still its replay
    again = c.post("/api/v1/jobs", payload(name="j2"), format="json", HTTP_IDEMPOTENCY_KEY="k2")
    assert again.status_code == 200 and again.json()["id"] == accepted.json()["id"]
    # a batch is refused whole; a colleague is not limited by alice's row
    batch = c.post("/api/v1/jobs/batch", {"jobs": [payload(name="b1")]}, format="json")
    assert batch.status_code == 429
    assert client_for(lab.amy).post("/api/v1/jobs", payload(name="amy"), format="json").status_code == 201
    # once one of hers stops waiting, she may queue one more
    Job.objects.filter(owner=lab.alice, name="j1").update(state=JobState.CANCELLED)
    assert c.post("/api/v1/jobs", payload(name="j4"), format="json").status_code == 201
    assert Job.objects.filter(owner=lab.alice, state=JobState.QUEUED).count() == 2


def test_a_member_who_leaves_takes_their_own_limit_along(lab, client_for):
    _put(client_for(lab.vadmin), "/api/v1/user-limits/alice", {"max_gpus": 2})
    assert client_for(lab.vadmin).delete("/api/v1/departments/vision/members/alice").status_code in (200, 204)
    assert not Membership.objects.filter(user=lab.alice).exists()
    assert not UserLimit.objects.exists()


def test_the_list_reads_in_constant_queries(lab, client_for, django_assert_max_num_queries):
    for user in (lab.alice, lab.amy, lab.vadmin):
        UserLimit.objects.create(department=lab.vision, user=user, max_gpus=2)
    UserLimit.objects.create(department=lab.vision, max_gpus=1)
    with django_assert_max_num_queries(2):  # membership, rows
        assert len(client_for(lab.vadmin).get("/api/v1/user-limits").json()) == 4


def test_the_submit_form_says_why_it_refuses(lab, submit, client):
    UserLimit.objects.create(department=lab.vision, user=lab.alice, max_gpus=4, max_queued=1)
    submit(lab.alice, name="first")
    client.force_login(lab.alice)
    r = client.post("/jobs/new", {"name": "second", "image": "pytorch/pytorch:2.3", "command": "python train.py",
                                  "flavor": "a100-80gb", "gpus": "1", "pods": "1", "tier": "elastic",
                                  "urgency": "normal", "task_type": "train", "max_runtime_s": "1800",
                                  "idempotency_key": "form-2"})
    assert r.status_code != 302
    assert "You have 1 job(s) waiting to start; vision allows 1 per member at once" in r.content.decode()
    assert not Job.objects.filter(name="second").exists()


def test_the_quote_says_the_limit_would_keep_the_job_waiting(lab, submit, go, client_for, payload):
    UserLimit.objects.create(department=lab.vision, user=lab.alice, max_gpus=2)
    go(submit, lab.alice, name="running", gpus=2)
    go(run_cycle)
    start = client_for(lab.alice).post("/api/v1/jobs/quote", payload(gpus=1), format="json").json()["start"]
    assert start["starts_now"] is False and start["code"] == "user_gpu_limit"
    assert client_for(lab.amy).post("/api/v1/jobs/quote", payload(gpus=1), format="json").json()["start"][
        "starts_now"] is True
