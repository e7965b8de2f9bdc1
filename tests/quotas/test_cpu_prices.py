"""CPU work is charged like GPU work (docs/workloads.md, "Shapes"): a CPU pool's prices per core-hour and GiB-hour
make a CPU-only job's hold, and a job of roles' hold adds its data workers' cores and memory to its GPU-hours; the
settlement charges what ran."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from billing import money as money_math
from quotas import budgets
from quotas.models import Flavor, FlavorKind, LedgerEntry, Quota, QuotaResource, Wallet
from quotas.services import pricing
from scheduling.models import Job, JobState, Node, SimPod
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster

pytestmark = pytest.mark.django_db


@pytest.fixture
def cpu_money(money):
    lab = money
    lab.cpu = Flavor.objects.create(name="cpu", kind=FlavorKind.CPU, resource_name="cpu", node_labels={"pool": "cpu"})
    Node.objects.create(cluster=lab.cluster, name="c0", flavor=lab.cpu, gpus=0, cpu_millicores=32000,
                        memory_mib=131072)
    Quota.objects.create(department=lab.vision, flavor=lab.cpu, resource=QuotaResource.CPU, nominal=32)
    pricing.price_set(flavor=lab.cpu, tier="elastic", per_gpu_hour=0, per_core_hour=200, per_gib_hour=10,
                      actor=lab.root)
    return lab


def test_the_cpu_rate_rounds_up_per_hour():
    assert money_math.cpu_rate(8000, 16384, per_core_hour=200, per_gib_hour=10) == 8 * 200 + 16 * 10
    assert money_math.cpu_rate(500, 0, per_core_hour=3, per_gib_hour=0) == 2  # 1.5 rounds up
    assert money_math.cpu_rate(0, 0, per_core_hour=200, per_gib_hour=10) == 0


def test_a_cpu_only_job_is_held_and_settled_per_core_and_gib_hour(cpu_money, submit, go, consistent):
    lab = cpu_money
    job = go(submit, lab.alice, flavor="cpu", gpus=0, pods=2, cpu="4", memory="8Gi", max_runtime_s=7200)
    hourly = 8 * 200 + 16 * 10  # 8 cores, 16 GiB
    assert budgets.read_for_cycle().hold_for(job) == hourly * 2
    go(run_cycle, now=timezone.now() - timedelta(minutes=30))
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED, job.reason_message
    assert Wallet.objects.get(department=lab.vision).held == hourly * 2
    hold = LedgerEntry.objects.get(job=job, kind="hold")
    assert hold.data["cpu_per_hour"] == hourly and "CPU work" in job.events.get(reason_code="hold").message
    SimPod.objects.filter(job_id=job.pk).update(runtime_s=0)  # its runtime is over: it ended as it started, now
    go(sync_cluster)
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    settle = LedgerEntry.objects.get(job=job, kind="settle")
    assert hourly // 2 - 2 <= -settle.amount <= hourly // 2 + 2  # half an hour of the job's CPU work
    assert Wallet.objects.get(department=lab.vision).held == 0
    consistent()


def test_a_job_of_roles_is_quoted_its_gpu_hours_and_its_data_workers(cpu_money, client_for):
    lab = cpu_money
    r = client_for(lab.alice).post("/api/v1/jobs", {
        "name": "train", "image": "nvcr.io/nvidia/pytorch:24.05-py3", "command": ["python", "train.py"],
        "flavor": "a100-80gb", "max_runtime_s": 3600, "roles": [
            {"name": "trainer", "pods": 1, "gpus": 2},
            {"name": "data", "pods": 2, "cpu": "2", "memory": "4Gi"}]}, format="json")
    assert r.status_code == 201, r.json()
    job = Job.objects.get(pk=r.json()["id"])
    assert job.cpu_work() == ((lab.cpu.pk, 4000, 8192),)
    assert budgets.read_for_cycle().hold_for(Job.objects.get(pk=job.pk)) == 2 * 1000 + (4 * 200 + 8 * 10)
