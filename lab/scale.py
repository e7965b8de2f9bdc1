"""Seed a database with a lab's worth of history, to measure the pages at scale (``manage.py seed_scale``).

The lab's structure (flavors, clusters, quotas, prices, wallets, the demo's departments and members) comes from
the demo's lab file, through the same services as ``manage.py demo``; extra departments are made by
``department_create`` and ``wallet_create``. The volume (users, memberships, jobs, their timelines and ledger
rows) is written with ``bulk_create`` in batches, because going through the submission service would take
hours for 100,000 jobs and the pages read rows, not how they were made.

The rows are deterministic (a seeded random generator) and plausible: most jobs finished long ago, a few
percent wait, a handful hold GPUs. Ledger rows satisfy the ledger's check constraints, but wallet balances are
not reconciled with them: this is a data set to load pages against, not an accounting history."""

from __future__ import annotations

import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.db import connection, transaction
from django.utils import timezone

from lab.demo import USERS
from lab.demo import seed as demo_seed
from lab.services.departments import department_create
from portal.models import Department, Membership, Role, UserTier
from quotas.models import Flavor, LedgerEntry, LedgerKind, Wallet
from quotas.services.wallets import wallet_create
from scheduling.models import Cluster, Job, JobEvent, JobState

USER_PREFIX = "scale-u"
DEPARTMENT_PREFIX = "scale-d"
JOB_PREFIX = "scale-"

# (state, weight): a lab's history is mostly finished work; a few percent wait and a handful run.
STATES = [
    (JobState.SUCCEEDED, 700), (JobState.FAILED, 90), (JobState.CANCELLED, 90), (JobState.QUEUED, 80),
    (JobState.PENDING_APPROVAL, 15), (JobState.PREEMPTED, 5), (JobState.RUNNING, 15), (JobState.ADMITTED, 5),
]
TIERS = [("elastic", 70), ("backfill", 20), ("realtime", 10)]
URGENCIES = [("normal", 70), ("high", 15), ("low", 10), ("critical", 5)]
NAMES = ["resnet50", "llama-lora", "detr-finetune", "vit-huge", "tokenizer-prep", "eval-server", "grasp-rl",
         "distill-7b", "segformer", "policy-sweep", "whisper-ft", "sam-h100"]
GPU_SHAPES = [(1, 1), (1, 1), (2, 1), (2, 1), (4, 1), (8, 1), (4, 2)]
RATE = 2000  # mcr per GPU-hour, the demo's elastic price


class RealUsersPresent(Exception):
    """The database holds accounts this command did not make: seeding would mix fake history into a lab's."""


@dataclass(frozen=True)
class Seeded:
    departments: int
    users: int
    jobs: int
    events: int
    ledger: int


def real_users() -> list[str]:
    """Usernames that neither the demo nor this command created (a few, for the refusal's message)."""
    demo = [u for u, *_ in USERS]
    User = get_user_model()
    return list(User.objects.exclude(username__startswith=USER_PREFIX).exclude(username__in=demo)
                .order_by("username").values_list("username", flat=True)[:5])


def seed_scale(*, jobs: int, departments: int = 12, users: int = 300, batch: int = 5000, force: bool = False,
               now: datetime | None = None, rng_seed: int = 0) -> Seeded:
    """Top the database up to ``jobs`` seeded jobs (jobs it made before count, so a second run adds nothing),
    in ``departments`` extra departments and ``users`` extra users. Refuses (``RealUsersPresent``) when the
    database has accounts of its own, unless ``force``."""
    if not force and (names := real_users()):
        raise RealUsersPresent(names)
    now = now or timezone.now()
    rng = random.Random(rng_seed)
    demo_seed(jobs=False)
    depts = _departments(departments)
    members = _users(users, depts, rng)
    flavors = list(Flavor.objects.order_by("id"))
    cluster = Cluster.objects.order_by("-is_default", "id").first()
    wallets = dict(Wallet.objects.values_list("department_id", "id"))
    made = Job.objects.filter(name__startswith=JOB_PREFIX).count()
    events = ledger = 0
    for start in range(made, jobs, batch):
        size = min(batch, jobs - start)
        with transaction.atomic():
            rows = Job.objects.bulk_create(
                [_job(rng, members, flavors, cluster, now) for _ in range(size)], batch_size=1000)
            e = JobEvent.objects.bulk_create(_events(rows), batch_size=2000)
            ledger_rows = LedgerEntry.objects.bulk_create(_ledger(rows, wallets), batch_size=2000)
        events += len(e)
        ledger += len(ledger_rows)
    if connection.vendor == "postgresql":  # fresh statistics: plans made for empty tables are wrong for 100k rows
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE")
    return Seeded(departments=len(depts), users=len(members), jobs=max(jobs - made, 0), events=events,
                  ledger=ledger)


def _departments(count: int) -> list[Department]:
    for n in range(count):
        slug = f"{DEPARTMENT_PREFIX}{n:02d}"
        if not Department.objects.filter(slug=slug).exists():
            with transaction.atomic():
                dept = department_create(actor=None, slug=slug, name=f"Scale department {n}")
                wallet_create(department=dept, balance=10_000_000_000)
    depts = list(Department.objects.filter(archived_at__isnull=True).order_by("id"))
    for dept in depts:  # the ledger rows need every department's wallet; a lab file may leave one out
        wallet_create(department=dept)
    return depts


