"""A scenario's trace -> the simulator's jobs: load the rows, fill what the trace lacks by the scenario's
``assign`` rules (deterministically for a seed), refuse or drop jobs that can never fit, and compress the
arrivals to the target load.

``prepare(scenario, seed=..., load=...)`` is the one entry point the runner, the what-if and the benchmarks use;
``build_jobs`` turns rows into ``JobSpec``s. This module imports the scenario's dataclasses, never the reverse.
"""

from __future__ import annotations

import math
import random
import warnings
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from engine import tiers
from engine.fractions import HAMI, MILLI, Share
from engine.types import TIERS, URGENCIES, Role

from . import loaders, synth
from . import trace as tr
from .errors import ScenarioError
from .scenario import JobSpec, Scenario, fold_departments, resolve_departments


def load_trace(sc: Scenario, *, seed: int | None = None, trace_dir: str | Path | None = None):
    """Load the scenario's trace rows (and department quota shares if the loader knows them)."""
    spec = dict(sc.trace)
    kind = spec.pop("loader", "csv")
    limit = spec.pop("limit", None)
    spec.pop("resizable", None)  # (applied to the jobs: ``resizable``)
    path = spec.pop("path", None)
    seed = sc.seed if seed is None else seed
    if kind == "synthetic":
        rows, shares = synth.generate(sc, seed=seed, **spec), None
    else:
        if path is None:
            raise ScenarioError("trace.path is required for loader " + kind)
        resolved = loaders.resolve_path(path, base_dir=sc.base_dir, trace_dir=trace_dir)
        rows, shares = loaders.load(kind, resolved, **spec)
    rows = tr.sort_rows(rows)
    if limit:
        rows = rows[: int(limit)]
    return rows, shares


def _pick(rng: random.Random, fractions: dict[str, float], default: str) -> str:
    if not fractions:
        return default
    items = sorted(fractions.items())
    total = sum(v for _, v in items)
    x = rng.random() * total
    for k, v in items:
        x -= v
        if x < 0:
            return k
    return items[-1][0]


def _matches(cond: dict[str, Any], r: tr.TraceRow) -> bool:
    for k, v in cond.items():
        if k == "gpus_max" and r.total_gpus > v:
            return False
        if k == "gpus_min" and r.total_gpus < v:
            return False
        if k == "duration_max_s" and r.duration_s > v:
            return False
        if k == "duration_min_s" and r.duration_s < v:
            return False
        if k == "department" and r.department not in (v if isinstance(v, list) else [v]):
            return False
        if k == "has_deadline" and (r.deadline_s is not None) != bool(v):
            return False
    return True


