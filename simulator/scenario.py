"""Scenario files (YAML): the cluster, the departments and their quotas, policy overrides, the trace and how
to fill what the trace lacks (tiers, urgency, users, max runtime), and the target load.

See docs/simulator.md for the full format. ``load_scenario(path)`` returns a ``Scenario``; turning its trace into
the simulator's jobs is ``simulator.jobs`` (``prepare``, ``build_jobs``), which imports this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from fractions import Fraction
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from engine import ClusterInfo, Node, Policy, Quota, tiers
from engine.fractions import Share
from engine.shapes import CPU, CPU_KIND, MEMORY, resource_key
from engine.types import (
    CLUSTER_STATES,
    DEFAULT_CLUSTER,
    TIERS,
    URGENCIES,
    USER_TIERS,
    Booking,
    MaintenanceWindow,
    Role,
)

from . import trace as tr
from .errors import ScenarioError as ScenarioError  # re-exported: callers catch scenario.ScenarioError


@dataclass(frozen=True, slots=True)
class NodeGroup:
    name: str
    count: int
    gpus_per_node: int
    flavor: str
    labels: tuple[tuple[str, str], ...] = ()
    cluster: str = DEFAULT_CLUSTER
    # A CPU pool's group (``gpus_per_node`` 0): its nodes' whole cores and GiB, for the roles without GPUs.
    cores: int = 0
    memory_gib: int = 0

    @property
    def is_cpu(self) -> bool:
        return self.gpus_per_node == 0


@dataclass(frozen=True, slots=True)
class TopologySpec:
    levels: tuple[str, ...]
    slowdown: tuple[tuple[str, float], ...] = ()  # (level, factor) for the levels a spread gang pays for

    def factor(self, spread: str) -> float:
        """The run-time factor of a gang whose pods span more than one domain of ``spread`` (and so of every
        level inside it): the largest factor declared for that level or an inner one; 1 when compact."""
        if not spread:
            return 1.0
        inner = set(self.levels[self.levels.index(spread):])
        return max((f for level, f in self.slowdown if level in inner), default=1.0)


@dataclass(frozen=True, slots=True)
class FlavorQuota:
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class Department:
    name: str
    quotas: dict[str, FlavorQuota]
    budget: int | None = None
    members: dict[str, str] = field(default_factory=dict)  # user -> user tier
    # per-cluster quotas, (cluster, flavor) -> quota: limits the department's GPUs of that cluster only
    cluster_quotas: dict[tuple[str, str], FlavorQuota] = field(default_factory=dict)
    # a CPU pool's quotas, pool -> (cores, GiB), either None when the file leaves it out
    cpu_quotas: dict[str, tuple[FlavorQuota | None, FlavorQuota | None]] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job as the simulator sees it (immutable); ``duration_s`` is the true run time, already capped by
    ``max_runtime_s`` (the engine only ever sees ``max_runtime_s``)."""

    id: int
    key: str  # the trace's job_id
    submit: float
    duration_s: float
    pods: int
    gpus_per_pod: int
    department: str
    flavor: str
    tier: str = tiers.DEFAULT
    urgency: str = "normal"
    user: str = ""
    user_tier: str = "standard"
    deadline: float | None = None
    bid: int = 0
    max_runtime_s: float = 3600.0
    # This job's checkpoint interval; None = SimOptions.checkpoint_interval_s, 0 = never checkpoints.
    checkpoint_interval_s: float | None = None
    cluster_selector: tuple[tuple[str, str], ...] = ()  # cluster labels it requires
    cluster_preference: tuple[tuple[str, str], ...] = ()  # cluster labels it prefers
    # Sweeps: the array it is a task of and the array's throttle; what it waits for (condition, trace keys; a
    # key "@name" is every task of that array).
    array: str | None = None
    array_throttle: int | None = None
    after: tuple[tuple[str, tuple[str, ...]], ...] = ()
    preemptible: bool | None = None  # its own choice apart from its tier (None: its tier's)
    # The notice it declares before an eviction (None: SimOptions.notice_s; 0: none, evicted at once).
    notice_s: float | None = None
    # Its roles, as the engine takes them (``PendingJob.roles``): () for one role of ``pods`` x GPUs. ``pods`` x
    # ``gpus_per_pod`` is then its GPU gang (0 pods for a CPU-only job, whose ``flavor`` is a CPU pool).
    roles: tuple[Role, ...] = ()
    price_surcharge_pct: int = 0  # on its base price, in percent: a non-preemptible job's (the lab's limits)
    # A resizable job: it runs on ``min_pods`` to ``pods`` pods (None: always ``pods``); ``duration_s`` is its run
    # time at ``pods``, and each doubling of its size multiplies its speed by 2 x ``scaling_efficiency``.
    min_pods: int | None = None
    scaling_efficiency: float = 0.9
    # A fraction of one GPU per pod (the trace's ``gpu_fraction``; ``engine.fractions``): None, whole GPUs.
    share: Share | None = None

    @property
    def total_gpus(self) -> int | Fraction:
        """Its GPUs: whole ones, or its pods' shares of one (what quotas, holds and the ledger count)."""
        if self.share is None:
            return self.pods * self.gpus_per_pod
        return self.pods * self.share.gpus


