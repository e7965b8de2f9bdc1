"""Job templates API: create, list, use with overrides, clone a job, and every bad input."""

from __future__ import annotations

import pytest

from portal.models import AuditEntry
from scheduling.api.serializers import JobSubmitSerializer
from scheduling.models import Job, JobTemplate
from scheduling.services.templates import SPEC_FIELDS
from tests.conftest import job_payload

pytestmark = pytest.mark.django_db


def _create(client, name="resnet", scope=None, **spec):
    body = {"name": name, "spec": job_payload(**spec)}
    if scope:
        body["scope"] = scope
    return client.post("/api/v1/templates", body, format="json")


def test_create_list_and_submit_from_a_personal_template_with_overrides(lab, client_for):
    c = client_for(lab.alice)
    r = _create(c, gpus=2, env={"EPOCHS": "10"}, tier="backfill")
    assert r.status_code == 201, r.content
    t = r.json()
    assert (t["scope"], t["owner"], t["department"], t["can_change"]) == ("personal", "alice", "vision", True)
    assert [x["name"] for x in c.get("/api/v1/templates").json()] == ["resnet"]
    job = c.post("/api/v1/jobs", {"template": "resnet", "name": "run-2", "env": {"EPOCHS": "20"}}, format="json")
    assert job.status_code == 201, job.content
    body = job.json()
    assert (body["name"], body["gpus"], body["tier"], body["env"]) == ("run-2", 2, "backfill", {"EPOCHS": "20"})
    by_id = c.post("/api/v1/jobs", {"template_id": t["id"], "gpus": 1}, format="json")
    assert by_id.status_code == 201 and (by_id.json()["name"], by_id.json()["gpus"]) == ("train-1", 1)
    assert AuditEntry.objects.filter(action="template.create", object_id=str(t["id"])).count() == 1


def test_a_quote_from_a_template_prices_the_merged_job(lab, client_for):
    c = client_for(lab.alice)
    _create(c, gpus=1, max_runtime_s=3600)
    one = c.post("/api/v1/jobs/quote", {"template": "resnet"}, format="json")
    two = c.post("/api/v1/jobs/quote", {"template": "resnet", "gpus": 2}, format="json")
    assert (one.status_code, two.status_code) == (200, 200), two.content
    assert two.json()["gpu_hours"] == 2 * one.json()["gpu_hours"]
    assert c.post("/api/v1/jobs/quote", {"template": "nope"}, format="json").status_code == 400
    assert Job.objects.count() == 0


def test_personal_template_wins_over_the_department_one_of_the_same_name(lab, client_for):
    assert _create(client_for(lab.vadmin), scope="department", gpus=3).status_code == 201
    assert _create(client_for(lab.alice), gpus=2).status_code == 201
    mine = client_for(lab.alice).post("/api/v1/jobs", {"template": "resnet"}, format="json").json()
    theirs = client_for(lab.amy).post("/api/v1/jobs", {"template": "resnet"}, format="json").json()
    assert (mine["gpus"], theirs["gpus"]) == (2, 3)


def test_scope_filter_and_visibility(lab, client_for):
    _create(client_for(lab.vadmin), name="shared", scope="department")
    _create(client_for(lab.alice), name="mine")
    _create(client_for(lab.amy), name="amys")
    _create(client_for(lab.nadmin), name="nlp-shared", scope="department")
    c = client_for(lab.alice)
    assert sorted(t["name"] for t in c.get("/api/v1/templates").json()) == ["mine", "shared"]
    assert [t["name"] for t in c.get("/api/v1/templates?scope=department").json()] == ["shared"]
    assert [t["name"] for t in c.get("/api/v1/templates?scope=personal").json()] == ["mine"]
    bad = c.get("/api/v1/templates?scope=everyone")
    assert bad.status_code == 400 and "scope" in bad.json()["error"]["fields"]
    # a platform admin sees every department's templates, but nobody's personal ones
    assert sorted(t["name"] for t in client_for(lab.root).get("/api/v1/templates").json()) == [
        "nlp-shared", "shared"]


