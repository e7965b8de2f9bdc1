"""Fluent builders for core snapshots: ``Snap().nodes(2).quota("A", 8).pending(job(1)).decide()``."""

from __future__ import annotations

from dataclasses import replace

from engine import schedule
from engine.policy import DEFAULT_POLICY
from engine.types import (
    Booking,
    ClusterInfo,
    CycleResult,
    DisruptionBudget,
    MaintenanceWindow,
    Node,
    PendingJob,
    Policy,
    Quota,
    RunningJob,
    Snapshot,
    TeamQuota,
    UserLimit,
)

NOW = 100_000.0
BLOCK, RACK, HOST = "topology.kubernetes.io/block", "topology.kubernetes.io/rack", "kubernetes.io/hostname"
LEVELS = (BLOCK, RACK, HOST)


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
        self._teams: list[TeamQuota] = []
        self._team_usage: dict[tuple[str, str], float] = {}
        self._bookings: list[Booking] = []
        self._maintenance: list[MaintenanceWindow] = []

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

    def topology(self, cluster: str, *levels: str) -> Snap:
        """Declare ``cluster``'s topology levels (node label keys, outermost first)."""
        known = {c.name: c for c in self._clusters}
        info = known.get(cluster, ClusterInfo(cluster))
        self._clusters = [c for c in self._clusters if c.name != cluster] + [replace(info, topology_levels=levels)]
        return self

    def racks(self, *racks: int, gpus: int = 8, block: str = "b0", prefix: str = "r") -> Snap:
        """Racks of nodes (``racks[k]`` nodes in rack ``{prefix}{k}``), named ``{prefix}{k}n{i}`` and labelled
        with their block, rack and hostname, on the default cluster."""
        for k, count in enumerate(racks):
            rack = f"{prefix}{k}"
            for i in range(count):
                name = f"{rack}n{i}"
                self._nodes.append(node(name, gpus=gpus, labels=((BLOCK, block), (RACK, rack), (HOST, name))))
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

    def team(self, dept: str, team: str, nominal: int, flavor: str = "a100", borrow: int | None = None,
             lend: int | None = None) -> Snap:  # fmt: skip
        """A team's split of its department's quota of ``flavor``."""
        self._teams.append(TeamQuota(dept, team, flavor, nominal, borrow, lend))
        return self

    def team_usage(self, dept: str, team: str, seconds: float) -> Snap:
        self._team_usage[(dept, team)] = seconds
        return self

    def booking(self, id: int, gpus: int, start: float, end: float, *, flavor: str = "a100", cluster: str = "default",
                purpose: str = "", departments: tuple[str, ...] = (), users: tuple[str, ...] = (),
                teams: tuple[str, ...] = ()) -> Snap:
        """GPUs booked from ``start`` to ``end`` (seconds, absolute) for ``departments``, ``users`` or ``teams``
        (``department/team``)."""
        self._bookings.append(Booking(id, cluster, flavor, gpus, start, end, purpose, departments, users, teams))
        return self

    def maintenance(self, id: int, start: float, end: float, *, nodes: tuple[str, ...] = (), cluster: str = "default",
                    reason: str = "", **selector: str) -> Snap:
        """A maintenance window on ``nodes``, the nodes with every label of ``selector``, or the whole cluster."""
        self._maintenance.append(MaintenanceWindow(id, cluster, start, end, tuple(nodes),
                                                   tuple(sorted(selector.items())), reason))
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
            team_quotas=tuple(self._teams),
            team_usage=dict(self._team_usage),
            bookings=tuple(self._bookings),
            maintenance=tuple(self._maintenance),
        )

    def decide(self) -> Result:
        return Result(schedule(self.build()))
