"""The demo's gentle, endless workload: a few jobs a minute from the demo's researchers, so what a newcomer sees
keeps moving once the seeded jobs are done.

``manage.py demo`` runs ``manage.py demo_workload`` as a supervised child beside the worker and beat (turn it
off with ``--no-workload``). Each ``step()`` may submit one job drawn from a realistic mix (three departments,
elastic and backfill work, a few bids, H100 jobs on the cloud cluster, a realtime job now and then, an
occasional failure) through the same validation and service as ``POST /api/v1/jobs``
(``JobSubmitSerializer``, then ``job_submit``), as the job's owner, so quotas, ceilings, per-user limits and
approval rules apply to it exactly as to a person. It submits nothing while the lab already has
``max_queued`` jobs waiting (queued or awaiting approval), so the queue stays short whatever the cluster does.

A demo left running for hours spends its small budgets (robotics starts with 15 credits and a weekly refill),
and a department with no credits left would fill the capped queue with jobs that never start, stalling the
workload for every department; so when a department's available credits fall under ``TOP_UP_BELOW`` the
platform admin grants it ``TOP_UP`` through the wallet service (an audited adjustment in its ledger, as an
admin would make from the Budgets page).

Time comes from the simulated cluster's clock (``scheduling.backends.clock.sim_clock``), so a test drives the
workload by advancing that clock and calling ``step()``; nothing here sleeps.
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.core.exceptions import ObjectDoesNotExist
from rest_framework.exceptions import ValidationError

from lab.demo import USERS
from portal.api.serializers import validated
from portal.errors import PortalError
from portal.models import Role
from quotas.models import Wallet
from quotas.services.wallets import wallet_adjust
from scheduling.api.serializers import JobSubmitSerializer
from scheduling.backends.clock import Clock, sim_clock
from scheduling.models import Job
from scheduling.services.jobs import WAITING_STATES, job_submit

log = logging.getLogger(__name__)

DEFAULT_RATE_PER_MIN = 4.0
DEFAULT_MAX_QUEUED = 6
FAILURE_SHARE = 0.06  # of jobs exit with an error part-way (SIM_EXIT_CODE), as real work sometimes does
TOP_UP_BELOW = 5_000  # mcr: 5 credits, under every seeded balance, so a fresh demo starts with none
TOP_UP = 50_000
IMAGE = "nvcr.io/nvidia/pytorch:24.05-py3"


@dataclass(frozen=True)
class Spec:
    """One kind of job in the mix. Sizes, urgencies and bids are drawn from the tuples; run times (simulated
    seconds: 30-90 real seconds by default at SIM_SPEEDUP 60) from the range."""

    weight: int
    user: str
    name: str
    gpus: tuple[int, ...]
    tier: str = "elastic"
    urgency: tuple[str, ...] = ("normal",)
    task_type: str = "train"
    runtime_s: tuple[int, int] = (1800, 5400)
    bids: tuple[int, ...] = (0,)
    flavor: str = "a100-80gb"


# Every spec fits the shipped demo lab (lab/fixtures/demo-lab.yaml) without approval: vision's jobs stay at or
# under its 4-GPU approval threshold, robotics (whose realtime work needs approval) submits no realtime job,
# and only vision and nlp, which hold H100 quota, use the cloud cluster.
MIX = (
    Spec(8, "bob", "resnet50-sweep", (1, 1, 2), urgency=("low", "normal", "normal")),
    Spec(4, "alice", "detr-finetune", (2, 4), urgency=("normal", "high"), runtime_s=(2700, 7200), bids=(0, 0, 400)),
    Spec(6, "dave", "llama-lora", (1, 2), urgency=("normal", "normal", "high"), bids=(0, 200, 600)),
    Spec(3, "carol", "tokenize-shard", (1,), tier="backfill", urgency=("low",), task_type="processing",
         runtime_s=(900, 2700)),
    Spec(6, "erin", "policy-sweep", (1,), tier="backfill", urgency=("low", "normal")),
    Spec(3, "erin", "grasp-rl", (1, 2), urgency=("high",), runtime_s=(2700, 7200), bids=(300, 900)),
    Spec(2, "bob", "vit-h100", (2,), flavor="h100"),
    Spec(2, "dave", "llm-eval-h100", (1, 2), flavor="h100", task_type="inference", runtime_s=(900, 2700)),
    Spec(2, "carol", "eval-server", (1,), tier="realtime", urgency=("high", "critical"), task_type="inference",
         runtime_s=(600, 1200)),
    Spec(1, "alice", "demo-inference", (1,), tier="realtime", urgency=("high",), task_type="inference",
         runtime_s=(600, 900)),
)


def waiting_jobs() -> int:
    """Jobs of the whole lab still waiting to start: queued or awaiting approval, anyone's."""
    return Job.objects.filter(state__in=WAITING_STATES).count()