def _users(count: int, depts: list[Department], rng: random.Random) -> list[tuple[int, int]]:
    """(user id, department id) of every member, seeded ones made here with a membership each."""
    User = get_user_model()
    have = set(User.objects.filter(username__startswith=USER_PREFIX).values_list("username", flat=True))
    new = [User(username=f"{USER_PREFIX}{n:05d}", email=f"{USER_PREFIX}{n:05d}@example.org")
           for n in range(count) if f"{USER_PREFIX}{n:05d}" not in have]
    for user in new:
        user.set_unusable_password()
    with transaction.atomic():
        made = User.objects.bulk_create(new, batch_size=1000)
        Membership.objects.bulk_create(
            [Membership(user=u, department=rng.choice(depts), role=Role.RESEARCHER,
                        user_tier=rng.choice([UserTier.STANDARD] * 6 + [UserTier.SENIOR, UserTier.PI])) for u in made],
            batch_size=1000)
    return list(Membership.objects.filter(department__archived_at__isnull=True)
                .order_by("user_id").values_list("user_id", "department_id"))


def _pick(rng: random.Random, table: list[tuple]) -> str:
    return rng.choices([v for v, _ in table], weights=[w for _, w in table])[0]


def _job(rng: random.Random, members, flavors, cluster, now: datetime) -> Job:
    owner_id, dept_id = rng.choice(members)
    state = _pick(rng, STATES)
    gpus, pods = rng.choice(GPU_SHAPES)
    submitted = now - timedelta(seconds=rng.randint(60, 90 * 86400))
    started = submitted + timedelta(seconds=rng.randint(5, 3600))
    ran = state in (JobState.SUCCEEDED, JobState.FAILED, JobState.RUNNING, JobState.ADMITTED)
    final = state in (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)
    finished = started + timedelta(seconds=rng.randint(60, 6 * 3600)) if final else None
    return Job(
        owner_id=owner_id, department_id=dept_id, name=f"{JOB_PREFIX}{rng.choice(NAMES)}-{rng.randint(1, 9999)}",
        image="pytorch/pytorch:2.3.0-cuda12.1-cudnn8-runtime", command=["python", "train.py"],
        flavor=rng.choice(flavors), gpus_per_pod=gpus, pods=pods, tier=_pick(rng, TIERS),
        urgency=_pick(rng, URGENCIES), state=state, submitted_at=submitted, queued_at=submitted,
        admitted_at=started if ran else None, started_at=started if ran and state != JobState.ADMITTED else None,
        finished_at=finished if final else None,
        exit_code=(0 if state == JobState.SUCCEEDED else 1 if state == JobState.FAILED else None),
        cluster=cluster if state in (JobState.RUNNING, JobState.ADMITTED) else None,
        reason_code="seeded" if state in (JobState.QUEUED, JobState.PREEMPTED) else "",
    )


def _events(jobs: list[Job]) -> list[JobEvent]:
    rows = []
    for job in jobs:
        rows.append(JobEvent(job_id=job.pk, at=job.submitted_at, kind="transition", to_state=JobState.QUEUED,
                             message="submitted"))
        if job.admitted_at:
            rows.append(JobEvent(job_id=job.pk, at=job.admitted_at, kind="transition",
                                 from_state=JobState.QUEUED, to_state=JobState.ADMITTED, message="admitted"))
        if job.finished_at:
            rows.append(JobEvent(job_id=job.pk, at=job.finished_at, kind="transition",
                                 from_state=JobState.RUNNING if job.admitted_at else JobState.QUEUED,
                                 to_state=job.state, message=job.state))
    return rows


def _ledger(jobs: list[Job], wallets: dict[int, int]) -> list[LedgerEntry]:
    """A hold at admission and, for finished runs, a settle of what the run used."""
    rows = []
    balance = 10_000_000_000
    for job in jobs:
        if not job.admitted_at:
            continue
        gpus = job.gpus_per_pod * job.pods
        hold = gpus * RATE
        common = dict(wallet_id=wallets[job.department_id], job_id=job.pk, attempt=1, user_id=job.owner_id,
                      flavor_id=job.flavor_id, rate=RATE, gpus=gpus)
        rows.append(LedgerEntry(kind=LedgerKind.HOLD, held_change=hold, balance_after=balance, held_after=hold,
                                idempotency_key=f"seed:hold:{job.pk}:1", created_at=job.admitted_at, **common))
        if job.finished_at and job.started_at:
            seconds = int((job.finished_at - job.started_at).total_seconds()) * gpus
            cost = min(hold, seconds * RATE // 3600)
            rows.append(LedgerEntry(kind=LedgerKind.SETTLE, amount=-cost, held_change=-cost,
                                    balance_after=balance - cost, held_after=hold - cost, gpu_seconds=seconds,
                                    outcome=job.state, idempotency_key=f"seed:settle:{job.pk}:1",
                                    created_at=job.finished_at, **common))
    return rows
