"""Jobs ask for data source mounts, a checkpoint directory and a /dev/shm size: what is accepted, what it
becomes on the job, and a clear 400 for every bad input."""

from __future__ import annotations

import pytest
from django.test import Client

from scheduling.models import Cluster, Job
from tests.conftest import job_payload
from workloads.models import CheckpointDir, DataSource

pytestmark = pytest.mark.django_db


@pytest.fixture
def sources(lab):
    """vision owns a read-only dataset and a writable scratch; the platform shares imagenet with vision only,
    and a public corpus with everyone; nlp owns its own scratch."""
    s = type("Sources", (), {})()
    s.images = DataSource.objects.create(name="vision-images", cluster=lab.cluster, department=lab.vision,
                                         claim_name="vision-images")
    s.scratch = DataSource.objects.create(name="vision-scratch", cluster=lab.cluster, department=lab.vision,
                                          claim_name="vision-scratch", writable=True, sub_path="jobs")
    s.imagenet = DataSource.objects.create(name="imagenet", kind="dataset", cluster=lab.cluster,
                                           claim_name="imagenet-ro")
    s.imagenet.shared_with.add(lab.vision)
    s.corpus = DataSource.objects.create(name="corpus", kind="nfs", cluster=lab.cluster, claim_name="corpus",
                                         shared_with_all=True)
    s.nlp = DataSource.objects.create(name="nlp-scratch", cluster=lab.cluster, department=lab.nlp,
                                      claim_name="nlp-scratch", writable=True)
    return s


def post(client_for, user, **fields):
    return client_for(user).post("/api/v1/jobs", job_payload(**fields), format="json")


def field_errors(response, field):
    assert response.status_code == 400, response.json()
    body = response.json()["error"]
    assert body["code"] == "validation_error"
    return body["fields"][field]


def test_a_job_mounts_its_departments_and_shared_sources(lab, sources, client_for):
    r = post(client_for, lab.alice, mounts=[{"source": "vision-images", "path": "/data"},
                                            {"source": "imagenet", "path": "/datasets/imagenet"},
                                            {"source": "corpus", "path": "/corpus"},
                                            {"source": "vision-scratch", "path": "/scratch", "read_only": False}],
             checkpoint={"source": "vision-scratch"}, shm_mb=2048)
    assert r.status_code == 201, r.json()
    body = r.json()
    assert [m["read_only"] for m in body["mounts"]] == [True, True, True, False]
    job = Job.objects.get(pk=body["id"])
    row = CheckpointDir.objects.get(job=job)
    assert row.sub_path == f"jobs/checkpoints/job-{job.pk}" and row.source == sources.scratch
    assert body["checkpoint"] == {"source": "vision-scratch", "cluster": "default", "path": "/checkpoint",
                                  "sub_path": row.sub_path, "deleted_at": None}
    assert body["shm_mb"] == 2048
    # the job page shows the mounts and the checkpoint path
    c = Client()
    c.force_login(lab.alice)
    page = c.get(f"/jobs/{job.pk}/").content.decode()
    assert "/datasets/imagenet" in page and row.sub_path in page and "PORTAL_CHECKPOINT_DIR" in page


def test_shm_defaults_to_a_bounded_share_of_memory(lab, sources, client_for, settings):
    settings.SHM_DEFAULT_MB = 1024
    assert post(client_for, lab.alice).json()["shm_mb"] == 1024
    assert post(client_for, lab.alice, memory="1Gi").json()["shm_mb"] == 512  # at most half the memory


def test_checkpoint_true_takes_the_departments_one_writable_source(lab, sources, client_for):
    r = post(client_for, lab.bob, checkpoint=True)
    assert r.status_code == 201, r.json()
    assert r.json()["checkpoint"]["source"] == "nlp-scratch"


