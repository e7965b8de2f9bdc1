"""Fluent builders for core snapshots: ``Snap().nodes(2).quota("A", 8).pending(job(1)).decide()``."""

from __future__ import annotations

from dataclasses import replace

from scheduling.core import schedule
from scheduling.core.policy import DEFAULT_POLICY
from scheduling.core.types import (
    ClusterInfo,
    CycleResult,
    DisruptionBudget,
    Node,
    PendingJob,
    Policy,
    Quota,
    RunningJob,
    Snapshot,
    UserLimit,
)

NOW = 100_000.0


def node(name: str, flavor: str = "a100", gpus: int = 8, **kw) -> Node:
    return Node(name=name, flavor=flavor, gpus=gpus, **kw)


def job(id: int, dept: str = "A", flavor: str = "a100", gpus: int = 1, pods: int = 1, **kw) -> PendingJob:
    kw.setdefault("submitted_at", NOW)
    return PendingJob(id=id, department=dept, flavor=flavor, pods=pods, gpus_per_pod=gpus, **kw)


def run(
    id: int,
    dept: str = "A",
    on: tuple[str, ...] | str = ("n0",),
    gpus: int = 1,
    flavor: str = "a100",
    tier: str = "elastic",
    ran: float = 3600.0,
    **kw,
) -> RunningJob:
    placement = (on,) if isinstance(on, str) else tuple(on)
    kw.setdefault("submitted_at", NOW - ran)
    return RunningJob(
        id=id,
        department=dept,
        flavor=flavor,
        tier=tier,
        placement=placement,
        gpus_per_pod=gpus,
        started_at=NOW - ran,
        **kw,
    )


class Result:
    """A CycleResult with lookups for assertions."""

    def __init__(self, result: CycleResult):
        self.raw = result
        self.admitted = {a.job_id: a for a in result.admissions}
        self.reason = {r.job_id: r for r in result.pending}
        self.victims = {v for p in result.preemptions for v in p.victim_ids}

    def code(self, job_id: int) -> str:
        return "admitted" if job_id in self.admitted else self.reason[job_id].code

    def placement(self, job_id: int) -> tuple[str, ...]:
        return self.admitted[job_id].placement


class Snap:
    def __init__(self, now: float = NOW):
        self._now = now
        self._nodes: list[Node] = []
        self._running: list[RunningJob] = []
        self._pending: list[PendingJob] = []
        self._quotas: list[Quota] = []
        self._budgets: list[DisruptionBudget] = []
        self._policy: Policy = DEFAULT_POLICY
        self._credits = None
        self._usage: dict[str, float] = {}
        self._recent = 0
        self._clusters: list[ClusterInfo] = []
        self._limits: list[UserLimit] = []

    def nodes(self, count: int, flavor: str = "a100", gpus: int = 8, prefix: str = "n", **kw) -> Snap:
        start = sum(1 for n in self._nodes if n.name.startswith(prefix))
        self._nodes += [node(f"{prefix}{start + i}", flavor, gpus, **kw) for i in range(count)]
        return self

    def node(self, *args, **kw) -> Snap:
        self._nodes.append(node(*args, **kw))
        return self

    def quota(self, dept: str, nominal: int, flavor: str = "a100", borrow: int | None = None,
              lend: int | None = None, cluster: str | None = None) -> Snap:  # fmt: skip
        self._quotas.append(Quota(dept, flavor, nominal, borrow, lend, cluster))
        return self

    def cluster(self, name: str, state: str = "active", cost_rank: int = 0, **labels: str) -> Snap:
        self._clusters.append(ClusterInfo(name, tuple(sorted(labels.items())), state, cost_rank))
        return self

    def running(self, *jobs: RunningJob) -> Snap:
        self._running += jobs
        return self

    def pending(self, *jobs: PendingJob) -> Snap:
        self._pending += jobs
        return self

    def policy(self, **changes) -> Snap:
        self._policy = replace(self._policy, **changes)
        return self

    def credits(self, **credits: int) -> Snap:
        self._credits = dict(credits)
        return self

    def usage(self, **usage: float) -> Snap:
        self._usage = dict(usage)
        return self

    def budget(self, name: str, allowed: int) -> Snap:
        self._budgets.append(DisruptionBudget(name, allowed))
        return self

    def limit(self, dept: str, max_gpus: int, user: str | None = None) -> Snap:
        """A member's GPU limit (``user`` None: every member of ``dept`` without one of their own)."""
        self._limits.append(UserLimit(dept, user, max_gpus))
        return self

    def recent_preemptions(self, count: int) -> Snap:
        self._recent = count
        return self

    def build(self) -> Snapshot:
        return Snapshot(
            now=self._now,
            nodes=tuple(self._nodes),
            running=tuple(self._running),
            pending=tuple(self._pending),
            quotas=tuple(self._quotas),
            policy=self._policy,
            credits=self._credits,
            usage=self._usage,
            disruption_budgets=tuple(self._budgets),
            recent_preemptions=self._recent,
            clusters=tuple(self._clusters),
            user_limits=tuple(self._limits),
        )

    def decide(self) -> Result:
        return Result(schedule(self.build()))