REFILL_PERIODS = {"weekly": 7 * 86400.0, "monthly": 30 * 86400.0, "none": None}


@dataclass(frozen=True, slots=True)
class SimOptions:
    min_cycle_interval_s: float = 0.0  # cycles closer than this are merged into one at the later time
    tick_s: float | None = 300.0  # periodic cycle while jobs are pending (aging, cooldowns); None = off
    preemption_grace_s: float = 30.0  # a victim holds its GPUs this long after the eviction
    checkpoint_interval_s: float | None = 1800.0  # progress survives preemption at this granularity; None=lost
    follow_up_cycles: int = 2  # extra cycles at the same instant after a cycle that preempted with grace 0
    strict: bool = False  # raise on an invalid decision instead of counting and skipping it
    budget_refill: str = "weekly"  # departments' budgets are added again every period: weekly, monthly, none
    # Node failures: every node_failure_every_s of the trace (from its first submission) the next node in name
    # order fails, taking its running pods with it, and comes back node_repair_s later (None: no failures). A
    # fixed schedule, not a random one, so that two policies replay the same failures.
    node_failure_every_s: float | None = None
    node_repair_s: float = 3600.0
    # Notice before preemption: the notice a job that declares none gets (0: none, the victim is evicted at
    # once), and the part of its notice a job takes to write a checkpoint and answer (None: no job answers, so
    # each is evicted at its notice's end and keeps only its periodic checkpoints).
    notice_s: float = 0.0
    notice_answer: float | None = 0.5
    # Placement with the scenario's topology levels: "aware" passes them to the engine (gangs in the smallest
    # domain), "ignore" keeps them from it (placement as on a flat network) while the slowdown still applies.
    topology_placement: str = "aware"

    def __post_init__(self):
        if self.budget_refill not in REFILL_PERIODS:
            raise ScenarioError(f"simulation.budget_refill must be one of {', '.join(REFILL_PERIODS)}")
        if self.node_failure_every_s is not None and not self.node_failure_every_s > 0:
            raise ScenarioError("simulation.node_failure_every_s must be a positive number of seconds (or absent)")
        if not self.notice_s >= 0:
            raise ScenarioError("simulation.notice_s must be 0 or more seconds")
        if self.notice_answer is not None and not 0 <= self.notice_answer <= 1:
            raise ScenarioError("simulation.notice_answer must be a part of the notice, from 0 to 1 (or absent)")
        if not self.node_repair_s > 0:
            raise ScenarioError("simulation.node_repair_s must be a positive number of seconds")
        if self.topology_placement not in ("aware", "ignore"):
            raise ScenarioError("simulation.topology_placement must be 'aware' or 'ignore'")


