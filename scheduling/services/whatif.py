"""What-if for admins: replay the portal's recorded job history under the policy in force and a proposed one
(and/or proposed quotas) on the current cluster, and compare. Used by ``manage.py whatif`` and the dashboard's
What-if page; the replay itself is ``simulator.whatif.compare``.

Nothing here writes to the database. Two guards keep a replay bounded, so a web request always returns:

- at most ``settings.WHATIF_MAX_JOBS`` jobs (default 1000): the most recent ones of the window; the result
  says when the history was capped;
- at most ``settings.WHATIF_TIME_LIMIT_S`` seconds of wall time (default 20) for both replays together;
  past it the replay stops with ``ReplayTooLong`` (shorten the window).
"""

from __future__ import annotations

import re
import time
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from django.conf import settings
from django.utils import timezone

from engine.policy import PolicyError, policy_from_dict, policy_to_dict
from engine.types import ClusterInfo
from portal.models import Department, Membership
from quotas import selectors as quota_selectors
from quotas.models import Flavor
from scheduling.models import Cluster, Job, JobState, Node
from scheduling.services import snapshot
from scheduling.services.policy import current_policy, policy_as_dict
from simulator.policies import Portal
from simulator.trace import TraceRow
from simulator.whatif import compare, overrides_of

TRACE_COLUMNS = ("job_id", "submit_time_s", "duration_s", "gpus", "department", "user", "tier", "urgency",
                 "flavor", "deadline_s", "bid", "max_runtime_s", "pods", "roles")
DEFAULT_MAX_JOBS = 1000
DEFAULT_TIME_LIMIT_S = 20.0
QUOTA_FIELDS = ("nominal", "borrowing_limit", "lending_limit")


class WhatIfError(ValueError):
    """Bad input or nothing to replay. ``errors`` maps a field (``policy``, ``weights.high.pi``, ``quotas``,
    ``days``, ``__all__``) to messages, for a form to show beside the field."""

    def __init__(self, message: str, errors: dict[str, list[str]] | None = None):
        self.message = message
        self.errors = errors or {"__all__": [message]}
        super().__init__(message)


class ReplayTooLong(WhatIfError):
    pass


def max_jobs() -> int:
    return int(getattr(settings, "WHATIF_MAX_JOBS", DEFAULT_MAX_JOBS))


def time_limit_s() -> float:
    return float(getattr(settings, "WHATIF_TIME_LIMIT_S", DEFAULT_TIME_LIMIT_S))


# ------------------------------------------------------------------------------------------ the history


def _history(since):
    return (Job.objects.filter(submitted_at__gte=since)
            .exclude(state=JobState.PENDING_APPROVAL)
            # never ran and never will: not part of the offered load
            .exclude(state=JobState.CANCELLED, started_at__isnull=True))


def export_rows(*, since, limit: int | None = None) -> list:
    """The history since ``since`` as simulator TraceRows (times relative to the first submission; the
    duration is what the job actually ran, its max runtime when it never ran). With ``limit``, only the most
    recent ``limit`` jobs."""
    qs = _history(since).select_related("department", "flavor", "owner").prefetch_related("roles__flavor")
    if limit is not None:
        jobs = list(qs.order_by("-submitted_at", "-id")[:limit])[::-1]
    else:
        jobs = list(qs.order_by("submitted_at", "id"))
    if not jobs:
        return []
    t0 = jobs[0].submitted_at
    rows = []
    for j in jobs:
        ran = (j.finished_at - j.started_at).total_seconds() if j.started_at and j.finished_at else None
        rows.append(TraceRow(
            job_id=str(j.pk), submit_time_s=(j.submitted_at - t0).total_seconds(),
            duration_s=max(1.0, ran if ran is not None else float(j.max_runtime_s)),
            total_gpus=j.total_gpus, department=j.department.slug, user=j.owner.get_username(), tier=j.tier,
            urgency=j.urgency, flavor=j.flavor.name,
            deadline_s=(j.deadline - t0).total_seconds() if j.deadline else None, bid=j.bid,
            max_runtime_s=float(j.max_runtime_s), pods=j.pods, preemptible=j.preemptible,
            # the notice it declared and its checkpoints, so a preemption in the replay loses what it lost here;
            # and the surcharge it paid for running non-preemptible, so the replay's spend is the portal's
            notice_s=float(j.notice_s), checkpoint_interval_s=_opt(j.checkpoint_interval_s),
            price_surcharge_pct=j.price_surcharge_pct,
            cluster_selector=snapshot.label_pairs(j.cluster_selector),
            cluster_preference=snapshot.label_pairs(j.cluster_preference),
            roles=_trace_roles(j),
            # a fraction of a GPU per pod replays as one (a job of roles replays whole: the trace's fractions are
            # one per pod of a single role)
            gpu_fraction=j.share_milli / 1000 if 0 < j.share_milli < 1000 and j.role_count < 2 else None,
        ))
    return rows


