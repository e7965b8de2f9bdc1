"""What-if for admins: replay recorded history under the current and a proposed policy and compare.

The portal's export (a management command, wired elsewhere) turns the job history into trace rows
(``simulator.trace.TraceRow``: submit time, actual run time, GPUs, department, user, tier, urgency, flavor,
deadline, bid, max runtime, pods) and calls ``compare``.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from engine import ClusterInfo, Snapshot
from engine.policy import policy_from_dict
from engine.types import DEFAULT_CLUSTER

from . import metrics
from .jobs import prepare
from .policies import Portal
from .scenario import Department, FlavorQuota, NodeGroup, Scenario, SimOptions, make_policy
from .simulator import simulate
from .trace import TraceRow

Decide = Callable[[Snapshot], Any]


def compare(
    rows: list[TraceRow],
    *,
    node_groups: list[Mapping[str, Any]],
    quotas: Mapping[str, Mapping[str, Mapping[str, int | None] | int]],
    current_policy: Mapping[str, Any] | None = None,
    proposed_policy: Mapping[str, Any] | None = None,
    proposed_quotas: Mapping[str, Mapping[str, Mapping[str, int | None] | int]] | None = None,
    current: Decide | None = None,
    proposed: Decide | None = None,
    options: SimOptions | None = None,
    members: Mapping[str, Mapping[str, str]] | None = None,
    clusters: Sequence[ClusterInfo] = (),
    placement: Mapping[str, Mapping[str, Mapping[str, str]]] | None = None,
) -> dict[str, Any]:
    """Replay ``rows`` twice and return the differences per department and per tier.

    Arguments (all plain data, so a Django command can build them from the database):

    - ``rows``: the recorded history in the trace format, actual run times as ``duration_s``; rows need a
      ``department`` and should carry ``tier``/``urgency``/``flavor``/``max_runtime_s`` as recorded.
    - ``node_groups``: ``[{"name", "count", "gpus_per_node", "flavor", "cluster"?}]`` - the cluster(s) to
      replay on (``cluster`` defaults to the default cluster; names must be unique across clusters).
    - ``quotas``: ``{department: {flavor: {"nominal", "borrowing_limit", "lending_limit"} or nominal}}``; a key
      ``flavor@cluster`` is a per-cluster quota.
    - ``clusters``: the clusters' labels, states and cost ranks (``ClusterInfo``); empty for one cluster.
    - ``placement``: ``{"cluster_selector" | "cluster_preference": {department or "*": {label: value}}}``,
      the cluster labels each department's jobs require or prefer (the scenario's ``assign`` keys).
    - ``current_policy`` / ``proposed_policy``: ``Policy`` fields as a dict (``weights`` as
      ``{"urgency/user_tier": w}``); ``proposed_quotas`` replaces ``quotas`` for the proposed run.
    - ``current`` / ``proposed``: the decision functions (default: ``engine.schedule`` for both, looked up
      when called); pass a baseline from ``simulator.policies`` to compare against it.
    - ``members``: ``{department: {user: user_tier}}`` for the weight matrix (default: everyone ``standard``).

    Returns ``{"current": summary, "proposed": summary, "diff": {...}}`` where a summary holds utilisation,
    average/p95 wait overall, per department and per tier, realtime-within-5-min share, JCT average, Jain's index,
    preemptions and GPU-hours lost, and ``diff`` has proposed minus current for each of those numbers.
    Time compression is off: the history replays at its recorded arrival times.
    """
    out = {}
    for label, q, pol, decide in (
        ("current", quotas, current_policy, current),
        ("proposed", proposed_quotas or quotas, proposed_policy, proposed),
    ):
        out[label] = replay(rows, node_groups=node_groups, quotas=q, policy=pol, decide=decide, options=options,
                            members=members, clusters=clusters, placement=placement, label=label)
    out["diff"] = _diff(out["current"], out["proposed"])
    return out


def replay(
    rows: list[TraceRow],
    *,
    node_groups: list[Mapping[str, Any]],
    quotas: Mapping[str, Mapping[str, Mapping[str, int | None] | int]],
    policy: Mapping[str, Any] | None = None,
    decide: Decide | None = None,
    options: SimOptions | None = None,
    members: Mapping[str, Mapping[str, str]] | None = None,
    clusters: Sequence[ClusterInfo] = (),
    placement: Mapping[str, Mapping[str, Mapping[str, str]]] | None = None,
    label: str = "replay",
) -> dict[str, Any]:
    """One side of ``compare``: replay ``rows`` under ``policy`` (simulator overrides, see ``overrides_of``)
    and ``quotas`` and return its summary. The tuner replays one week many times through this."""
    sc = _scenario(quotas, policy, node_groups=node_groups, members=members, options=options, clusters=clusters,
                   placement=placement)
    return _replay(sc, rows, decide or Portal(), label)


def overrides_of(document: Mapping[str, Any]) -> dict[str, Any]:
    """A portal policy document (``engine.policy.policy_to_dict``'s form, as stored) -> the simulator's policy
    overrides (``weights`` as ``{"urgency/user_tier": w}``); raises ``engine.policy.PolicyError``."""
    policy = policy_from_dict(document)
    out: dict[str, Any] = {}
    for name in policy.__dataclass_fields__:
        if name == "version":
            continue
        value = getattr(policy, name)
        if name == "weights":
            value = {f"{u}/{t}": w for (u, t), w in value.items()}
        elif name == "priority_classes":
            value = dict(value)
        out[name] = value
    return out


def _scenario(q, pol, *, node_groups, members, options, clusters, placement) -> Scenario:
    """The scenario one side of the comparison replays on: its quotas and policy on the given cluster(s)."""
    depts = {}
    for d, per in q.items():
        fq, local = {}, {}
        cpu = {}
        for fl, v in per.items():
            if isinstance(v, int):
                v = {"nominal": v}
            if "cores" in v or "memory_gib" in v:  # a CPU pool's: cores and GiB, each a quota of its own
                cpu[fl] = tuple(None if v.get(k) is None else FlavorQuota(
                    int(v[k].get("nominal", 0)), v[k].get("borrowing_limit"), v[k].get("lending_limit"))
                    for k in ("cores", "memory_gib"))
                continue
            quota = FlavorQuota(int(v.get("nominal", 0)), v.get("borrowing_limit"), v.get("lending_limit"))
            flavor, _, cluster = fl.partition("@")
            if cluster:
                local[(cluster, flavor)] = quota
            else:
                fq[flavor] = quota
        depts[d] = Department(d, fq, None, dict((members or {}).get(d, {})), local, cpu)
    groups = tuple(
        NodeGroup(str(g.get("name", f"g{i}")), int(g["count"]), int(g["gpus_per_node"]), str(g["flavor"]),
                  cluster=str(g.get("cluster", DEFAULT_CLUSTER)), cores=int(g.get("cores", 0)),
                  memory_gib=int(g.get("memory_gib", 0)))  # fmt: skip
        for i, g in enumerate(node_groups)
    )
    # recorded jobs that no longer fit the cluster (nodes removed since) are left out, as before; the
    # summary counts them
    sc = Scenario(name="whatif", node_groups=groups, departments=depts, policy_overrides=dict(pol or {}),
                  trace={}, assign=dict(placement or {}), load=None, options=options or SimOptions(),
                  unfittable="drop", clusters=tuple(clusters))
    make_policy(sc.policy_overrides)
    return sc


def _replay(sc: Scenario, rows: list[TraceRow], decide: Decide, label: str) -> dict:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        sc, jobs, info = prepare(sc, rows=list(rows), load=None)
    res = simulate(scenario=sc, jobs=jobs, policy=decide, name=label)
    summary = summarise(metrics.compute(res, rho=info["rho"], keep_samples=False))
    summary["dropped_unfittable"] = info["dropped_unfittable"]
    return summary


def summarise(m: dict) -> dict:
    return {
        "utilisation": m["utilisation"],
        "rho": m["rho"],
        "wait_avg": m["wait"]["avg"],
        "wait_p95": m["wait"]["p95"],
        "wait_dept": {d: {"avg": v["avg"], "p95": v["p95"]} for d, v in m["wait_dept"].items()},
        "wait_tier": {t: {"avg": v["avg"], "p95": v["p95"]} for t, v in m["wait_tier"].items()},
        "wait_urgency": {u: {"avg": v["avg"], "p95": v["p95"]} for u, v in m["wait_urgency"].items()},
        # high and critical work outside the realtime tier: the tuner weighs it against routine work
        "wait_urgent_nonrt": {"avg": m["wait_urgent_nonrt"]["avg"], "p95": m["wait_urgent_nonrt"]["p95"]},
        "dept_share_ratio": dict(m["dept_share_ratio"]),
        "realtime_jobs": m["realtime_jobs"],
        "realtime_within_5min": m["realtime_within_5min"],
        "jct_avg": m["jct_avg"],
        "jain": m["jain"],
        "preemptions": m["preemptions"],
        "gpu_hours_lost": m["gpu_hours_lost"],
        "never_started": m["never_started"],
    }


def _diff(a, b):
    if isinstance(a, dict) and isinstance(b, dict):
        return {k: _diff(a.get(k), b.get(k)) for k in sorted(set(a) | set(b))}
    if isinstance(a, int | float) and isinstance(b, int | float):
        return b - a
    return None


def format_diff(result: dict) -> str:
    """A plain-text table of the comparison for a management command to print."""
    cur, pro = result["current"], result["proposed"]
    lines = [f"{'':28s} {'current':>12s} {'proposed':>12s} {'change':>12s}"]

    def row(label, a, b):
        if a is None or b is None:
            return
        lines.append(f"{label:28s} {a:12.2f} {b:12.2f} {b - a:+12.2f}")

    row("utilisation", cur["utilisation"], pro["utilisation"])
    row("wait avg (s)", cur["wait_avg"], pro["wait_avg"])
    row("wait p95 (s)", cur["wait_p95"], pro["wait_p95"])
    for t in sorted(set(cur["wait_tier"]) | set(pro["wait_tier"])):
        row(f"  tier {t} avg (s)", cur["wait_tier"].get(t, {}).get("avg"), pro["wait_tier"].get(t, {}).get("avg"))
    for d in sorted(set(cur["wait_dept"]) | set(pro["wait_dept"])):
        row(f"  dept {d} avg (s)", cur["wait_dept"].get(d, {}).get("avg"), pro["wait_dept"].get(d, {}).get("avg"))
    row("realtime within 5 min", cur["realtime_within_5min"], pro["realtime_within_5min"])
    row("JCT avg (s)", cur["jct_avg"], pro["jct_avg"])
    row("Jain", cur["jain"], pro["jain"])
    row("preemptions", cur["preemptions"], pro["preemptions"])
    row("GPU-hours lost", cur["gpu_hours_lost"], pro["gpu_hours_lost"])
    return "\n".join(lines)


__all__ = ["compare", "format_diff", "overrides_of", "replay", "summarise", "replace"]
