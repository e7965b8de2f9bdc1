"""The tenancy and permission matrix: who may see and do what to whose job."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.django_db

# (actor, whose job) -> can see, can cancel
MATRIX = [
    ("alice", "alice", True, True),  # own job
    ("amy", "alice", True, False),  # same department, another researcher: sees, cannot cancel
    ("vadmin", "alice", True, True),  # department admin of the job's department
    ("bob", "alice", False, False),  # another department: 404 on every verb
    ("nadmin", "alice", False, False),  # admin of another department: 404 too
    ("root", "alice", True, True),  # platform admin: everything
    ("stranger", "alice", False, False),  # member of nothing
]


@pytest.mark.parametrize(("actor", "owner", "can_see", "can_cancel"), MATRIX)
def test_job_matrix(lab, submit, client_for, actor, owner, can_see, can_cancel):
    job = submit(getattr(lab, owner))
    c = client_for(getattr(lab, actor))

    detail = c.get(f"/api/v1/jobs/{job.pk}")
    assert detail.status_code == (200 if can_see else 404)
    listed = [j["id"] for j in c.get("/api/v1/jobs").json()["results"]] if actor != "stranger" else []
    assert (job.pk in listed) == can_see

    logs = c.get(f"/api/v1/jobs/{job.pk}/logs")  # a queued job has no log yet: 409 to those who may read it
    assert logs.status_code == (409 if can_cancel else (403 if can_see else 404))

    cancel = c.post(f"/api/v1/jobs/{job.pk}/cancel", {}, format="json")
    expected = 200 if can_cancel else (403 if can_see else 404)
    assert cancel.status_code == expected, cancel.content
    job.refresh_from_db()
    assert (job.state == "cancelled") == can_cancel
    if not can_see:
        assert cancel.json()["error"]["code"] == "not_found"


def test_department_comes_from_membership_not_body(lab, client_for, payload):
    r = client_for(lab.alice).post("/api/v1/jobs", payload(), format="json")
    assert r.status_code == 201
    assert r.json()["department"] == "vision"
    r = client_for(lab.alice).post("/api/v1/jobs", payload(department="nlp"), format="json")
    assert r.status_code == 400
    assert r.json()["error"]["fields"]["department"][0]["code"] == "unknown_field"


def test_stranger_cannot_submit(lab, client_for, payload):
    r = client_for(lab.stranger).post("/api/v1/jobs", payload(), format="json")
    assert r.status_code == 403
    assert r.json()["error"]["code"] == "permission_denied"


def test_quotas_and_departments_are_scoped(lab, client_for):
    mine = client_for(lab.alice).get("/api/v1/quotas").json()["results"]
    assert {q["department"] for q in mine} == {"vision"}
    assert {q["department"] for q in client_for(lab.root).get("/api/v1/quotas").json()["results"]} == {
        "vision", "nlp"}
    assert [d["slug"] for d in client_for(lab.bob).get("/api/v1/departments").json()["results"]] == ["nlp"]
    assert client_for(lab.bob).get("/api/v1/departments/vision").status_code == 404
    assert client_for(lab.stranger).get("/api/v1/flavors").json()["results"] == []


def test_dashboard_pages_are_scoped(lab, submit, client):
    job = submit(lab.alice)
    client.force_login(lab.bob)
    assert client.get(f"/jobs/{job.pk}/").status_code == 404
    assert client.post(f"/jobs/{job.pk}/cancel").status_code == 404
    assert b"train-1" not in client.get("/").content
    client.force_login(lab.amy)
    assert client.get(f"/jobs/{job.pk}/").status_code == 200


def test_cluster_node_detail_is_for_platform_admins(lab, client_for):
    assert "nodes" not in client_for(lab.alice).get("/api/v1/cluster").json()
    assert len(client_for(lab.root).get("/api/v1/cluster").json()["nodes"]) == 2
