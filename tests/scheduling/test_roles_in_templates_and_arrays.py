"""Jobs of roles everywhere a job is written: templates, a job's clone spec and job arrays (every task has the
roles, each role's command filled with the task's index)."""

from __future__ import annotations

import pytest

from scheduling.models import Job
from tests.scheduling.test_job_shapes import DATA, TRAIN, job_payload, pool  # noqa: F401 (the fixture)

pytestmark = pytest.mark.django_db


def _roles_of(job: Job) -> list[tuple]:
    return [(r.name, r.pods, r.gpus_per_pod, r.cpu_millicores, r.memory_mib, r.failure_policy, r.command)
            for r in job.roles.order_by("index")]


def test_a_template_of_roles_submits_a_job_of_those_roles(pool, client_for):  # noqa: F811
    c = client_for(pool.alice)
    r = c.post("/api/v1/templates", {"name": "train", "spec": job_payload(gpus=None, roles=[TRAIN, DATA])},
               format="json")
    assert r.status_code == 201, r.content
    job = c.post("/api/v1/jobs", {"template": "train", "name": "run-2"}, format="json")
    assert job.status_code == 201, job.content
    assert [x[0] for x in _roles_of(Job.objects.get(pk=job.json()["id"]))] == ["trainer", "data"]


def test_a_job_of_roles_is_cloned_with_its_roles(pool, client_for):  # noqa: F811
    c = client_for(pool.alice)
    first = c.post("/api/v1/jobs", job_payload(gpus=None, roles=[TRAIN, DATA]), format="json")
    assert first.status_code == 201, first.content
    spec = c.get(f"/api/v1/jobs/{first.json()['id']}/spec").json()
    assert "pods" not in spec and "gpus" not in spec and [r["name"] for r in spec["roles"]] == ["trainer", "data"]
    again = c.post("/api/v1/jobs", spec, format="json")
    assert again.status_code == 201, again.content
    assert _roles_of(Job.objects.get(pk=again.json()["id"])) == _roles_of(Job.objects.get(pk=first.json()["id"]))


def test_a_single_role_job_is_cloned_as_before(pool, client_for):  # noqa: F811
    c = client_for(pool.alice)
    first = c.post("/api/v1/jobs", job_payload(flavor="cpu", gpus=0, cpu="2", memory="4Gi"), format="json")
    spec = c.get(f"/api/v1/jobs/{first.json()['id']}/spec").json()
    assert "roles" not in spec and spec["gpus"] == 0


def test_every_array_task_has_the_roles_with_its_index(pool, client_for):  # noqa: F811
    data = {**DATA, "command": ["python", "loader.py", "--shard={{index}}"]}
    r = client_for(pool.alice).post("/api/v1/arrays", {**job_payload(gpus=None, roles=[TRAIN, data]),
                                                       "array": "0-2"}, format="json")
    assert r.status_code == 201, r.content
    tasks = Job.objects.filter(array__isnull=False).order_by("array_index")
    assert [[x[0] for x in _roles_of(t)] for t in tasks] == [["trainer", "data"]] * 3
    assert [t.roles.get(name="data").command[-1] for t in tasks] == ["--shard=0", "--shard=1", "--shard=2"]


def test_a_bad_placeholder_in_a_role_command_is_a_400_on_roles(pool, client_for):  # noqa: F811
    data = {**DATA, "command": ["python", "loader.py", "{{shard}}"]}
    r = client_for(pool.alice).post("/api/v1/arrays", {**job_payload(gpus=None, roles=[TRAIN, data]),
                                                       "array": "0-2"}, format="json")
    assert r.status_code == 400, r.content
    assert r.json()["error"]["fields"]["roles"][0]["code"] == "invalid_placeholder"
    assert not Job.objects.exists()
