"""docs/workloads.md's "CPU work on GPU nodes" walk-through on the demo's lab with its CPU pool: a CPU job too
large for the pool's nodes runs on a GPU node's spare CPU once the cluster lends it, and the trainers still
start beside it."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from lab import demo
from lab.services.labfile import apply_lab, dump, export_lab
from scheduling.models import Job, JobState
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster

pytestmark = pytest.mark.django_db

IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


def _as(username: str) -> APIClient:
    c = APIClient()
    c.force_authenticate(get_user_model().objects.get(username=username))
    return c


def step(go):
    go(sync_cluster)
    go(run_cycle)
    go(sync_cluster)


def test_a_cpu_job_runs_on_a_gpu_nodes_spare_cpu_once_the_cluster_lends_it(go):
    apply_lab(demo.LAB_FILE.read_text())
    demo.add_cpu_pool()
    dave, admin = _as("dave"), _as("admin")
    # 1. dave's conversion asks for one 40-core pod: more than a CPU node has (32); it could never start there
    body = {"name": "convert", "image": IMAGE, "command": ["python", "convert.py"], "flavor": "cpu", "gpus": 0,
            "cpu": "40", "memory": "32Gi"}
    r = dave.post("/api/v1/jobs", body, format="json")
    assert r.status_code == 400, r.json()
    error = r.json()["error"]["fields"]["cpu"][0]
    assert error["code"] == "exceeds_largest_node" and "its largest: 32000m, 131072Mi" in error["message"]
    # 2. the platform admin states the GPU nodes' size in the lab file and lends their spare CPU to the pool
    text = dump(export_lab())
    text = text.replace("    gpus_per_node: 4\n", "    gpus_per_node: 4\n    cores: 64\n    memory_gib: 512\n", 1)
    assert "cores: 64" in text
    apply_lab(text)
    r = admin.patch("/api/v1/clusters/default", {"cpu_on_gpu_nodes": "cpu", "gpu_reserve_cores": 4,
                                                 "gpu_reserve_memory_gib": 32}, format="json")
    assert r.status_code == 200, r.json()
    r = dave.post("/api/v1/jobs", body, format="json")  # accepted now: the GPU nodes offer 48 cores each
    assert r.status_code == 201, r.json()
    convert = r.json()["id"]
    step(go)
    job = Job.objects.get(pk=convert)
    assert job.state == JobState.RUNNING, (job.state, job.reason_message)
    assert job.placement[0] in {"sim-a100-0", "sim-a100-1"}  # 64 - 4 GPUs x 4 = 48 cores offered
    detail = dave.get(f"/api/v1/jobs/{convert}").json()
    assert detail["placement"] == job.placement
    # 3. the GPUs stay the GPU jobs': an 8-GPU training job still starts on both nodes
    r = _as("bob").post("/api/v1/jobs", {"name": "train", "image": IMAGE, "command": ["python", "train.py"],
                                           "flavor": "a100-80gb", "gpus": 4, "pods": 2, "cpu": "16",
                                           "memory": "64Gi"}, format="json")
    assert r.status_code == 201, r.json()
    assert _as("alice").post(f"/api/v1/approvals/{r.json()['id']}/approve", {"comment": "ok"},
                             format="json").status_code == 200  # (8 GPUs: vision's admins approve above 4)
    step(go)
    train = Job.objects.get(pk=r.json()["id"])
    assert train.state == JobState.RUNNING and sorted(train.placement) == ["sim-a100-0", "sim-a100-1"]