@pytest.mark.parametrize("spec_change, field, code", [
    ({"gpu": 8}, "spec.gpu", "unknown_field"),
    ({"gpus": -1}, "spec.gpus", "min_value"),  # (0 is a CPU-only job, refused on a GPU flavor as needs_cpu_pool)
    ({"gpus": "2"}, "spec.gpus", "invalid"),
    ({"image": "UPPER/Case"}, "spec.image", "invalid_image"),
    ({"flavor": "h100"}, "spec.flavor", "does_not_exist"),
    ({"env": {"CUDA_VISIBLE_DEVICES": "0"}}, "spec.env", "invalid_env"),
])
def test_a_template_that_would_not_submit_is_refused_with_the_submission_errors(
        lab, client_for, spec_change, field, code):
    r = _create(client_for(lab.alice), **spec_change)
    assert r.status_code == 400, r.content
    assert [e["code"] for e in r.json()["error"]["fields"][field]] == [code]
    # the very same error a submission of that body gets
    sub = client_for(lab.alice).post("/api/v1/jobs", job_payload(**spec_change), format="json")
    assert sub.json()["error"]["fields"][field.removeprefix("spec.")] == r.json()["error"]["fields"][field]
    assert JobTemplate.objects.count() == 0


@pytest.mark.parametrize("body, field", [
    ({"name": "has space", "spec": job_payload()}, "name"),
    ({"name": "", "spec": job_payload()}, "name"),
    ({"name": "ok", "spec": ["not", "an", "object"]}, "spec"),
    ({"name": "ok"}, "spec"),
    ({"name": "ok", "spec": job_payload(), "scope": "world"}, "scope"),
    ({"name": "ok", "spec": job_payload(), "owner": "bob"}, "owner"),
    ({"name": "ok", "spec": {"image": "busybox"}}, "spec.command"),
])
def test_bad_template_bodies(lab, client_for, body, field):
    r = client_for(lab.alice).post("/api/v1/templates", body, format="json")
    assert r.status_code == 400, r.content
    assert field in r.json()["error"]["fields"]


def test_duplicate_names_are_refused_per_scope_and_owner(lab, client_for):
    assert _create(client_for(lab.alice)).status_code == 201
    again = _create(client_for(lab.alice), gpus=2)
    assert again.status_code == 400
    assert again.json()["error"]["fields"]["name"][0]["code"] == "unique"
    assert _create(client_for(lab.amy)).status_code == 201  # another owner
    assert _create(client_for(lab.vadmin), scope="department").status_code == 201  # another scope
    assert _create(client_for(lab.vadmin), scope="department").status_code == 400
    renamed = client_for(lab.amy).patch(f"/api/v1/templates/{JobTemplate.objects.get(owner=lab.amy).pk}",
                                        {"name": "other"}, format="json")
    assert renamed.status_code == 200
    back = client_for(lab.amy).patch(f"/api/v1/templates/{renamed.json()['id']}", {"name": "resnet"}, format="json")
    assert back.status_code == 200  # its own old name is free again


def test_unknown_template_and_another_departments_template_are_the_same_400(lab, client_for):
    nlp = _create(client_for(lab.nadmin), name="nlp-only", scope="department").json()
    c = client_for(lab.alice)
    for body, field in [({"template": "nope"}, "template"), ({"template": "nlp-only"}, "template"),
                        ({"template_id": nlp["id"]}, "template_id"), ({"template_id": "1"}, "template_id"),
                        ({"template": 5}, "template"), ({"template": "x", "template_id": 1}, "template_id")]:
        r = c.post("/api/v1/jobs", body, format="json")
        assert r.status_code == 400, (body, r.content)
        assert field in r.json()["error"]["fields"], body
    assert Job.objects.count() == 0


def test_overrides_are_validated_as_any_submission(lab, client_for):
    c = client_for(lab.alice)
    _create(c)
    for body, field in [({"gpus": 99}, "gpus"), ({"gpu": 2}, "gpu"), ({"tier": "urgent"}, "tier")]:
        r = c.post("/api/v1/jobs", {"template": "resnet", **body}, format="json")
        assert r.status_code == 400 and field in r.json()["error"]["fields"], body