@dataclass(frozen=True)
class Scenario:
    name: str
    node_groups: tuple[NodeGroup, ...]
    departments: dict[str, Department]
    policy_overrides: dict[str, Any]
    trace: dict[str, Any]
    assign: dict[str, Any]
    load: float | None = None  # target offered load (None = keep the trace's own arrival times)
    seed: int = 0
    options: SimOptions = SimOptions()
    auto_departments: dict[str, Any] | None = None  # quota shares derived from the trace
    base_dir: Path = Path(".")
    prices: dict[tuple[str, str], int] = field(default_factory=dict)  # (flavor, tier) -> base mcr per GPU-hour
    unfittable: str = "error"  # jobs no node set of their flavor can ever hold: "error" or "drop" (with a warning)
    # Several clusters (``clusters:``): their labels, state and cost rank; each node group names its cluster.
    # Empty for the single-cluster form (``cluster:``), whose nodes are all in the default cluster.
    clusters: tuple[ClusterInfo, ...] = ()
    # Topology (``topology:``): the levels every cluster declares (node label keys, outermost first) and the
    # slowdown of a gang whose pods span more than one domain of a level (label -> factor of its run time).
    topology: TopologySpec | None = None
    # The calendar (``bookings:``, ``maintenance:``; docs/bookings.md): windows in seconds from the trace's first
    # submission (the simulator shifts them onto its clock), to measure what bookings do to the waits.
    bookings: tuple[Booking, ...] = ()
    maintenance: tuple[MaintenanceWindow, ...] = ()

    # ---------------------------------------------------------------- cluster
    def nodes(self) -> tuple[Node, ...]:
        out = []
        for g in self.node_groups:
            width = len(str(max(g.count - 1, 0)))
            for i in range(g.count):
                out.append(
                    Node(name=f"{g.name}-{i:0{width}d}", flavor=g.flavor, gpus=g.gpus_per_node, labels=g.labels,
                         cluster=g.cluster, **({"kind": CPU_KIND, "cpu_m": g.cores * 1000,
                                                "memory_mib": g.memory_gib * 1024} if g.is_cpu else {}))
                )
        return tuple(out)

    def capacity(self, flavor: str | None = None) -> int:
        return sum(g.count * g.gpus_per_node for g in self.node_groups if flavor is None or g.flavor == flavor)

    def flavors(self) -> list[str]:
        """The GPU flavors, in the order of their first node group (the first is a trace row's default)."""
        seen: list[str] = []
        for g in self.node_groups:
            if g.flavor not in seen and not g.is_cpu:
                seen.append(g.flavor)
        return seen

    def cpu_pools(self) -> list[str]:
        """The CPU pools (flavors of CPU node groups), in the order of their first group."""
        return list(dict.fromkeys(g.flavor for g in self.node_groups if g.is_cpu))

    def node_size(self, flavor: str) -> int:
        return max((g.gpus_per_node for g in self.node_groups if g.flavor == flavor), default=1)

    def quotas(self) -> tuple[Quota, ...]:
        out = []
        for d in sorted(self.departments):
            for fl, q in sorted(self.departments[d].quotas.items()):
                out.append(Quota(d, fl, q.nominal, q.borrowing_limit, q.lending_limit))
            for (cluster, fl), q in sorted(self.departments[d].cluster_quotas.items()):
                out.append(Quota(d, fl, q.nominal, q.borrowing_limit, q.lending_limit, cluster))
            # the engine's book counts a pool's cores in millicores and its memory in MiB
            for fl, pair in sorted(self.departments[d].cpu_quotas.items()):
                for resource, q, unit in zip((CPU, MEMORY), pair, (1000, 1024), strict=True):
                    if q is not None:
                        out.append(Quota(d, resource_key(fl, resource), q.nominal * unit,
                                         None if q.borrowing_limit is None else q.borrowing_limit * unit,
                                         None if q.lending_limit is None else q.lending_limit * unit))
        return tuple(out)

    def policy(self) -> Policy:
        return make_policy(self.policy_overrides)

    def with_departments(self, departments: dict[str, Department]) -> Scenario:
        return replace(self, departments=departments)

    def budgets(self) -> dict[str, int]:
        """Departments that have a budget (the metered ones, as departments with a wallet in the portal)."""
        return {d: int(dep.budget) for d, dep in sorted(self.departments.items()) if dep.budget is not None}

    def fits(self, job: JobSpec) -> bool:
        """Whether the job fits the empty cluster: enough nodes of its flavor hold one pod each (gangs
        all-or-nothing, several pods may share a node). With several clusters, one cluster the job's selector
        matches must hold the whole gang (a gang never spans clusters)."""
        gpu_flavor = job.flavor if job.pods else None
        if not self.clusters:
            return fits_nodes(job, [g for g in self.node_groups if g.flavor == gpu_flavor], self.node_groups)
        labels = {c.name: set(c.labels) for c in self.clusters}
        return any(
            set(job.cluster_selector) <= labels[c] and fits_nodes(
                job, [g for g in self.node_groups if g.flavor == gpu_flavor and g.cluster == c],
                [g for g in self.node_groups if g.cluster == c])
            for c in labels
        )