def _opt(value) -> float | None:
    return None if value is None else float(value)


def _trace_roles(job) -> tuple:
    """A CPU-only job's or a job of roles' roles as the trace's (name, pods, GPUs, cores, GiB, pool); () for one
    GPU role, which the row's pods and GPUs say."""
    roles = sorted(job.roles.all(), key=lambda r: r.index)
    if job.total_gpus and len(roles) <= 1:
        return ()
    return tuple((r.name, r.pods, r.gpus_per_pod, r.cpu_millicores / 1000, r.memory_mib / 1024,
                  None if r.gpus_per_pod or r.flavor is None else r.flavor.name) for r in roles)


def cpu_quotas() -> dict[str, dict[str, dict]]:
    """The CPU pools' quotas in force as the simulator takes them: ``{department: {pool: {"cores": {...},
    "memory_gib": {...}}}}`` (global ones: the engine does not read per-cluster CPU quotas)."""
    out: dict = {}
    for q in quota_selectors.quotas_in_force():
        if q.resource == "gpus" or q.cluster_id is not None:
            continue
        pool = out.setdefault(q.department.slug, {}).setdefault(q.flavor.name, {})
        pool["cores" if q.resource == "cpu" else "memory_gib"] = {
            "nominal": q.nominal, "borrowing_limit": q.borrowing_limit, "lending_limit": q.lending_limit}
    return out


def _with_cpu(quotas: dict, cpu: dict) -> dict:
    out = {d: dict(per) for d, per in quotas.items()}
    for d, pools in cpu.items():
        out.setdefault(d, {}).update(pools)
    return out


# ------------------------------------------------------------------------------------------ the inputs


def validate_policy(doc: Any) -> dict:
    """A proposed policy document, validated exactly like the policy editor and PUT /api/v1/policy (the
    engine's codec); returns it normalised. Raises WhatIfError with the codec's per-field messages."""
    if not isinstance(doc, dict):
        raise WhatIfError("The proposed policy must be a JSON object.", {"policy": ["Must be a JSON object."]})
    try:
        return policy_to_dict(policy_from_dict(doc))
    except PolicyError as exc:
        problems = "; ".join(f"{k}: {' '.join(v)}" for k, v in exc.errors.items())
        raise WhatIfError(f"The proposed policy is invalid: {problems}", dict(exc.errors))


def sim_policy(data: dict) -> dict:
    """A portal policy document (as stored) -> the simulator's policy overrides."""
    return overrides_of(data)


def current_policy_doc() -> tuple[dict, int]:
    policy, version = current_policy()
    return policy_as_dict(policy), version


def current_quotas() -> dict[str, dict[str, dict[str, int | None]]]:
    """``{department: {flavor: {"nominal", "borrowing_limit", "lending_limit"}}}`` as in force; a per-cluster
    quota's key is ``flavor@cluster`` (the simulator's)."""
    out: dict = {}
    for q in quota_selectors.quotas_in_force():
        if q.resource != "gpus":  # a CPU pool's cores and GiB: ``cpu_quotas``
            continue
        out.setdefault(q.department.slug, {})[q.key] = {
            "nominal": q.nominal, "borrowing_limit": q.borrowing_limit, "lending_limit": q.lending_limit}
    return out


@dataclass(frozen=True)
class QuotaChange:
    department: str
    flavor: str
    nominal: int
    borrowing_limit: int | None = None  # None = unlimited
    lending_limit: int | None = None  # None = all of the nominal


def _gpus(raw, label: str, where: str) -> int | None:
    if raw is None or (isinstance(raw, str) and raw.strip().lower() in ("", "none", "-")):
        return None
    value = None
    if isinstance(raw, int) and not isinstance(raw, bool):
        value = raw
    elif isinstance(raw, str) and re.fullmatch(r"\s*-?\d+\s*", raw):
        value = int(raw)
    if value is None:
        raise WhatIfError(f"{where}: {label} must be a whole number of GPUs (quotas are whole numbers of GPUs).",
                          {"quotas": [f"{where}: {label}: quotas are whole numbers of GPUs."]})
    if value < 0:
        raise WhatIfError(f"{where}: {label} cannot be negative.",
                          {"quotas": [f"{where}: {label}: quotas cannot be negative."]})
    return value