def test_another_departments_template_is_a_404_and_a_researcher_cannot_change_a_department_one(lab, client_for):
    shared = _create(client_for(lab.vadmin), name="shared", scope="department").json()
    personal = _create(client_for(lab.alice), name="mine").json()
    bob = client_for(lab.bob)
    for t in (shared, personal):
        assert bob.get(f"/api/v1/templates/{t['id']}").status_code == 404
        assert bob.patch(f"/api/v1/templates/{t['id']}", {"description": "x"}, format="json").status_code == 404
        assert bob.delete(f"/api/v1/templates/{t['id']}").status_code == 404
    # amy reads her department's template but may not change it; alice's personal one is not hers to see
    amy = client_for(lab.amy)
    assert amy.get(f"/api/v1/templates/{shared['id']}").json()["can_change"] is False
    assert amy.patch(f"/api/v1/templates/{shared['id']}", {"description": "x"}, format="json").status_code == 403
    assert amy.delete(f"/api/v1/templates/{shared['id']}").status_code == 403
    assert amy.get(f"/api/v1/templates/{personal['id']}").status_code == 404
    # nor may a researcher publish one
    refused = _create(amy, name="amy-shared", scope="department")
    assert refused.status_code == 403
    assert JobTemplate.objects.get(pk=shared["id"]).description == ""


def test_admin_edits_and_deletes_a_department_template_audited(lab, client_for):
    shared = _create(client_for(lab.vadmin), name="shared", scope="department").json()
    c = client_for(lab.vadmin)
    r = c.patch(f"/api/v1/templates/{shared['id']}", {"description": "ResNet-50 on one A100",
                                                        "spec": job_payload(gpus=4)}, format="json")
    assert r.status_code == 200 and r.json()["spec"]["gpus"] == 4
    bad = c.patch(f"/api/v1/templates/{shared['id']}", {"spec": job_payload(gpus=-1)}, format="json")
    assert bad.status_code == 400 and "spec.gpus" in bad.json()["error"]["fields"]
    put = c.put(f"/api/v1/templates/{shared['id']}", {"description": "no name"}, format="json")
    assert put.status_code == 400 and {"name", "spec"} <= set(put.json()["error"]["fields"])
    assert c.delete(f"/api/v1/templates/{shared['id']}").status_code == 204
    actions = list(AuditEntry.objects.filter(object_type="scheduling.jobtemplate").order_by("id").values_list("action", flat=True))
    assert actions == ["template.create", "template.update", "template.delete"]
    assert AuditEntry.objects.get(action="template.update").old["spec"]["gpus"] == 1


def test_clone_spec_resubmits_the_same_job(lab, client_for, submit):
    job = submit(lab.alice, gpus=2, pods=2, env={"A": "1"}, cpu="500m", memory="1Gi", bid=250, tier="backfill",
                 cluster_preference={"zone": "a"}, checkpoint_interval_s=600, pdb_min_available=1)
    c = client_for(lab.amy)  # any member of the department reads a job, so may clone it
    spec = c.get(f"/api/v1/jobs/{job.pk}/spec").json()
    assert set(spec) <= set(SPEC_FIELDS) and spec["cpu"] == "500m" and spec["memory"] == "1024Mi"
    again = c.post("/api/v1/jobs", spec, format="json")
    assert again.status_code == 201, again.content
    clone = Job.objects.get(pk=again.json()["id"])
    same = ("name", "image", "command", "env", "flavor_id", "gpus_per_pod", "pods", "cpu_millicores", "memory_mib", "tier",
            "urgency", "task_type", "max_runtime_s", "bid", "termination_grace_s", "checkpoint_interval_s",
            "pdb_min_available", "cluster_selector", "cluster_preference")
    assert {f: getattr(clone, f) for f in same} == {f: getattr(job, f) for f in same}
    assert clone.owner == lab.amy
    assert client_for(lab.bob).get(f"/api/v1/jobs/{job.pk}/spec").status_code == 404
    # and the spec saves as a template as it is
    assert client_for(lab.amy).post("/api/v1/templates", {"name": "cloned", "spec": spec},
                                    format="json").status_code == 201


def test_the_spec_fields_are_the_submission_fields():
    """A field added to submissions must be copied by clones, and a clone must carry nothing else. Except what
    the job waits for: dependencies name the jobs of one run, and a clone (or a template) is another run."""
    assert set(SPEC_FIELDS) == set(JobSubmitSerializer().fields) - {"after"}


@pytest.mark.parametrize("n", [2, 20])
def test_list_query_count_does_not_grow_with_templates(lab, client_for, django_assert_max_num_queries, n):
    from scheduling.services.templates import template_create

    for i in range(n):
        template_create(user=lab.alice, name=f"t{i}", spec=job_payload())
        template_create(user=lab.vadmin, name=f"d{i}", spec=job_payload(), scope="department")
    c = client_for(lab.alice)
    with django_assert_max_num_queries(3):
        r = c.get("/api/v1/templates")
    assert len(r.json()) == 2 * n