def fits_nodes(job: JobSpec, groups, all_groups=()) -> bool:
    """Whether the GPU gang fits ``groups`` and every CPU role its pool's groups among ``all_groups`` (each pod
    on a node of its own size at least; pods of one role may share a node)."""
    for r in job.roles:
        if r.gpus_per_pod == 0:
            pool = [g for g in all_groups if g.flavor == r.flavor and g.is_cpu]
            slots = sum(g.count * min(g.cores * 1000 // max(r.cpu_m, 1), g.memory_gib * 1024 // max(r.memory_mib, 1))
                        for g in pool)
            if slots < r.pods:
                return False
    if job.pods == 0:
        return bool(job.roles)
    if job.gpus_per_pod <= 0:
        return False
    slots = sum(g.count * (g.gpus_per_node // job.gpus_per_pod) for g in groups)
    return slots >= job.pods


def make_policy(overrides: dict[str, Any] | None) -> Policy:
    """Build a core ``Policy`` from YAML overrides. ``weights`` may be given as ``{"critical/pi": 8}``."""
    kw = dict(overrides or {})
    if "weights" in kw:
        w = dict(Policy().weights)  # overrides merge into the engine's default matrix
        for k, v in dict(kw["weights"]).items():
            u, _, t = str(k).partition("/")
            if u not in URGENCIES or t not in USER_TIERS:
                raise ScenarioError(f"policy weight key {k!r} is not urgency/user_tier")
            w[(u, t)] = float(v)
        kw["weights"] = MappingProxyType(w)
    if "priority_classes" in kw:
        kw["priority_classes"] = MappingProxyType(dict(kw["priority_classes"]))
    valid = set(Policy.__dataclass_fields__)
    bad = set(kw) - valid
    if bad:
        raise ScenarioError(f"unknown policy field(s): {', '.join(sorted(bad))}")
    return Policy(**kw)


# -------------------------------------------------------------------- parsing


def _limit(v):
    return None if v is None else int(v)


def parse_scenario(data: dict[str, Any], *, base_dir: Path = Path(".")) -> Scenario:
    if not isinstance(data, dict):
        raise ScenarioError("scenario must be a mapping")
    clusters = _parse_clusters(data)
    groups = _parse_node_groups(data, clusters)
    depts, auto = _parse_departments(data.get("departments"), clusters)
    sim = _simulation_options(data)
    prices = _parse_prices(data)
    topology = _parse_topology(data)
    if topology is not None:  # every cluster declares the levels (the single-cluster form: its default cluster)
        clusters = (tuple(replace(c, topology_levels=topology.levels) for c in clusters)
                    or (ClusterInfo(DEFAULT_CLUSTER, topology_levels=topology.levels),))
    unfittable = str(data.get("unfittable", "error"))
    if unfittable not in ("error", "drop"):
        raise ScenarioError("unfittable must be 'error' or 'drop'")
    sc = Scenario(
        name=str(data.get("name") or "scenario"),
        node_groups=groups,
        departments=depts,
        policy_overrides=dict(data.get("policy") or {}),
        trace=dict(data.get("trace") or {}),
        assign=dict(data.get("assign") or {}),
        load=(data.get("load") or {}).get("target") if isinstance(data.get("load"), dict) else data.get("load"),
        seed=int(data.get("seed", 0)),
        options=SimOptions(**sim),
        auto_departments=auto,
        base_dir=base_dir,
        prices=prices,
        unfittable=unfittable,
        clusters=clusters,
        topology=topology,
    )
    sc = replace(sc, bookings=_parse_bookings(data, sc), maintenance=_parse_maintenance(data))
    sc.policy()  # validate early
    for key in ("cluster_selector", "cluster_preference"):
        for dept, labels in (sc.assign.get(key) or {}).items():
            if not isinstance(labels, dict):
                raise ScenarioError(f"assign.{key}.{dept} must map label keys to values")
    return sc


def _window(item: dict, what: str) -> tuple[float, float]:
    try:
        start, end = float(item["start_h"]) * 3600.0, float(item["end_h"]) * 3600.0
    except (KeyError, TypeError, ValueError) as e:
        raise ScenarioError(f"{what}: start_h and end_h are hours from the first submission") from e
    if not 0 <= start < end:
        raise ScenarioError(f"{what}: start_h must be at least 0 and before end_h")
    return start, end


def _parse_bookings(data: dict[str, Any], sc: Scenario) -> tuple[Booking, ...]:
    """``bookings: [{gpus, start_h, end_h, flavor?, cluster?, purpose?, departments: [..] | users: [..]}]``."""
    out = []
    flavors = sc.flavors()
    for n, item in enumerate(data.get("bookings") or (), start=1):
        what = f"bookings[{n - 1}]"
        if not isinstance(item, dict):
            raise ScenarioError(f"{what} must be a mapping")
        start, end = _window(item, what)
        flavor = str(item.get("flavor") or (flavors[0] if flavors else ""))
        cluster = str(item.get("cluster") or DEFAULT_CLUSTER)
        gpus = int(item.get("gpus", 0))
        if flavor not in flavors:
            raise ScenarioError(f"{what}: no node group offers flavor {flavor!r}")
        if gpus < 1 or gpus > sc.capacity(flavor):
            raise ScenarioError(f"{what}: gpus must be 1..{sc.capacity(flavor)} (the flavor's capacity)")
        depts, users = tuple(map(str, item.get("departments") or ())), tuple(map(str, item.get("users") or ()))
        if not depts and not users:
            raise ScenarioError(f"{what}: name its owners (departments or users)")
        out.append(Booking(n, cluster, flavor, gpus, start, end, str(item.get("purpose", "")), depts, users))
    return tuple(out)


def _parse_maintenance(data: dict[str, Any]) -> tuple[MaintenanceWindow, ...]:
    """``maintenance: [{start_h, end_h, nodes?: [..], selector?: {k: v}, cluster?, reason?}]``."""
    out = []
    for n, item in enumerate(data.get("maintenance") or (), start=1):
        what = f"maintenance[{n - 1}]"
        if not isinstance(item, dict):
            raise ScenarioError(f"{what} must be a mapping")
        start, end = _window(item, what)
        selector = item.get("selector") or {}
        if not isinstance(selector, dict):
            raise ScenarioError(f"{what}: selector maps label keys to values")
        out.append(MaintenanceWindow(n, str(item.get("cluster") or DEFAULT_CLUSTER), start, end,
                                     tuple(map(str, item.get("nodes") or ())),
                                     tuple(sorted((str(k), str(v)) for k, v in selector.items())),
                                     str(item.get("reason", ""))))
    return tuple(out)


def _parse_node_groups(data: dict[str, Any], clusters: tuple[ClusterInfo, ...]) -> tuple[NodeGroup, ...]:
    """The node groups of ``cluster:`` (all in the default cluster) or of each of ``clusters:``."""
    groups = []
    raw_groups = [(DEFAULT_CLUSTER, g) for g in (data.get("cluster") or {}).get("node_groups") or []]
    if clusters:
        raw_groups = [(str(c["name"]), g) for c in data["clusters"] for g in (c.get("node_groups") or [])]
    for i, (cluster, g) in enumerate(raw_groups):
        labels = tuple(sorted((str(k), str(v)) for k, v in (g.get("labels") or {}).items()))
        name = str(g.get("name") or f"g{i}")
        cpu = "cores" in g or "memory_gib" in g  # a CPU pool's group, sized in cores and GiB
        if cpu and ("gpus_per_node" in g or not (int(g.get("cores") or 0) > 0 and int(g.get("memory_gib") or 0) > 0)):
            raise ScenarioError(f"node group {name}: a CPU pool's group has cores and memory_gib above 0, and no "
                                "gpus_per_node")
        if cpu and not g.get("flavor"):
            raise ScenarioError(f"node group {name}: a CPU pool's group names its flavor (the pool)")
        groups.append(
            NodeGroup(
                name=name,
                count=int(g["count"]),
                gpus_per_node=0 if cpu else int(g["gpus_per_node"]),
                flavor=str(g.get("flavor") or "gpu"),
                labels=labels,
                cluster=cluster,
                cores=int(g.get("cores") or 0),
                memory_gib=int(g.get("memory_gib") or 0),
            )
        )
    if not groups:
        raise ScenarioError("clusters[].node_groups is empty" if clusters else "cluster.node_groups is empty")
    names = [g.name for g in groups]
    if len(set(names)) != len(names):
        raise ScenarioError("node group names must be unique across clusters (they name the nodes)")
    return tuple(groups)


def _parse_departments(raw_depts, clusters: tuple[ClusterInfo, ...]) -> tuple[dict[str, Department], dict | None]:
    """(departments, the ``auto:`` spec): departments listed by name, or ``{auto: ...}`` to derive from the
    trace (``resolve_departments``)."""
    if isinstance(raw_depts, dict) and "auto" in raw_depts:
        return {}, dict(raw_depts["auto"] or {})
    depts: dict[str, Department] = {}
    for name, d in (raw_depts or {}).items():
        depts[str(name)] = _parse_department(name, d or {}, clusters)
    return depts, None


def _parse_department(name, d: dict[str, Any], clusters: tuple[ClusterInfo, ...]) -> Department:
    quotas = {}
    cluster_quotas = {}
    cpu_quotas = {}
    for fl, q in (d.get("quotas") or {}).items():
        if isinstance(q, dict) and ({"cores", "memory_gib"} & set(q)):  # a CPU pool's, as in the lab file
            if set(q) - {"cores", "memory_gib"} or "@" in str(fl):
                raise ScenarioError(f"department {name}: quota {fl}: a CPU pool's quota is {{cores: ..., "
                                    "memory_gib: ...}, global only")
            cpu_quotas[str(fl)] = tuple(None if q.get(k) is None else FlavorQuota(
                int((q[k] if isinstance(q[k], dict) else {"nominal": q[k]}).get("nominal", 0)),
                _limit((q[k] if isinstance(q[k], dict) else {}).get("borrowing_limit")),
                _limit((q[k] if isinstance(q[k], dict) else {}).get("lending_limit"))) for k in ("cores", "memory_gib"))
            continue
        if isinstance(q, int | float):
            q = {"nominal": q}
        quota = FlavorQuota(
            int(q.get("nominal", 0)), _limit(q.get("borrowing_limit")), _limit(q.get("lending_limit"))
        )
        # "flavor@cluster": a per-cluster quota (the core's name for that scope)
        flavor, _, cluster = str(fl).partition("@")
        if cluster:
            if cluster not in {c.name for c in clusters}:
                raise ScenarioError(f"department {name}: quota {fl}: no cluster {cluster!r} in clusters")
            cluster_quotas[(cluster, flavor)] = quota
        else:
            quotas[flavor] = quota
    members = {str(u): str(t) for u, t in (d.get("members") or {}).items()}
    for u, t in members.items():
        if t not in USER_TIERS:
            raise ScenarioError(f"department {name}: member {u} has unknown tier {t}")
    return Department(str(name), quotas, d.get("budget"), members, cluster_quotas, cpu_quotas)


def _simulation_options(data: dict[str, Any]) -> dict[str, Any]:
    sim = data.get("simulation") or {}
    bad = set(sim) - set(SimOptions.__dataclass_fields__)
    if bad:
        raise ScenarioError(f"unknown simulation option(s): {', '.join(sorted(bad))}")
    return sim


def _parse_prices(data: dict[str, Any]) -> dict[tuple[str, str], int]:
    """``prices: {flavor: {tier: mcr per GPU-hour}}`` -> {(flavor, tier): mcr}."""
    prices: dict[tuple[str, str], int] = {}
    for fl, per in (data.get("prices") or {}).items():
        for tier, p in (per or {}).items():
            if tier not in TIERS:
                raise ScenarioError(f"prices.{fl}: unknown tier {tier!r}")
            if int(p) < 0:
                raise ScenarioError(f"prices.{fl}.{tier} must not be negative")
            prices[(str(fl), str(tier))] = int(p)
    return prices


def _parse_topology(data: dict[str, Any]) -> TopologySpec | None:
    """``topology: {levels: [label keys, outermost first], slowdown: {level: factor}}``; a slowdown's level is
    a label key of ``levels`` or its last part ("rack")."""
    raw = data.get("topology")
    if raw is None:
        return None
    if not isinstance(raw, dict) or set(raw) - {"levels", "slowdown"}:
        raise ScenarioError("topology must be a mapping of levels and slowdown")
    levels = raw.get("levels")
    if not isinstance(levels, list) or not levels or len(set(map(str, levels))) != len(levels):
        raise ScenarioError("topology.levels must be a non-empty list of distinct node label keys, outermost first")
    levels = tuple(str(k) for k in levels)
    slowdown = []
    for key, factor in (raw.get("slowdown") or {}).items():
        level = next((k for k in levels if key in (k, k.rsplit("/", 1)[-1])), None)
        if level is None:
            raise ScenarioError(f"topology.slowdown: {key!r} is not one of the levels ({', '.join(levels)})")
        if isinstance(factor, bool) or not isinstance(factor, int | float) or not factor >= 1:
            raise ScenarioError(f"topology.slowdown.{key} must be a factor of 1 or more")
        slowdown.append((level, float(factor)))
    return TopologySpec(levels, tuple(slowdown))


def _parse_clusters(data: dict[str, Any]) -> tuple[ClusterInfo, ...]:
    """``clusters:`` (several clusters, each with its node groups) or nothing (the single ``cluster:`` form)."""
    raw = data.get("clusters")
    if raw is None:
        return ()
    if data.get("cluster") is not None:
        raise ScenarioError("give either cluster: (one cluster) or clusters: (several), not both")
    if not isinstance(raw, list) or not raw:
        raise ScenarioError("clusters must be a non-empty list")
    out = []
    for c in raw:
        if not isinstance(c, dict) or not c.get("name"):
            raise ScenarioError("every cluster needs a name")
        state = str(c.get("state", "active"))
        if state not in CLUSTER_STATES:
            raise ScenarioError(f"cluster {c['name']}: state must be one of {', '.join(CLUSTER_STATES)}")
        labels = tuple(sorted((str(k), str(v)) for k, v in (c.get("labels") or {}).items()))
        out.append(ClusterInfo(str(c["name"]), labels, state, int(c.get("cost_rank", 0))))
    if len({c.name for c in out}) != len(out):
        raise ScenarioError("cluster names must be unique")
    return tuple(out)


def load_scenario(path: str | Path) -> Scenario:
    p = Path(path)
    with open(p) as fh:
        data = yaml.safe_load(fh)
    return parse_scenario(data, base_dir=p.parent)


# -------------------------------------------------------------------- departments from the trace


def resolve_departments(sc: Scenario, rows: list[tr.TraceRow], shares: dict[str, float] | None) -> Scenario:
    """Fill ``departments: {auto: ...}``: nominal quota per flavor proportional to the trace's shares (or equal
    shares), rounded by largest remainder so it sums to the capacity; borrowing/lending as given (default
    unlimited)."""
    if sc.auto_departments is None:
        return sc
    auto = sc.auto_departments
    names = sorted({r.department for r in rows if r.department})
    if auto.get("shares"):
        names = [n for n in names if n in auto["shares"]] if not shares else names
    fold = auto.get("fold_unknown_into")
    w = {}
    for n in names:
        if shares and n in shares:
            w[n] = float(shares[n])
        elif shares and fold:
            w[fold] = float(auto.get("unknown_share", min(shares.values())))
        else:
            w[n] = 1.0
    for n, s in (auto.get("shares") or {}).items():
        w[str(n)] = float(s)
    depts = {}
    borrow = auto.get("borrowing_limit")
    lend = auto.get("lending_limit")
    per_flavor = {fl: _largest_remainder(w, sc.capacity(fl)) for fl in sc.flavors()}
    for n in sorted(w):
        q = {fl: FlavorQuota(per_flavor[fl][n], _limit(borrow), _limit(lend)) for fl in sc.flavors()}
        depts[n] = Department(n, q, auto.get("budget"), {})
    return sc.with_departments(depts)


def _largest_remainder(weights: dict[str, float], total: int) -> dict[str, int]:
    s = sum(weights.values()) or 1.0
    exact = {k: total * v / s for k, v in weights.items()}
    out = {k: int(math.floor(v)) for k, v in exact.items()}
    left = total - sum(out.values())
    for k in sorted(exact, key=lambda k: (-(exact[k] - out[k]), k))[:left]:
        out[k] += 1
    return out


def fold_departments(sc: Scenario, rows: list[tr.TraceRow]) -> list[tr.TraceRow]:
    """Rename trace departments the scenario does not know to ``auto.fold_unknown_into`` (if set)."""
    fold = (sc.auto_departments or {}).get("fold_unknown_into")
    if not fold:
        return rows
    known = set(sc.departments)
    return [r if r.department in known else replace(r, department=fold) for r in rows]
