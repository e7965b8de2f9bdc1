"""Scenario files (YAML): the cluster, the departments and their quotas, policy overrides, the trace and how
to fill what the trace lacks (tiers, urgency, users, max runtime), and the target load.

See docs/simulator.md for the full format. ``load_scenario(path)`` returns a ``Scenario``; turning its trace into
the simulator's jobs is ``scheduling.sim.jobs`` (``prepare``, ``build_jobs``), which imports this module.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import MappingProxyType
from typing import Any

import yaml

from scheduling.core import ClusterInfo, Node, Policy, Quota, tiers
from scheduling.core.types import CLUSTER_STATES, DEFAULT_CLUSTER, TIERS, URGENCIES, USER_TIERS

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

    @property
    def total_gpus(self) -> int:
        return self.pods * self.gpus_per_pod


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

    def __post_init__(self):
        if self.budget_refill not in REFILL_PERIODS:
            raise ScenarioError(f"simulation.budget_refill must be one of {', '.join(REFILL_PERIODS)}")


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

    # ---------------------------------------------------------------- cluster
    def nodes(self) -> tuple[Node, ...]:
        out = []
        for g in self.node_groups:
            width = len(str(max(g.count - 1, 0)))
            for i in range(g.count):
                out.append(
                    Node(name=f"{g.name}-{i:0{width}d}", flavor=g.flavor, gpus=g.gpus_per_node, labels=g.labels,
                         cluster=g.cluster)  # fmt: skip
                )
        return tuple(out)

    def capacity(self, flavor: str | None = None) -> int:
        return sum(g.count * g.gpus_per_node for g in self.node_groups if flavor is None or g.flavor == flavor)

    def flavors(self) -> list[str]:
        seen: list[str] = []
        for g in self.node_groups:
            if g.flavor not in seen:
                seen.append(g.flavor)
        return seen

    def node_size(self, flavor: str) -> int:
        return max((g.gpus_per_node for g in self.node_groups if g.flavor == flavor), default=1)

    def quotas(self) -> tuple[Quota, ...]:
        out = []
        for d in sorted(self.departments):
            for fl, q in sorted(self.departments[d].quotas.items()):
                out.append(Quota(d, fl, q.nominal, q.borrowing_limit, q.lending_limit))
            for (cluster, fl), q in sorted(self.departments[d].cluster_quotas.items()):
                out.append(Quota(d, fl, q.nominal, q.borrowing_limit, q.lending_limit, cluster))
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
        groups = [g for g in self.node_groups if g.flavor == job.flavor]
        if not self.clusters:
            return fits_nodes(job, groups)
        labels = {c.name: set(c.labels) for c in self.clusters}
        return any(
            set(job.cluster_selector) <= labels[c] and fits_nodes(job, [g for g in groups if g.cluster == c])
            for c in labels
        )


def fits_nodes(job: JobSpec, groups) -> bool:
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
    )
    sc.policy()  # validate early
    for key in ("cluster_selector", "cluster_preference"):
        for dept, labels in (sc.assign.get(key) or {}).items():
            if not isinstance(labels, dict):
                raise ScenarioError(f"assign.{key}.{dept} must map label keys to values")
    return sc


def _parse_node_groups(data: dict[str, Any], clusters: tuple[ClusterInfo, ...]) -> tuple[NodeGroup, ...]:
    """The node groups of ``cluster:`` (all in the default cluster) or of each of ``clusters:``."""
    groups = []
    raw_groups = [(DEFAULT_CLUSTER, g) for g in (data.get("cluster") or {}).get("node_groups") or []]
    if clusters:
        raw_groups = [(str(c["name"]), g) for c in data["clusters"] for g in (c.get("node_groups") or [])]
    for i, (cluster, g) in enumerate(raw_groups):
        labels = tuple(sorted((str(k), str(v)) for k, v in (g.get("labels") or {}).items()))
        groups.append(
            NodeGroup(
                name=str(g.get("name") or f"g{i}"),
                count=int(g["count"]),
                gpus_per_node=int(g["gpus_per_node"]),
                flavor=str(g.get("flavor") or "gpu"),
                labels=labels,
                cluster=cluster,
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
    for fl, q in (d.get("quotas") or {}).items():
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
    return Department(str(name), quotas, d.get("budget"), members, cluster_quotas)


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
