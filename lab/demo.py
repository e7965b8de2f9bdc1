"""Seed demo data: three departments competing for an 8 x A100 simulated campus cluster, plus a second
simulated cluster of another flavor (a 4 x H100 cloud pool), users, quotas, jobs.

The lab itself (departments, members, flavors, the cluster, quotas, prices, budgets, data sources, the
walk-through template of docs/workloads.md) comes from the shipped lab file ``lab/fixtures/demo-lab.yaml``,
applied like ``manage.py lab apply``; the second cluster and the W&B secret (whose value a lab file never
holds) are added through the same services the API and the lab pages call (``add_cloud_cluster``,
``add_wandb_secret``), and the passwords, the sample jobs and the week of finished jobs before them (for the
policy tuner to replay, ``_demo_history``) are the demo's own."""

from __future__ import annotations

import json
import os
import random
import secrets
from datetime import timedelta
from pathlib import Path

import yaml
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.utils import timezone

from lab.services.labfile import apply_lab
from portal.models import Department, Role
from quotas.models import Flavor
from quotas.services import flavors, pricing
from quotas.services.rules import quota_create
from scheduling.models import Cluster, Job, JobRole, JobState
from scheduling.services import cluster_config
from scheduling.services.jobs import job_roles, job_submit
from scheduling.services.session_images import session_image_set
from workloads.services import secrets as secret_services

LAB_FILE = Path(__file__).resolve().parent / "fixtures" / "demo-lab.yaml"


def _users() -> list[tuple[str, str, str, str]]:
    """(username, department, role, user tier) of every member the demo lab file declares."""
    data = yaml.safe_load(LAB_FILE.read_text())
    return [(m["user"], d["slug"], m.get("role", "researcher"), m.get("tier", "standard"))
            for d in data["departments"] for m in d.get("members", [])]


USERS = _users()


def credentials_path() -> Path:
    return Path(settings.DATA_DIR) / "demo-credentials.json"


def seed(*, jobs: bool = True) -> dict[str, str]:
    """Seed the demo lab through the lab file (``lab/fixtures/demo-lab.yaml``), the same path as
    ``manage.py lab apply``, then give the demo users passwords. Idempotent: the file is applied only to an
    empty lab, so re-running keeps what an admin changed since, and existing passwords. Returns
    {username: password}."""
    with transaction.atomic():
        if not Department.objects.exists():
            apply_lab(LAB_FILE.read_text())
            add_cloud_cluster()
            add_cpu_pool()
            add_shared_gpus()
            add_wandb_secret()
            add_session_images()
        creds = _passwords()
        a100 = Flavor.objects.get(name="a100-80gb")
        h100 = Flavor.objects.filter(name="h100").first()
    if jobs and not Job.objects.exists():
        _demo_history(a100)
        _demo_session()  # first: realtime, it starts at the first cycle
        _demo_jobs(a100, h100)
    return creds


HISTORY_PREFIX = "week-"
HISTORY_JOBS = 180
# (tier, urgency, weight), (GPUs per pod, pods, weight): a week of the demo lab's A100 work, about 0.6 of the
# campus cluster's 8 GPUs offered
HISTORY_KINDS = [("elastic", "normal", 50), ("elastic", "high", 10), ("elastic", "critical", 3),
                 ("backfill", "low", 17), ("realtime", "normal", 12), ("realtime", "critical", 8)]
HISTORY_SHAPES = [(1, 1, 40), (2, 1, 30), (4, 1, 20), (4, 2, 10)]


