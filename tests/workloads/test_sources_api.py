"""Declaring data sources through the API: who may declare and delete which, every bad body a 400 with its field,
a duplicate a 409, and a source holding checkpoint directories kept until they expire."""

from __future__ import annotations

import pytest

from portal.models import AuditEntry
from workloads.models import CheckpointDir, DataSource

pytestmark = pytest.mark.django_db

URL = "/api/v1/data-sources"


def body(**fields):
    return {"name": "scratch", "cluster": "default", "department": "vision", "claim_name": "scratch",
            "writable": True, **fields}


def test_a_department_admin_declares_their_departments_source_audited(lab, client_for):
    r = client_for(lab.vadmin).post(URL, body(), format="json")
    assert r.status_code == 201, r.json()
    assert (r.json()["department"], r.json()["writable"], r.json()["cluster"]) == ("vision", True, "default")
    entry = AuditEntry.objects.get(action="data_source.create")
    assert entry.new["claim_name"] == "scratch" and entry.department_id == lab.vision.pk


def test_a_platform_admin_shares_a_dataset_with_some_departments(lab, client_for):
    r = client_for(lab.root).post(URL, body(name="imagenet", kind="dataset", department=None, writable=False,
                                            shared_with=["vision", "nlp"]), format="json")
    assert r.status_code == 201, r.json()
    assert sorted(r.json()["shared_with"]) == ["nlp", "vision"]
    assert [s["name"] for s in client_for(lab.bob).get(URL).json()["results"]] == ["imagenet"]


@pytest.mark.parametrize(("who", "fields"), [
    ("alice", {}),  # a researcher
    ("nadmin", {}),  # another department's admin
    ("vadmin", {"department": None}),  # a platform-owned source
])
def test_only_the_platform_or_the_departments_admin_declares(lab, client_for, who, fields):
    r = client_for(getattr(lab, who)).post(URL, body(**fields), format="json")
    assert r.status_code == 403, r.json()
    assert not DataSource.objects.exists()


@pytest.mark.parametrize(("fields", "field"), [
    ({"kind": "dataset", "department": None}, "writable"),  # a shared dataset is read-only
    ({"claim_name": "Bad_Claim"}, "claim_name"),
    ({"claim_name": ""}, "claim_name"),
    ({"sub_path": "../other"}, "sub_path"),
    ({"sub_path": "/abs"}, "sub_path"),
    ({"name": "not a slug"}, "name"),
    ({"kind": "hostpath"}, "kind"),
    ({"cluster": "nowhere"}, "cluster"),
    ({"department": "biology"}, "department"),
    ({"shared_with": ["nlp", "biology"]}, "shared_with"),
    ({"writable": "sometimes"}, "writable"),
    ({"nfs_server": "nfs.lab"}, "nfs_server"),  # an unknown field
])
def test_bad_declarations_are_400_on_their_field(lab, client_for, fields, field):
    r = client_for(lab.root).post(URL, body(**fields), format="json")
    assert r.status_code == 400, r.json()
    assert field in r.json()["error"]["fields"], r.json()
    assert not DataSource.objects.exists()


def test_a_second_source_of_the_same_name_on_the_cluster_is_a_conflict(lab, client_for):
    assert client_for(lab.vadmin).post(URL, body(), format="json").status_code == 201
    r = client_for(lab.root).post(URL, body(claim_name="other"), format="json")
    assert r.status_code == 409 and DataSource.objects.get().claim_name == "scratch"


def test_delete_through_the_tenancy_gate_and_not_while_it_holds_checkpoints(lab, client_for, submit):
    own = DataSource.objects.create(name="scratch", cluster=lab.cluster, department=lab.vision,
                                    claim_name="scratch", writable=True)
    nlp = DataSource.objects.create(name="nlp-scratch", cluster=lab.cluster, department=lab.nlp, claim_name="n")
    assert client_for(lab.vadmin).delete(f"{URL}/{nlp.pk}").status_code == 404  # another department's
    assert client_for(lab.alice).delete(f"{URL}/{own.pk}").status_code == 403  # seen, not theirs to delete
    job = submit(lab.alice, checkpoint={"source": "scratch"})
    r = client_for(lab.vadmin).delete(f"{URL}/{own.pk}")
    assert r.status_code == 409 and "checkpoint" in r.json()["error"]["message"]
    CheckpointDir.objects.filter(job=job).update(deleted_at=job.submitted_at)  # expired and deleted
    assert client_for(lab.vadmin).delete(f"{URL}/{own.pk}").status_code == 204
    assert AuditEntry.objects.filter(action="data_source.delete").count() == 1
    # the job still says where its checkpoints were and that they were deleted
    shown = client_for(lab.alice).get(f"/api/v1/jobs/{job.pk}").json()["checkpoint"]
    assert shown["source"] == "scratch" and shown["sub_path"] == f"checkpoints/job-{job.pk}" and shown["deleted_at"]
