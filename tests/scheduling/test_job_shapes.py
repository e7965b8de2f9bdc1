"""Jobs of any shape through the portal (docs/workloads.md, "Shapes"): CPU-only jobs on a CPU pool, jobs of
several roles admitted together on the simulated cluster with each pod's role and rendezvous, quotas in cores,
and a 400 per bad field."""

from __future__ import annotations

import pytest

from engine import reasons
from quotas.models import Flavor, FlavorKind, Quota, QuotaResource
from scheduling.models import Job, JobRole, JobState, Node, SimPod
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def pool(lab):
    """A CPU pool of two 16-core, 64 GiB nodes; vision may use 24 cores (16 nominal + 8 borrowed)."""
    lab.cpu = Flavor.objects.create(name="cpu", kind=FlavorKind.CPU, resource_name="cpu",
                                    node_labels={"pool": "cpu"})
    lab.cpu_nodes = [Node.objects.create(cluster=lab.cluster, name=f"c{i}", flavor=lab.cpu, gpus=0,
                                         cpu_millicores=16000, memory_mib=65536, labels={"pool": "cpu"})
                     for i in range(2)]
    Quota.objects.create(department=lab.vision, flavor=lab.cpu, resource=QuotaResource.CPU, nominal=16,
                         borrowing_limit=8)
    return lab


def roles(*specs):
    return [dict(spec) for spec in specs]


TRAIN = {"name": "trainer", "pods": 2, "gpus": 2, "cpu": "8", "memory": "32Gi"}
DATA = {"name": "data", "pods": 2, "cpu": "4", "memory": "8Gi", "failure_policy": "restart-pod",
        "command": ["python", "loader.py"]}


def job_payload(**fields) -> dict:
    body = {"name": "train-1", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "train.py"],
            "flavor": "a100-80gb", "gpus": 1}
    body.update(fields)
    return {k: v for k, v in body.items() if v is not None}


def post(client_for, user, **fields):
    return client_for(user).post("/api/v1/jobs", job_payload(**fields), format="json")


def run(go):
    go(run_cycle)
    go(sync_cluster)


def test_a_cpu_only_job_runs_on_the_cpu_pool(pool, client_for, go):
    r = post(client_for, pool.alice, flavor="cpu", gpus=0, cpu="2", memory="4Gi", pods=3)
    assert r.status_code == 201, r.json()
    job = Job.objects.get(pk=r.json()["id"])
    assert (job.total_gpus, job.all_pods, job.roles.get().name) == (0, 3, "main")
    run(go)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING, (job.state, job.reason_code, job.reason_message)
    assert set(job.placement) <= {"c0", "c1"} and len(job.placement) == 3


@pytest.mark.parametrize(("cpu", "memory", "field"), [("17", "4Gi", "cpu"), ("2", "65Gi", "memory")])
def test_a_cpu_only_pod_larger_than_every_node_of_its_pool_is_a_400(pool, client_for, cpu, memory, field):
    # The pool's nodes have 16 cores and 64 GiB: such a pod would wait forever, so it is refused at once, as a
    # role's is, and nothing is written.
    before = Job.objects.count()
    r = post(client_for, pool.alice, flavor="cpu", gpus=0, cpu=cpu, memory=memory)
    assert r.status_code == 400, r.json()
    error = r.json()["error"]["fields"][field][0]
    assert error["code"] == "exceeds_largest_node" and "16000m, 65536Mi" in error["message"]
    assert Job.objects.count() == before
    assert post(client_for, pool.alice, flavor="cpu", gpus=0, cpu="16", memory="64Gi").status_code == 201


def test_a_two_role_job_starts_whole_with_each_pods_role_and_rendezvous(pool, client_for, go):
    r = post(client_for, pool.alice, roles=roles(TRAIN, DATA), gpus=None)
    assert r.status_code == 201, r.json()
    job = Job.objects.get(pk=r.json()["id"])
    assert (job.pods, job.gpus_per_pod, job.total_gpus, job.cpu_pods, job.role_count) == (2, 2, 4, 2, 2)
    assert list(job.roles.values_list("name", "failure_policy")) == [("trainer", "restart-attempt"),
                                                                     ("data", "restart-pod")]
    run(go)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING, (job.state, job.reason_code, job.reason_message)
    assert job.placement[:2] and set(job.placement[:2]) <= {"n0", "n1"}
    assert set(job.placement[2:]) <= {"c0", "c1"} and len(job.placement) == 4
    pods = {p.index: p for p in SimPod.objects.filter(job_id=job.pk)}
    assert len(pods) == 4
    trainer1, data0 = pods[1].env, pods[2].env
    base = f"job-{job.pk}-a1"
    assert trainer1["PORTAL_ROLE"] == "trainer" and trainer1["PORTAL_ROLE_RANK"] == "1"
    assert (trainer1["WORLD_SIZE"], trainer1["RANK"], trainer1["MASTER_ADDR"]) == ("2", "1", f"{base}-0.{base}")
    assert data0["PORTAL_ROLE"] == "data" and data0["PORTAL_ROLE_RANK"] == "0"
    assert "WORLD_SIZE" not in data0  # torchrun's environment is the training role's
    assert data0["PORTAL_ROLE_TRAINER_HOSTS"] == f"{base}-0.{base},{base}-1.{base}"
    assert trainer1["PORTAL_ROLE_DATA_HOSTS"] == f"{base}-2.{base},{base}-3.{base}"
    assert pods[2].log.startswith("$ python loader.py")