def _demo_history(a100: Flavor) -> None:
    """The week before the demo started, finished jobs of every member on the A100s: what the policy tuner
    replays (docs/policy-tuning.md) and the usage pages read. Deterministic (a seeded generator); waits as a
    lab at that load sees them (realtime work within minutes, most of it; the rest from minutes to hours). Rows
    are written in one go, with their one role each, like ``seed_scale``'s: a record of the past, not jobs the
    portal ran (no attempts, no ledger)."""
    rng = random.Random(48)
    User = get_user_model()
    members = [(User.objects.get(username=u), Department.objects.get(slug=d), tier) for u, d, _, tier in USERS
               if d != "platform"]
    now = timezone.now()
    jobs = []
    for i in range(HISTORY_JOBS):
        owner, dept, user_tier = rng.choice(members)
        tier, urgency = _weighted(rng, HISTORY_KINDS)
        gpus, pods = _weighted(rng, HISTORY_SHAPES)
        runtime = min(6 * 3600, max(300, int(rng.expovariate(1 / (1800 if tier == "realtime" else 5400)))))
        submitted = now - timedelta(days=7) + timedelta(seconds=rng.randint(0, 7 * 86400 - 8 * 3600))
        mean_wait = {"realtime": 90, "elastic": 1800 if urgency == "normal" else 600}.get(tier, 5400)
        started = submitted + timedelta(seconds=min(7200, int(rng.expovariate(1 / mean_wait))))
        jobs.append(Job(
            owner=owner, department=dept, name=f"{HISTORY_PREFIX}{i:03d}", image="nvcr.io/nvidia/pytorch:24.05-py3",
            command=["python", "train.py"], flavor=a100, gpus_per_pod=gpus, pods=pods, tier=tier, urgency=urgency,
            user_tier=user_tier, max_runtime_s=int(runtime * 1.5 // 600 + 1) * 600, state=JobState.SUCCEEDED,
            submitted_at=submitted, queued_at=submitted, admitted_at=started, started_at=started,
            finished_at=started + timedelta(seconds=runtime), exit_code=0))
    Job.objects.bulk_create(jobs)
    JobRole.objects.bulk_create([r for j in jobs for r in job_roles(j, None)])


def _weighted(rng, table):
    *values, _ = rng.choices(table, weights=[row[-1] for row in table])[0]
    return values


def _passwords() -> dict[str, str]:
    """Local passwords for the demo users (the lab file creates accounts without one), written to the
    credentials file; platform admins may also use the Django admin."""
    path = credentials_path()
    creds: dict[str, str] = json.loads(path.read_text()) if path.exists() else {}
    User = get_user_model()
    for username, _dept, role, _tier in USERS:
        user = User.objects.filter(username=username).first()
        if user is None:
            continue
        if username not in creds or not user.has_usable_password():
            creds[username] = creds.get(username) or secrets.token_urlsafe(9)
            user.set_password(creds[username])
            user.is_staff = user.is_superuser = role == Role.PLATFORM_ADMIN
            user.save()
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as fh:
        json.dump(creds, fh, indent=1)
    return creds


def add_cloud_cluster() -> None:
    """A second simulated cluster of another flavor: "cloud", one node of 4 H100s, labelled and dearer than the
    campus cluster (which gets its own labels), with H100 quotas and prices for vision and nlp."""
    cluster_config.cluster_update(cluster=Cluster.objects.get(is_default=True), actor=None,
                             labels={"site": "campus", "data": "campus"})
    h100 = flavors.flavor_create(actor=None, name="h100", resource_name="nvidia.com/gpu",
                                 node_labels={"gpu-type": "h100"}, gpu_memory_gib=80,
                                 description="NVIDIA H100 80GB SXM")
    cloud = cluster_config.cluster_create(actor=None, name="cloud", backend="simulated",
                                     labels={"site": "cloud", "cost-tier": "high"}, cost_rank=10)
    cluster_config.node_group_set(cluster=cloud, actor=None, name="sim-h100", flavor=h100, nodes=1, gpus_per_node=4)
    for slug in ("vision", "nlp"):
        quota_create(department=Department.objects.get(slug=slug), flavor=h100, actor=None, nominal=2,
                     borrowing_limit=2)
    for tier, rate in (("realtime", 6000), ("elastic", 2000), ("backfill", 800)):
        pricing.price_set(flavor=h100, tier=tier, per_gpu_hour=rate, actor=None)


def add_cpu_pool() -> None:
    """The campus cluster's CPU pool (docs/workloads.md, "Shapes"): flavor ``cpu``, two nodes of 32 cores and
    128 GiB, for CPU-only steps and data workers; vision and nlp may use 24 cores each (up to 40 borrowing) and
    96 GiB each. Declared here rather than in the lab file, which does not describe CPU pools yet."""
    cpu = flavors.flavor_create(actor=None, name="cpu", kind="cpu", resource_name="cpu", node_labels={"pool": "cpu"},
                                description="CPU pool: preprocessing, evaluation, data workers")
    cluster_config.node_group_set(cluster=Cluster.objects.get(is_default=True), actor=None, name="sim-cpu",
                                  flavor=cpu, nodes=2, gpus_per_node=0, cpu_millicores=32_000, memory_mib=128 * 1024)
    for slug in ("vision", "nlp"):
        dept = Department.objects.get(slug=slug)
        quota_create(department=dept, flavor=cpu, actor=None, resource="cpu", nominal=24, borrowing_limit=16)
        quota_create(department=dept, flavor=cpu, actor=None, resource="memory", nominal=96, borrowing_limit=64)


def add_shared_gpus() -> None:
    """A flavor whose GPUs notebooks share (docs/fractions.md): ``a100-shared``, one simulated node of two A100s
    shared through HAMi (memory and compute shares), with prices as the whole A100's; vision and nlp may use one
    GPU's worth of fractions each (two borrowing). Declared here, as the CPU pool, so that the lab file's own
    examples keep one GPU flavor."""
    shared = flavors.flavor_create(actor=None, name="a100-shared", resource_name="nvidia.com/gpu",
                                   node_labels={"gpu-type": "a100-shared"}, gpu_memory_gib=80, sharing="hami",
                                   description="A100 80GB shared between notebooks (HAMi)")
    cluster_config.node_group_set(cluster=Cluster.objects.get(is_default=True), actor=None, name="sim-shared",
                                  flavor=shared, nodes=1, gpus_per_node=2)
    for slug in ("vision", "nlp"):
        quota_create(department=Department.objects.get(slug=slug), flavor=shared, actor=None, nominal=1,
                     borrowing_limit=1)
    for tier, price in (("realtime", 3000), ("elastic", 1000), ("backfill", 400)):
        pricing.price_set(flavor=shared, tier=tier, per_gpu_hour=price, actor=None)


# A harmless stand-in that no W&B server accepts; export DEMO_WANDB_API_KEY before ``manage.py demo`` to use
# a key of your own. The value is kept encrypted and never shown back, as every secret's.
DEMO_WANDB_KEY = "demo-not-a-real-wandb-key"


def add_wandb_secret() -> None:
    """The department secret ``vision/wandb`` (key ``api_key``) that the walk-through template uses
    (docs/workloads.md). Declared here rather than in the lab file, which names no values: its value comes
    from ``DEMO_WANDB_API_KEY``, or is a demo stand-in when that is unset."""
    secret_services.secret_create(actor=None, department=Department.objects.get(slug="vision"), name="wandb",
                                  kind="value", values={"api_key": os.environ.get("DEMO_WANDB_API_KEY")
                                                        or DEMO_WANDB_KEY})


def add_session_images() -> None:
    """The lab's session images (docs/sessions.md). On the simulated cluster each runs as the stand-in notebook
    (scheduling/backends/standin.py); on a real cluster these are the images' own apps."""
    session_image_set(actor=None, name="jupyterlab", label="JupyterLab", port=8888, readiness_path="/api/status",
                      image="quay.io/jupyter/pytorch-notebook:cuda12-2024-12-02",
                      command=["start-notebook.py", "--ServerApp.base_url=$(PORTAL_BASE_URL)"],
                      description="JupyterLab with PyTorch and CUDA 12")
    session_image_set(actor=None, name="vscode", label="VS Code (code-server)", port=8080, readiness_path="/healthz",
                      image="ghcr.io/coder/code-server:4.96.2", command=["code-server", "--auth", "none",
                                                                          "--bind-addr", "0.0.0.0:8080"],
                      description="VS Code in the browser")


def _demo_session() -> None:
    """alice's notebook: a running session to open from its job page (Connect)."""
    job_submit(user=get_user_model().objects.get(username="alice"),
               data={"name": "notebook", "kind": "session", "session_image": "jupyterlab",
                     "image": "quay.io/jupyter/pytorch-notebook:cuda12-2024-12-02", "port": 8888,
                     "readiness_path": "/api/status", "command": [], "env": {},
                     "flavor": Flavor.objects.get(name="a100-80gb"), "gpus_per_pod": 1, "pods": 1,
                     "cpu_millicores": 4000, "memory_mib": 16384, "tier": "realtime", "urgency": "normal",
                     "task_type": "inference", "deadline": None, "max_runtime_s": 4 * 3600, "bid": 0,
                     "termination_grace_s": 30, "pdb_min_available": None},
               idempotency_key="demo-notebook")


def _demo_jobs(a100: Flavor, h100: Flavor | None) -> None:
    User = get_user_model()
    specs = [
        ("bob", "resnet50-baseline", 2, 1, "elastic", "normal", 1800, 0),
        ("alice", "detr-finetune", 4, 1, "elastic", "high", 3600, 500),
        ("dave", "llama-lora", 2, 1, "elastic", "normal", 2400, 200),
        ("carol", "eval-server", 1, 1, "realtime", "critical", 900, 0),
        ("erin", "policy-sweep", 1, 1, "backfill", "low", 1200, 0),
        ("dave", "tokenizer-prep", 1, 1, "backfill", "normal", 600, 0),
        # bids for spare GPUs: borrowed capacity goes to the highest bids, each paying the bid it needed to win
        ("erin", "grasp-rl", 2, 1, "elastic", "high", 3600, 900),
        ("bob", "segformer-ablation", 2, 1, "elastic", "normal", 2700, 300),
        ("dave", "distill-7b", 2, 1, "elastic", "normal", 3600, 650),
        ("alice", "vit-huge", 4, 2, "elastic", "normal", 7200, 400),  # 8 GPUs > 4: waits for approval
    ]
    # on the cloud cluster's H100s: one job pinned there by a required cluster label
    cloud = [("bob", "llm-pretrain-h100", 2, 1, "elastic", "high", 3600, 0, {"site": "cloud"}),
             ("alice", "sam-h100", 2, 1, "elastic", "normal", 1800, 0, {})] if h100 is not None else []
    for username, name, gpus, pods, tier, urgency, runtime, bid, *where in [*specs, *cloud]:
        job_submit(
            user=User.objects.get(username=username),
            data={"name": name, "image": "nvcr.io/nvidia/pytorch:24.05-py3",
                  "command": ["python", "train.py", "--config", f"{name}.yaml"], "env": {},
                  "flavor": h100 if where else a100, "cluster_selector": where[0] if where else {},
                  "gpus_per_pod": gpus, "pods": pods, "cpu_millicores": 8000, "memory_mib": 65536, "tier": tier,
                  "urgency": urgency, "task_type": "train", "deadline": None, "max_runtime_s": runtime, "bid": bid,
                  "termination_grace_s": 30, "pdb_min_available": None},
            idempotency_key=f"demo-{name}",
        )