def quota_change(department: str, flavor: str, nominal=None, borrowing_limit=None, lending_limit=None,
                 *, departments: Iterable[str] | None = None, flavors: Iterable[str] | None = None) -> QuotaChange:
    """Validate one proposed quota (values may be strings from a form or a command line; blank nominal = 0,
    blank limits = unlimited). ``flavor@cluster`` is a per-cluster quota. Unknown departments, flavors and
    clusters, non-integers, negatives and a lending limit above the nominal quota are WhatIfErrors naming the
    quota."""
    where = f"{department}/{flavor}"
    known_depts = set(departments) if departments is not None else set(
        Department.objects.values_list("slug", flat=True))
    known_flavors = set(flavors) if flavors is not None else set(Flavor.objects.values_list("name", flat=True))
    if department not in known_depts:
        raise WhatIfError(f"{where}: unknown department {department!r}.",
                          {"quotas": [f"{where}: unknown department {department!r}."]})
    name, at, cluster = flavor.partition("@")
    if name not in known_flavors:
        raise WhatIfError(f"{where}: unknown flavor {name!r}.",
                          {"quotas": [f"{where}: unknown flavor {name!r}."]})
    if at and not Cluster.objects.filter(name=cluster).exists():
        raise WhatIfError(f"{where}: unknown cluster {cluster!r}.",
                          {"quotas": [f"{where}: unknown cluster {cluster!r}."]})
    nom = _gpus(nominal, "nominal", where) or 0
    borrow = _gpus(borrowing_limit, "borrowing limit", where)
    lend = _gpus(lending_limit, "lending limit", where)
    if lend is not None and lend > nom:
        raise WhatIfError(f"{where}: the lending limit cannot exceed the nominal quota.",
                          {"quotas": [f"{where}: the lending limit ({lend}) cannot exceed the nominal quota "
                                      f"({nom})."]})
    return QuotaChange(department, flavor, nom, borrow, lend)


def apply_quota_changes(quotas: dict, changes: Iterable[QuotaChange]) -> dict:
    """A copy of ``quotas`` with ``changes`` applied (each replaces that department x flavor's quota)."""
    proposed = {d: {f: dict(v) for f, v in per.items()} for d, per in quotas.items()}
    for c in changes:
        proposed.setdefault(c.department, {})[c.flavor] = {
            "nominal": c.nominal, "borrowing_limit": c.borrowing_limit, "lending_limit": c.lending_limit}
    return proposed


def node_groups() -> list[dict]:
    """The clusters' schedulable nodes as the simulator's node groups, one per (cluster, flavor, size)."""
    nodes = Node.objects.filter(schedulable=True)
    groups = Counter(nodes.exclude(flavor__kind="cpu").values_list("cluster__name", "flavor__name", "gpus"))
    # a CPU pool's nodes, one group per size in whole cores and GiB (what the simulator sizes them in)
    pools = Counter((c, f, m // 1000, mib // 1024) for c, f, m, mib in nodes.filter(flavor__kind="cpu").values_list(
        "cluster__name", "flavor__name", "cpu_millicores", "memory_mib"))
    if not groups and not pools:
        raise WhatIfError("There are no schedulable nodes to replay on.")
    return [{"name": f"{cluster}-{flavor}-{gpus}", "count": n, "gpus_per_node": gpus, "flavor": flavor,
             "cluster": cluster}
            for (cluster, flavor, gpus), n in sorted(groups.items())] + [
        {"name": f"{cluster}-{flavor}-{cores}c-{gib}g", "count": n, "gpus_per_node": 0, "cores": cores,
         "memory_gib": gib, "flavor": flavor, "cluster": cluster}
        for (cluster, flavor, cores, gib), n in sorted(pools.items()) if cores and gib]


def cluster_infos() -> tuple[ClusterInfo, ...]:
    """Each cluster's labels, state and cost rank, as the engine sees them in the live cycle."""
    return snapshot.cluster_infos(Cluster.objects.order_by("name"))


