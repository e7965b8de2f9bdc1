"""Seed demo data: three departments competing for an 8 x A100 simulated cluster, users, quotas, jobs."""

from __future__ import annotations

import json
import os
import secrets
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction

from portal.models import Department, Membership, Role
from quotas.models import Flavor, Quota
from scheduling.models import Cluster, Job, Node

DEPARTMENTS = [("vision", "Computer Vision"), ("nlp", "Language Models"), ("robotics", "Robotics"),
               ("platform", "Platform team")]
USERS = [
    # username, department, role, user tier
    ("alice", "vision", Role.DEPARTMENT_ADMIN, "pi"),
    ("bob", "vision", Role.RESEARCHER, "standard"),
    ("carol", "nlp", Role.DEPARTMENT_ADMIN, "senior"),
    ("dave", "nlp", Role.RESEARCHER, "standard"),
    ("erin", "robotics", Role.RESEARCHER, "senior"),
    ("admin", "platform", Role.PLATFORM_ADMIN, "senior"),
]
QUOTAS = {  # department: (nominal, borrowing limit, lending limit) of a100-80gb
    "vision": (4, 4, None),
    "nlp": (3, 2, None),
    "robotics": (1, 2, 1),
    "platform": (0, 0, None),
}


def credentials_path() -> Path:
    return Path(settings.DATA_DIR) / "demo-credentials.json"


@transaction.atomic
def seed(*, jobs: bool = True) -> dict[str, str]:
    """Idempotent: re-running keeps existing rows and passwords. Returns {username: password}."""
    path = credentials_path()
    creds: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
    depts = {slug: Department.objects.get_or_create(slug=slug, defaults={"name": name})[0]
             for slug, name in DEPARTMENTS}
    User = get_user_model()
    for username, dept, role, tier in USERS:
        user, created = User.objects.get_or_create(username=username, defaults={"email": f"{username}@lab.example"})
        if created or username not in creds:
            creds[username] = secrets.token_urlsafe(9)
            user.set_password(creds[username])
            user.is_staff = role == Role.PLATFORM_ADMIN
            user.is_superuser = role == Role.PLATFORM_ADMIN
            user.save()
        Membership.objects.update_or_create(user=user, defaults={"department": depts[dept], "role": role,
                                                                 "user_tier": tier})
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(creds, fh, indent=1)

    a100, _ = Flavor.objects.get_or_create(
        name="a100-80gb",
        defaults={"resource_name": "nvidia.com/gpu", "node_labels": {"gpu-type": "a100"}, "gpu_memory_gib": 80,
                  "description": "NVIDIA A100 80GB SXM"},
    )
    cluster = Cluster.objects.filter(is_default=True).first() or Cluster.objects.create(
        name="default", is_default=True, backend="simulated")
    for i in range(2):
        Node.objects.get_or_create(cluster=cluster, name=f"sim-a100-{i}", flavor=a100,
                                   defaults={"gpus": 4, "labels": {"gpu-type": "a100"}})
    for slug, (nominal, borrow, lend) in QUOTAS.items():
        Quota.objects.get_or_create(department=depts[slug], flavor=a100,
                                    defaults={"nominal": nominal, "borrowing_limit": borrow, "lending_limit": lend})
    _demo_budgets(a100, admin=User.objects.get(username="admin"))
    if jobs and not Job.objects.exists():
        _demo_jobs(a100)
    return creds


# Budgets: different budgets and refill rules per department, so that bids compete for the A100s.
PRICES = {"realtime": 3000, "elastic": 1000, "backfill": 400}  # mcr per GPU-hour of a100-80gb
WALLETS = {  # department: (opening credits in mcr, refill mode, refill amount, period)
    "vision": (200_000, "per_nominal_gpu", 25_000, "weekly"),
    "nlp": (60_000, "fixed", 100_000, "monthly"),
    "robotics": (15_000, "fixed", 20_000, "weekly"),
}
APPROVALS = {"vision": {"gpus_above": 4}, "robotics": {"realtime": True}}


def _demo_budgets(a100: Flavor, *, admin) -> None:
    """Idempotent: creates what is missing, never changes what an admin has edited since."""
    from quotas.models import ApprovalRule, Price, RefillRule, Wallet
    from quotas.services import rules, wallets

    for tier, price in PRICES.items():
        if not Price.objects.filter(flavor=a100, tier=tier).exists():
            Price.objects.create(flavor=a100, tier=tier, per_gpu_hour=price)
    depts = {d.slug: d for d in Department.objects.filter(slug__in=WALLETS)}
    for slug, (opening, mode, amount, period) in WALLETS.items():
        if not Wallet.objects.filter(department=depts[slug]).exists():
            wallets.wallet_create(department=depts[slug], actor=admin, balance=opening)
        if not RefillRule.objects.filter(department=depts[slug]).exists():
            rules.refill_rule_set(department=depts[slug], actor=admin, mode=mode, amount=amount, period=period)
    for slug, rule in APPROVALS.items():
        if not ApprovalRule.objects.filter(department=depts[slug]).exists():
            rules.approval_rule_set(department=depts[slug], actor=admin, **rule)


def _demo_jobs(a100: Flavor) -> None:
    from scheduling.services.jobs import job_submit

    User = get_user_model()
    specs = [
        ("bob", "resnet50-baseline", 2, 1, "elastic", "normal", 1800, 0),
        ("alice", "detr-finetune", 4, 1, "elastic", "high", 3600, 500),
        ("dave", "llama-lora", 2, 1, "elastic", "normal", 2400, 200),
        ("carol", "eval-server", 1, 1, "realtime", "critical", 900, 0),
        ("erin", "policy-sweep", 1, 1, "backfill", "low", 1200, 0),
        ("dave", "tokenizer-prep", 1, 1, "backfill", "normal", 600, 0),
        # bids for spare GPUs: borrowed capacity goes to the highest bids, all paying the clearing price
        ("erin", "grasp-rl", 2, 1, "elastic", "high", 3600, 900),
        ("bob", "segformer-ablation", 2, 1, "elastic", "normal", 2700, 300),
        ("dave", "distill-7b", 2, 1, "elastic", "normal", 3600, 650),
        ("alice", "vit-huge", 4, 2, "elastic", "normal", 7200, 400),  # 8 GPUs > 4: waits for approval
    ]
    for username, name, gpus, pods, tier, urgency, runtime, bid in specs:
        job_submit(
            user=User.objects.get(username=username),
            data={"name": name, "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                  "command": ["python", "train.py", "--config", f"{name}.yaml"], "env": {}, "flavor": a100,
                  "gpus": gpus, "pods": pods, "cpu_millicores": 8000, "memory_mib": 65536, "tier": tier,
                  "urgency": urgency, "task_type": "train", "deadline": None, "max_runtime_s": runtime, "bid": bid,
                  "termination_grace_s": 30, "pdb_min_available": None},
            idempotency_key=f"demo-{name}",
        )