def test_a_job_whose_data_role_does_not_fit_waits_whole_and_says_which_role(pool, client_for, go):
    Node.objects.filter(flavor=pool.cpu).update(cpu_millicores=4000)  # one 4-core pod per node: 2 in all
    big = dict(DATA, pods=3)
    r = post(client_for, pool.alice, roles=roles(TRAIN, big), gpus=None)
    assert r.status_code == 201, r.json()
    run(go)
    job = Job.objects.get(pk=r.json()["id"])
    assert job.state == JobState.QUEUED and job.reason_code == reasons.NO_CAPACITY
    assert job.reason_detail["role"] == "data" and "role data" in job.reason_message
    assert not SimPod.objects.filter(job_id=job.pk, gated=False).exists()
    # the timeline's reason names the role, and is among that role's events
    events = client_for(pool.alice).get(f"/api/v1/jobs/{job.pk}/events?role=data").json()
    assert [(e["kind"], e["reason_code"], e["role"]) for e in events] == [("reason", reasons.NO_CAPACITY, "data")]


def test_cpu_quota_in_cores_holds_cpu_jobs(pool, client_for, go):
    first = post(client_for, pool.alice, flavor="cpu", gpus=0, cpu="8", memory="4Gi", pods=2)  # 16 cores
    second = post(client_for, pool.alice, flavor="cpu", gpus=0, cpu="8", memory="4Gi", pods=2)  # 16 more > 24
    assert first.status_code == second.status_code == 201
    run(go)
    states = dict(Job.objects.values_list("pk", "state"))
    assert states[first.json()["id"]] == JobState.RUNNING
    waiting = Job.objects.get(pk=second.json()["id"])
    assert waiting.state == JobState.QUEUED and waiting.reason_code == reasons.BORROW_LIMIT
    assert waiting.reason_detail["resource"] == "cpu"


@pytest.mark.parametrize(("fields", "field", "code"), [
    ({"roles": [dict(DATA, pods=0)]}, "roles", None),  # a role without pods
    ({"roles": [TRAIN, dict(DATA, name="trainer")]}, "roles", "duplicate_name"),
    ({"roles": [TRAIN, dict(DATA, cpu="32")]}, "roles.1.cpu", "exceeds_largest_node"),
    ({"roles": [TRAIN, dict(DATA, name="Bad Name")]}, "roles", None),
    ({"roles": [TRAIN, dict(TRAIN, name="other", gpus=1)]}, "roles", "mixed_gpus"),
    ({"roles": [TRAIN], "pods": 2}, "pods", "set_per_role"),
    ({"roles": [DATA]}, "flavor", "needs_cpu_pool"),  # no role uses GPUs, on a GPU flavor
    ({"gpus": 0}, "gpus", "needs_cpu_pool"),
    ({"flavor": "cpu", "gpus": 1}, "gpus", "cpu_pool"),
    ({"flavor": "cpu", "gpus": 0, "cpu": "16", "pods": 2}, "cpu", "exceeds_quota_ceiling"),  # 32 > 24 cores
])
def test_bad_shapes_are_400_with_the_field(pool, client_for, fields, field, code):
    fields.setdefault("gpus", None)
    r = post(client_for, pool.alice, **fields)
    assert r.status_code == 400, r.json()
    errors = r.json()["error"]["fields"]
    assert any(key == field or key.startswith(field + ".") for key in errors), errors
    if code is not None:
        codes = [e.get("code") for key, errs in errors.items() if key == field or key.startswith(field + ".")
                 for e in errs]
        assert code in codes, errors
    assert not JobRole.objects.exists()


def test_gpus_zero_is_allowed_on_a_cpu_pool_and_single_role_jobs_are_unchanged(pool, client_for):
    r = post(client_for, pool.alice)  # the usual body: one GPU, no roles
    assert r.status_code == 201
    job = Job.objects.get(pk=r.json()["id"])
    assert (job.pods, job.gpus_per_pod, job.role_count, job.cpu_pods) == (1, 1, 1, 0)
    role = job.roles.get()
    assert (role.name, role.pods, role.gpus_per_pod, role.image, role.command) == ("main", 1, 1, "", None)