def member_tiers() -> dict[str, dict[str, str]]:
    out: dict = {}
    for m in Membership.objects.select_related("department", "user"):
        out.setdefault(m.department.slug, {})[m.user.get_username()] = m.user_tier
    return out


# ------------------------------------------------------------------------------------------ the replay


class _Bounded:
    """The portal's decision function, stopped at a wall-clock deadline, counting preemption victims per
    department (the simulator's summary only has the total)."""

    name = "portal"
    time_dependent = True

    def __init__(self, deadline: float, limit_s: float):
        self.inner = Portal()
        self.deadline = deadline
        self.limit_s = limit_s
        self.victims: Counter[str] = Counter()

    def __call__(self, snap):
        if time.monotonic() > self.deadline:
            raise ReplayTooLong(
                f"The replay did not finish within {self.limit_s:g} s. Choose a shorter history window.")
        result = self.inner(snap)
        if result.preemptions:
            dept = {r.id: r.department for r in snap.running}
            for p in result.preemptions:
                for vid in p.victim_ids:
                    if vid in dept:
                        self.victims[dept[vid]] += 1
        return result


@dataclass
class WhatIf:
    """One comparison: ``result`` is ``simulator.whatif.compare``'s output plus ``preemptions_dept``
    (victims per department) in each summary and in ``diff``."""

    result: dict
    days: float
    jobs: int  # replayed
    total: int  # in the window
    max_jobs: int
    policy_changed: bool
    quota_changes: list[QuotaChange] = field(default_factory=list)
    current_version: int = 0
    proposed_policy: dict | None = None
    wall_s: float = 0.0

    @property
    def capped(self) -> bool:
        return self.jobs < self.total


def run_whatif(*, days: float, proposed_policy: dict | None = None, quota_changes: Iterable[QuotaChange] = (),
               limit: int | None = None, time_limit: float | None = None) -> WhatIf:
    """Replay the last ``days`` of history (at most ``limit`` jobs, the most recent) under the policy and quotas
    in force and under the proposal; raise WhatIfError on bad input or nothing to compare."""
    if not days or days <= 0:
        raise WhatIfError("The history window must be a positive number of days.",
                          {"days": ["Must be a positive number of days."]})
    changes = list(quota_changes)
    current_doc, version = current_policy_doc()
    proposed_doc = current_doc if proposed_policy is None else validate_policy(proposed_policy)
    strip = lambda d: {k: v for k, v in d.items() if k != "version"}  # noqa: E731
    policy_changed = strip(proposed_doc) != strip(current_doc)
    quotas = current_quotas()
    proposed_quotas = apply_quota_changes(quotas, changes)
    if not policy_changed and proposed_quotas == quotas:
        raise WhatIfError("Nothing to compare: change the policy or a quota.")
    limit = max_jobs() if limit is None else limit
    since = timezone.now() - timedelta(days=days)
    total = _history(since).count()
    rows = export_rows(since=since, limit=limit)
    if not rows:
        message = f"No jobs in the last {days:g} day{'' if days == 1 else 's'} to replay."
        raise WhatIfError(message, {"days": [message]})
    groups = node_groups()
    budget = time_limit_s() if time_limit is None else time_limit
    t0 = time.monotonic()
    current, proposed = _Bounded(t0 + budget, budget), _Bounded(t0 + budget, budget)
    cpu = cpu_quotas()
    result = compare(rows, node_groups=groups, quotas=_with_cpu(quotas, cpu),
                     proposed_quotas=_with_cpu(proposed_quotas, cpu),
                     current_policy=sim_policy(current_doc), proposed_policy=sim_policy(proposed_doc),
                     current=current, proposed=proposed, members=member_tiers(), clusters=cluster_infos())
    depts = sorted(set(current.victims) | set(proposed.victims) | {r.department for r in rows})
    result["current"]["preemptions_dept"] = {d: current.victims.get(d, 0) for d in depts}
    result["proposed"]["preemptions_dept"] = {d: proposed.victims.get(d, 0) for d in depts}
    result["diff"]["preemptions_dept"] = {d: proposed.victims.get(d, 0) - current.victims.get(d, 0) for d in depts}
    return WhatIf(result=result, days=days, jobs=len(rows), total=total, max_jobs=limit,
                  policy_changed=policy_changed, quota_changes=changes, current_version=version,
                  proposed_policy=proposed_doc if policy_changed else None, wall_s=time.monotonic() - t0)
