"""docs/workloads.md's "Shapes" walk-through on the demo's lab with its CPU pool: preprocess (CPU) -> train
(2 x 4 GPUs + 4 CPU data workers) -> eval (CPU), through the API and the simulated cluster."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from lab import demo
from lab.services.labfile import apply_lab
from scheduling.models import Job, JobState, SimPod
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster

pytestmark = pytest.mark.django_db

IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"
RUN = {"SIM_DURATION_S": "600"}


def _as(username: str) -> APIClient:
    c = APIClient()
    c.force_authenticate(get_user_model().objects.get(username=username))
    return c


def bodies(preprocess_id=None, train_id=None):
    preprocess = {"name": "tokenise", "image": IMAGE, "command": ["python", "tokenise.py"], "flavor": "cpu",
                  "gpus": 0, "pods": 2, "cpu": "8", "memory": "16Gi", "env": RUN}
    train = {"name": "train", "image": IMAGE, "command": ["sh", "-c", "torchrun train.py"], "flavor": "a100-80gb",
             "env": RUN, "after": [{"condition": "afterok", "job": preprocess_id}],
             "roles": [{"name": "trainer", "pods": 2, "gpus": 4, "cpu": "16", "memory": "64Gi"},
                       {"name": "data", "pods": 4, "cpu": "4", "memory": "8Gi", "failure_policy": "restart-pod",
                        "command": ["python", "loader.py"]}]}
    evaluate = {"name": "eval", "image": IMAGE, "command": ["python", "eval.py"], "flavor": "cpu", "gpus": 0,
                "cpu": "4", "memory": "8Gi", "env": RUN, "after": [{"condition": "afterok", "job": train_id}]}
    return preprocess, train, evaluate


def step(go, sim_clock, seconds=0):
    if seconds:
        sim_clock.advance(seconds)
    go(sync_cluster)
    go(run_cycle)
    go(sync_cluster)


def test_preprocess_train_eval(go, sim_clock):
    apply_lab(demo.LAB_FILE.read_text())
    demo.add_cpu_pool()
    bob, alice = _as("bob"), _as("alice")
    pre, _, _ = bodies()
    r = bob.post("/api/v1/jobs", pre, format="json")
    assert r.status_code == 201, r.json()
    pre_id = r.json()["id"]
    _, train, _ = bodies(pre_id)
    r = bob.post("/api/v1/jobs", train, format="json")
    assert r.status_code == 201, r.json()
    train_id = r.json()["id"]
    assert r.json()["state"] == "pending_approval"  # 8 GPUs: vision's admins approve above 4
    assert alice.post(f"/api/v1/approvals/{train_id}/approve", {"comment": "ok"}, format="json").status_code == 200
    _, _, ev = bodies(pre_id, train_id)
    r = bob.post("/api/v1/jobs", ev, format="json")
    assert r.status_code == 201, r.json()
    eval_id = r.json()["id"]

    step(go, sim_clock)
    jobs = {j.pk: j for j in Job.objects.all()}
    assert jobs[pre_id].state == JobState.RUNNING and set(jobs[pre_id].placement) <= {"sim-cpu-0", "sim-cpu-1"}
    assert jobs[train_id].reason_code == "waiting_for_dependency"

    step(go, sim_clock, 601)  # preprocess ends; train starts, all of its six pods at once
    train_job = Job.objects.get(pk=train_id)
    assert train_job.state == JobState.RUNNING, (train_job.state, train_job.reason_message)
    assert train_job.total_gpus == 8 and len(train_job.placement) == 6
    assert set(train_job.placement[:2]) == {"sim-a100-0", "sim-a100-1"}
    assert set(train_job.placement[2:]) <= {"sim-cpu-0", "sim-cpu-1"}
    pods = {p.index: p.env for p in SimPod.objects.filter(job_id=train_id)}
    assert pods[0]["PORTAL_NPROC_PER_NODE"] == "4" and pods[1]["WORLD_SIZE"] == "2"
    assert pods[5]["PORTAL_ROLE"] == "data" and pods[5]["PORTAL_ROLE_RANK"] == "3"
    detail = bob.get(f"/api/v1/jobs/{train_id}").json()
    assert [(r["name"], r["pods"], r["gpus"]) for r in detail["roles"]] == [("trainer", 2, 4), ("data", 4, 0)]

    step(go, sim_clock, 601)  # train ends; eval runs on the CPU pool
    assert Job.objects.get(pk=train_id).state == JobState.SUCCEEDED
    assert Job.objects.get(pk=eval_id).state == JobState.RUNNING
    step(go, sim_clock, 601)
    assert Job.objects.get(pk=eval_id).state == JobState.SUCCEEDED