class DemoWorkload:
    """Submits about ``rate_per_min`` jobs a minute (gaps drawn between half and one and a half times the mean),
    never while ``max_queued`` jobs wait. ``rng`` makes a run repeatable; ``clock`` defaults to the simulated
    cluster's."""

    def __init__(self, *, rate_per_min: float = DEFAULT_RATE_PER_MIN, max_queued: int = DEFAULT_MAX_QUEUED,
                 rng: random.Random | None = None, clock: Clock | None = None, mix: tuple[Spec, ...] = MIX):
        if rate_per_min <= 0:
            raise ValueError("rate_per_min must be positive")
        if max_queued < 1:
            raise ValueError("max_queued must be at least 1")
        self.rate_per_min = rate_per_min
        self.max_queued = max_queued
        self.rng = rng or random.Random()
        self.clock = clock or sim_clock()
        self.mix = mix
        self.next_at: datetime | None = None
        self.counts = {"submitted": 0, "full": 0, "refused": 0, "topped_up": 0}

    def step(self) -> str:
        """One tick: "wait" before the next submission is due, "full" when the queue is at its cap, "refused"
        when the service said no (a limit, a quota ceiling, an archived department, a missing user), else
        "submitted". At most one job per call, whatever time passed since the last: no catch-up bursts."""
        now = self.clock.now()
        if self.next_at is None:
            self.next_at = now
        if now < self.next_at:
            return "wait"
        mean_s = 60.0 / self.rate_per_min
        self.next_at = now + timedelta(seconds=self.rng.uniform(0.5, 1.5) * mean_s)
        if waiting_jobs() >= self.max_queued:
            self.counts["full"] += 1
            return "full"
        spec = self.rng.choices(self.mix, weights=[s.weight for s in self.mix])[0]
        try:
            self._top_up(spec.user)
            submit(spec, self.body(spec))
        except (PortalError, ValidationError, ObjectDoesNotExist) as exc:
            self.counts["refused"] += 1
            log.warning("demo workload: %s's %s was refused: %s", spec.user, spec.name, _why(exc))
            return "refused"
        self.counts["submitted"] += 1
        return "submitted"

    def body(self, spec: Spec) -> dict:
        """The REST body of one job of ``spec`` (what ``POST /api/v1/jobs`` would receive)."""
        rng = self.rng
        runtime = rng.randrange(spec.runtime_s[0], spec.runtime_s[1] + 1, 60)
        body = {"name": f"{spec.name}-{rng.randrange(1000):03d}", "image": IMAGE,
                "command": ["python", "train.py", "--config", f"{spec.name}.yaml"], "flavor": spec.flavor,
                "gpus": rng.choice(spec.gpus), "tier": spec.tier, "urgency": rng.choice(spec.urgency),
                "task_type": spec.task_type, "max_runtime_s": runtime, "bid": rng.choice(spec.bids)}
        if rng.random() < FAILURE_SHARE:  # the simulated pod exits 1 part-way through
            body["env"] = {"SIM_EXIT_CODE": "1", "SIM_DURATION_S": str(int(runtime * rng.uniform(0.1, 0.6)))}
        return body

    def _top_up(self, username: str) -> None:
        """Grant the submitter's department TOP_UP credits, as the platform admin, once its available credits
        are under TOP_UP_BELOW (a department without a wallet is not metered: nothing to do)."""
        User = get_user_model()
        wallet = Wallet.objects.filter(department__members__user__username=username).first()
        if wallet is None or wallet.available >= TOP_UP_BELOW:
            return
        admin = User.objects.filter(username__in=[u for u, _d, role, _t in USERS if role == Role.PLATFORM_ADMIN]
                                    ).first()
        if admin is None:
            return
        wallet_adjust(department=wallet.department, amount=TOP_UP, actor=admin,
                      comment="demo workload: budget top-up, so the demo's simulated hours never run it dry")
        self.counts["topped_up"] += 1


def submit(spec: Spec, body: dict) -> Job:
    """``body`` submitted as ``spec.user`` exactly as the API submits it: validated by the API's serializer,
    then the submission service (which checks membership, quota ceiling, the member's limits and approval)."""
    user = get_user_model().objects.get(username=spec.user)
    job, _created = job_submit(user=user, data=validated(JobSubmitSerializer, body))
    return job


def _why(exc: Exception) -> str:
    fields = getattr(exc, "fields", None) or getattr(exc, "detail", None)
    return f"{exc} {fields}" if fields and not isinstance(exc, ValidationError) else str(exc)