@pytest.mark.parametrize(
    ("fields", "field", "code_or_text"),
    [
        # an unknown source, and another department's source (reported the same way: tenancy)
        ({"mounts": [{"source": "nope", "path": "/data"}]}, "mounts", "unknown_source"),
        ({"mounts": [{"source": "nlp-scratch", "path": "/data"}]}, "mounts", "unknown_source"),
        # path conflicts: the same path, a nested one, the checkpoint's
        ({"mounts": [{"source": "imagenet", "path": "/data"}, {"source": "corpus", "path": "/data"}]}, "mounts",
         "conflicts with"),
        ({"mounts": [{"source": "imagenet", "path": "/data"}, {"source": "corpus", "path": "/data/corpus"}]},
         "mounts", "conflicts with"),
        ({"mounts": [{"source": "imagenet", "path": "/checkpoint"}], "checkpoint": {"source": "vision-scratch"}},
         "checkpoint", "path_conflict"),
        # a write to a read-only source (a department's, a shared dataset)
        ({"mounts": [{"source": "vision-images", "path": "/data", "read_only": False}]}, "mounts",
         "read_only_source"),
        ({"mounts": [{"source": "imagenet", "path": "/data", "read_only": False}]}, "mounts", "read_only_source"),
        # system paths and malformed paths
        ({"mounts": [{"source": "imagenet", "path": "/proc/data"}]}, "mounts", "under /proc"),
        ({"mounts": [{"source": "imagenet", "path": "/dev/shm"}]}, "mounts", "under /dev"),
        ({"mounts": [{"source": "imagenet", "path": "/dev"}]}, "mounts", "under /dev"),
        ({"mounts": [{"source": "imagenet", "path": "data"}]}, "mounts", "absolute"),
        ({"mounts": [{"source": "imagenet", "path": "/data/../etc"}]}, "mounts", "normalised"),
        ({"mounts": [{"source": "imagenet", "path": "/"}]}, "mounts", "absolute"),
        # the shape itself
        ({"mounts": {"source": "imagenet"}}, "mounts", "list"),
        ({"mounts": [{"source": "imagenet", "path": "/data", "hostPath": "/"}]}, "mounts", "unknown field"),
        ({"mounts": [{"source": "imagenet", "path": "/data", "read_only": "yes"}]}, "mounts", "true or false"),
        ({"mounts": [{"source": f"s{i}", "path": f"/d{i}"} for i in range(17)]}, "mounts", "At most 16"),
        # checkpoints: read-only, not the department's own, none to default to, a bad value
        ({"checkpoint": {"source": "vision-images"}}, "checkpoint", "read_only_source"),
        ({"checkpoint": {"source": "imagenet"}}, "checkpoint", "not_department_source"),
        ({"checkpoint": {"source": "nope"}}, "checkpoint", "unknown_source"),
        ({"checkpoint": {"source": "vision-scratch", "path": "/proc/x"}}, "checkpoint", "forbidden_path"),
        ({"checkpoint": {"source": "vision-scratch", "cluster": "mars"}}, "checkpoint", "unknown_cluster"),
        ({"checkpoint": {"source": "vision-scratch", "size": 1}}, "checkpoint", "Unknown field"),
        ({"checkpoint": "vision-scratch"}, "checkpoint", "Give true"),
        # /dev/shm over the job's memory, over SHM_MAX_MB, under the minimum, not a number
        ({"shm_mb": 20000, "memory": "16Gi"}, "shm_mb", "out_of_range"),
        ({"shm_mb": 10, "memory": "16Gi"}, "shm_mb", "out_of_range"),
        ({"shm_mb": "lots"}, "shm_mb", "whole number"),
        # the variable the portal sets
        ({"env": {"PORTAL_CHECKPOINT_DIR": "/x"}}, "env", "reserved"),
    ],
)
def test_every_bad_input_is_a_clear_400(lab, sources, client_for, fields, field, code_or_text):
    errors = field_errors(post(client_for, lab.alice, **fields), field)
    assert any(code_or_text in (e["code"], e["message"]) or code_or_text in e["message"] for e in errors), errors
    assert not Job.objects.exists()


def test_a_dataset_shared_with_another_department_only_is_unknown_here(lab, sources, client_for):
    """imagenet is shared with vision alone: for nlp it does not exist, as a mount or as a checkpoint."""
    for fields, field in (({"mounts": [{"source": "imagenet", "path": "/data"}]}, "mounts"),
                          ({"checkpoint": {"source": "imagenet"}}, "checkpoint")):
        [error] = field_errors(post(client_for, lab.bob, **fields), field)
        assert error["code"] == "unknown_source" and "vision" not in error["message"], error
    sources.imagenet.shared_with.add(lab.nlp)  # shared with nlp too: now it mounts
    assert post(client_for, lab.bob, mounts=[{"source": "imagenet", "path": "/data"}]).status_code == 201


def test_shm_over_the_setting_is_refused(lab, sources, client_for, settings):
    settings.SHM_MAX_MB = 4096
    errors = field_errors(post(client_for, lab.alice, shm_mb=8192, memory="64Gi"), "shm_mb")
    assert "4096" in errors[0]["message"]


def test_checkpoint_true_without_or_with_several_writable_sources(lab, sources, client_for):
    DataSource.objects.create(name="vision-fast", cluster=lab.cluster, department=lab.vision, claim_name="fast",
                              writable=True)
    errors = field_errors(post(client_for, lab.alice, checkpoint=True), "checkpoint")
    assert errors[0]["code"] == "no_default_source" and "vision-fast, vision-scratch" in errors[0]["message"]
    DataSource.objects.filter(department=lab.vision, writable=True).delete()
    errors = field_errors(post(client_for, lab.alice, checkpoint=True), "checkpoint")
    assert "no writable data source" in errors[0]["message"]


def test_a_checkpoint_source_on_several_clusters_must_name_one(lab, sources, client_for):
    other = Cluster.objects.create(name="other")
    DataSource.objects.create(name="vision-scratch", cluster=other, department=lab.vision, claim_name="s",
                              writable=True)
    errors = field_errors(post(client_for, lab.alice, checkpoint={"source": "vision-scratch"}), "checkpoint")
    assert errors[0]["code"] == "ambiguous_source" and "default, other" in errors[0]["message"]
    r = post(client_for, lab.alice, checkpoint={"source": "vision-scratch", "cluster": "other"})
    assert r.status_code == 201 and r.json()["checkpoint"]["cluster"] == "other"


def test_a_batch_item_with_a_bad_mount_is_keyed_by_its_position(lab, sources, client_for):
    r = client_for(lab.alice).post("/api/v1/jobs/batch", {"jobs": [
        job_payload(mounts=[{"source": "imagenet", "path": "/data"}]),
        job_payload(mounts=[{"source": "nlp-scratch", "path": "/data"}])]}, format="json")
    assert r.status_code == 400
    assert list(r.json()["error"]["fields"]) == ["jobs.1.mounts"]
    assert not Job.objects.exists()


def test_sources_list_through_the_tenancy_gate(lab, sources, client_for):
    names = {s["name"] for s in client_for(lab.alice).get("/api/v1/data-sources").json()["results"]}
    assert names == {"vision-images", "vision-scratch", "imagenet", "corpus"}
    names = {s["name"] for s in client_for(lab.bob).get("/api/v1/data-sources").json()["results"]}
    assert names == {"corpus", "nlp-scratch"}
    assert client_for(lab.stranger).get("/api/v1/data-sources").json()["results"] == []