def split_pods(gpus: int, node_size: int) -> tuple[int, int]:
    """Default pod shape: one pod if it fits a node, else the fewest pods (>= ceil(gpus/node)) that divide the
    GPUs evenly (12 on 8-GPU nodes -> 2 x 6; 20 -> 4 x 5)."""
    if gpus <= node_size:
        return 1, max(gpus, 0)
    p = -(-gpus // node_size)
    while gpus % p:
        p += 1
    return p, gpus // p


@dataclass(frozen=True)
class _MaxRuntime:
    """``assign.max_runtime``: a job without one gets its run time times ``factor``, rounded up, within bounds."""

    factor: float
    round_up_s: float
    min_s: float
    max_s: float | None

    @classmethod
    def of(cls, spec: dict[str, Any]) -> _MaxRuntime:
        return cls(float(spec.get("factor", 2.0)), float(spec.get("round_up_s", 3600)), float(spec.get("min_s", 600)),
                   spec.get("max_s"))

    def for_row(self, r: tr.TraceRow) -> float:
        if r.max_runtime_s:
            return float(r.max_runtime_s)
        max_rt = max(self.min_s, math.ceil(r.duration_s * self.factor / self.round_up_s) * self.round_up_s)
        if self.max_s is not None:
            max_rt = min(max_rt, float(self.max_s))
        return max_rt


class _Assigner:
    """The scenario's ``assign`` rules over one trace: one random stream per kind of value (department, tier,
    urgency, user), each drawn in row order, so a seed gives the same jobs whatever else changes."""

    def __init__(self, sc: Scenario, seed: int):
        a = sc.assign
        self.sc = sc
        self.rng_dept = random.Random(f"{seed}:department")
        self.rng_tier = random.Random(f"{seed}:tier")
        self.rng_urg = random.Random(f"{seed}:urgency")
        self.rng_user = random.Random(f"{seed}:user")
        self.rules = a.get("rules") or []
        self.tier_frac = a.get("tier") or {}
        self.urg_frac = a.get("urgency") or {}
        self.ut_frac = a.get("user_tier") or {}
        self.dept_frac = a.get("department") or {}
        self.users_per_dept = int(a.get("users_per_department", 5))
        self.max_runtime = _MaxRuntime.of(a.get("max_runtime") or {})
        self.flavors = sc.flavors()
        self.user_tier_cache: dict[tuple[str, str], str] = {}
        # cluster labels a department's jobs require or prefer (e.g. where its data lives); "*": every other one
        self.placement = {
            key: {str(d): tuple(sorted((str(k), str(v)) for k, v in labels.items()))
                  for d, labels in (a.get(key) or {}).items()}
            for key in ("cluster_selector", "cluster_preference")
        }  # fmt: skip

    def department(self, r: tr.TraceRow) -> str:
        dept = r.department
        if (not dept or dept not in self.sc.departments) and self.dept_frac:
            dept = _pick(self.rng_dept, self.dept_frac, dept)
        if dept not in self.sc.departments:
            raise ScenarioError(f"job {r.job_id}: department {dept!r} not in the scenario")
        return dept

    def tier_and_urgency(self, r: tr.TraceRow) -> tuple[str, str]:
        tier, urgency = r.tier, r.urgency
        for rule in self.rules:
            if _matches(rule.get("if") or {}, r) and self.rng_tier.random() < float(rule.get("p", 1.0)):
                tier = tier or rule.get("tier")
                urgency = urgency or rule.get("urgency")
                break
        tier = tier or _pick(self.rng_tier, self.tier_frac, tiers.DEFAULT)
        urgency = urgency or _pick(self.rng_urg, self.urg_frac, "normal")
        if tier not in TIERS or urgency not in URGENCIES:
            raise ScenarioError(f"job {r.job_id}: bad tier/urgency {tier}/{urgency}")
        return tier, urgency

    def user_and_tier(self, r: tr.TraceRow, dept: str) -> tuple[str, str]:
        members = self.sc.departments[dept].members
        user = r.user
        if not user:
            if members:
                user = sorted(members)[self.rng_user.randrange(len(members))]
            else:
                user = f"{dept}-u{self.rng_user.randrange(max(self.users_per_dept, 1))}"
        if user in members:
            return user, members[user]
        key = (dept, user)
        if key not in self.user_tier_cache:
            self.user_tier_cache[key] = _pick(self.rng_user, self.ut_frac, "standard")
        return user, self.user_tier_cache[key]

    def flavor(self, r: tr.TraceRow) -> str:
        flavor = r.flavor or self.flavors[0]
        if flavor not in self.flavors:
            raise ScenarioError(f"job {r.job_id}: flavor {flavor!r} not in the cluster")
        return flavor

    def shape(self, r: tr.TraceRow, flavor: str) -> tuple[int, int]:
        """(pods, GPUs per pod): the trace's pods, else the default split over the flavor's node size."""
        if not r.pods:
            return split_pods(r.total_gpus, self.sc.node_size(flavor))
        if r.total_gpus % r.pods:
            raise ScenarioError(f"job {r.job_id}: {r.total_gpus} GPUs not divisible into {r.pods} pods")
        return r.pods, r.total_gpus // r.pods

    def roles(self, r: tr.TraceRow) -> tuple[tuple[Role, ...], str | None]:
        """The row's roles as the engine takes them, and the CPU-only job's pool (None: it has GPUs)."""
        pools = self.sc.cpu_pools()
        out = []
        for name, pods, gpus, cores, mem, pool in r.roles:
            if gpus == 0:
                pool = pool or (pools[0] if len(pools) == 1 else None)
                if pool not in pools:
                    raise ScenarioError(f"job {r.job_id}: role {name} runs on a CPU pool: name one of "
                                        f"{', '.join(pools) or '(none: declare a group with cores and memory_gib)'}")
            out.append(Role(name=name, pods=pods, gpus_per_pod=gpus, cpu_m=round(cores * 1000),
                            memory_mib=round(mem * 1024), flavor="" if gpus else pool))
        cpu_only = all(x.gpus_per_pod == 0 for x in out)
        return tuple(out), (out[0].flavor if out and cpu_only else None)

    def labels(self, key: str, given: tuple[tuple[str, str], ...] | None, dept: str) -> tuple[tuple[str, str], ...]:
        if given is not None:
            return given
        return self.placement[key].get(dept, self.placement[key].get("*", ()))

    def job(self, i: int, r: tr.TraceRow) -> JobSpec:
        dept = self.department(r)
        tier, urgency = self.tier_and_urgency(r)
        user, user_tier = self.user_and_tier(r, dept)
        roles, pool = self.roles(r)
        flavor = pool or self.flavor(r)
        max_rt = self.max_runtime.for_row(r)
        if roles:  # the GPU gang is the roles with GPUs (none for a CPU-only job)
            gpu_roles = [x for x in roles if x.gpus_per_pod]
            pods, per = sum(x.pods for x in gpu_roles), (gpu_roles[0].gpus_per_pod if gpu_roles else 0)
        elif r.gpu_fraction is not None:  # a fraction per pod: its GPUs column counts its pods
            pods, per = max(1, r.total_gpus), 1
        else:
            pods, per = self.shape(r, flavor)
        return JobSpec(
            id=i + 1,
            key=r.job_id,
            submit=float(r.submit_time_s),
            duration_s=min(float(r.duration_s), max_rt),
            pods=pods,
            gpus_per_pod=per,
            department=dept,
            flavor=flavor,
            tier=tier,
            urgency=urgency,
            user=user,
            user_tier=user_tier,
            deadline=r.deadline_s,
            bid=int(r.bid or 0),
            max_runtime_s=max_rt,
            checkpoint_interval_s=r.checkpoint_interval_s,
            preemptible=r.preemptible,
            notice_s=r.notice_s,
            price_surcharge_pct=int(r.price_surcharge_pct or 0),
            cluster_selector=self.labels("cluster_selector", r.cluster_selector, dept),
            cluster_preference=self.labels("cluster_preference", r.cluster_preference, dept),
            array=r.array,
            after=r.after,
            roles=roles,
            share=None if r.gpu_fraction is None else trace_share(r.gpu_fraction),
        )


def resizable(jobs: list[JobSpec], spec: dict[str, Any] | None, *, seed: int) -> list[JobSpec]:
    """``trace.resizable``: make ``share`` of the training jobs (the elastic tier's) resizable, drawn (seeded) among
    those of 2 GPUs or more: each runs as one pod per GPU, from ``min_share`` of its GPUs (rounded up) to all of
    them, declares ``notice_s`` (it writes a checkpoint on demand, so a resize waits for that rather than its next
    periodic one) and speeds up by ``efficiency`` per doubling."""
    if not spec:
        return jobs
    share = float(spec.get("share", 0.3))
    low = float(spec.get("min_share", 0.25))
    notice = float(spec.get("notice_s", 120.0))
    eff = float(spec.get("efficiency", 0.9))
    if not 0 <= share <= 1 or not 0 < low <= 1 or notice < 0 or not 0 < eff <= 1:
        raise ScenarioError("trace.resizable: share in 0..1, min_share in (0, 1], notice_s >= 0, efficiency in (0, 1]")
    train = [j for j in jobs if j.tier == "elastic" and not j.roles]
    eligible = [j for j in train if j.total_gpus >= 2]
    if not eligible:
        return jobs
    p = min(1.0, share * len(train) / len(eligible))
    rng = random.Random(seed * 7919 + 47)
    chosen = {j.id for j in eligible if rng.random() < p}
    return [replace(j, pods=j.total_gpus, gpus_per_pod=1, min_pods=max(1, math.ceil(j.total_gpus * low)),
                    notice_s=notice, scaling_efficiency=eff) if j.id in chosen else j for j in jobs]


def trace_share(fraction: float) -> Share:
    """A trace's fraction of a GPU as the engine's share: that much of a GPU's memory, in milli-GPUs."""
    return Share(HAMI, MILLI, memory_mib=max(1, round(fraction * MILLI)))


def build_jobs(sc: Scenario, rows: list[tr.TraceRow], *, seed: int) -> list[JobSpec]:
    """Turn trace rows into JobSpecs, filling missing values by the scenario's ``assign`` rules (seeded). An
    array's throttle is the one given on any of its rows; a dependency names a known row or array."""
    assigner = _Assigner(sc, seed)
    jobs = [assigner.job(i, r) for i, r in enumerate(rows)]
    throttles: dict[str, int] = {}
    for r in rows:
        if r.array is not None and r.array_throttle is not None:
            if throttles.setdefault(r.array, r.array_throttle) != r.array_throttle:
                raise ScenarioError(f"array {r.array}: two throttles ({throttles[r.array]}, {r.array_throttle})")
    keys = {j.key for j in jobs}
    arrays = {j.array for j in jobs if j.array is not None}
    for j in jobs:
        for _, refs in j.after:
            for ref in refs:
                if (ref[1:] not in arrays) if ref.startswith("@") else (ref not in keys):
                    raise ScenarioError(f"job {j.key}: after names {ref!r}, which is not in the trace")
    return [replace(j, array_throttle=throttles.get(j.array)) if j.array in throttles else j for j in jobs]


def prepare(
    sc: Scenario, *, seed: int | None = None, load: float | None = None, trace_dir: str | Path | None = None,
    rows: list[tr.TraceRow] | None = None,
) -> tuple[Scenario, list[JobSpec], dict[str, float]]:
    """Scenario + seed + target load -> (scenario with departments resolved, jobs, info).

    ``info`` holds ``rho`` (offered load after compression), ``rho_trace`` (before) and ``compression``.
    """
    seed = sc.seed if seed is None else seed
    shares = None
    if rows is None:
        rows, shares = load_trace(sc, seed=seed, trace_dir=trace_dir)
    sc = resolve_departments(sc, rows, shares)
    rows = fold_departments(sc, rows)
    rows = [r for r in rows if (r.total_gpus > 0 or r.roles) and r.duration_s > 0]  # nothing to run
    jobs0 = resizable(build_jobs(sc, rows, seed=seed), sc.trace.get("resizable"), seed=seed)
    # A job no set of nodes of its flavor can hold would wait forever and still count in rho: refuse the
    # scenario, or drop such jobs when the scenario says so (a public trace recorded on a larger cluster).
    bad = [i for i, j in enumerate(jobs0) if not sc.fits(j)]
    dropped = 0
    if bad:
        msg = unfittable_message(sc, [jobs0[i] for i in bad])
        if sc.unfittable != "drop":
            raise ScenarioError(msg + " (set 'unfittable: drop' in the scenario to drop them)")
        warnings.warn(f"{sc.name}: dropped {msg}", stacklevel=2)
        skip = set(bad)
        rows = [r for i, r in enumerate(rows) if i not in skip]
        jobs0 = [replace(j, id=k + 1) for k, j in enumerate(j for i, j in enumerate(jobs0) if i not in skip)]
        dropped = len(bad)
    # offered load from the capped durations, then compress arrivals to the target
    capped = [replace(r, duration_s=j.duration_s) for r, j in zip(rows, jobs0, strict=True)]
    rho_trace = tr.offered_load(capped, sc.capacity())
    target = sc.load if load is None else load
    factor = 1.0
    if target:
        capped, factor = tr.compress_to_load(capped, sc.capacity(), float(target))
        jobs0 = [
            replace(j, submit=r.submit_time_s, deadline=r.deadline_s) for j, r in zip(jobs0, capped, strict=True)
        ]
    rho = tr.offered_load(capped, sc.capacity())
    return sc, jobs0, {"rho": rho, "rho_trace": rho_trace, "compression": factor, "jobs": len(jobs0),
                       "dropped_unfittable": dropped}


def unfittable_message(sc: Scenario, jobs: list[JobSpec], show: int = 20) -> str:
    """One line naming jobs that can never fit: trace id, shape, and the flavor's largest node and total."""
    parts = []
    for j in jobs[:show]:
        parts.append(f"{j.key} ({j.pods} x {j.gpus_per_pod} GPUs of {j.flavor}; largest node "
                     f"{sc.node_size(j.flavor)}, flavor total {sc.capacity(j.flavor)})")
    more = f" and {len(jobs) - show} more" if len(jobs) > show else ""
    return f"{len(jobs)} job(s) can never fit any node set: " + "; ".join(parts) + more
