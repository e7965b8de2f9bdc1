"""Run replays: one (scenario, policy, load, seed) -> metrics dict; the "alone on nominal quota" reference."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

from . import metrics, policies
from .jobs import prepare
from .scenario import Department, FlavorQuota, NodeGroup, Scenario, fits_nodes, load_scenario
from .simulator import simulate


@functools.lru_cache(maxsize=8)
def prepared_scenario(path: str, seed: int, load: float | None, trace_dir: str | None, limit: int | None):
    """The scenario and its jobs (and what preparing them found), read once per process for the same inputs."""
    sc = load_scenario(path)
    if limit:
        sc = replace(sc, trace=dict(sc.trace, limit=limit))
    return prepare(sc, seed=seed, load=load, trace_dir=trace_dir)


def _private_groups(sc: Scenario, d: str) -> list[NodeGroup]:
    """A department's private cluster: its nominal quota per flavor as nodes of the flavor's size, the last
    one partial."""
    groups = []
    for fl, q in sorted(sc.departments[d].quotas.items()):
        size = sc.node_size(fl)
        full, part = divmod(q.nominal, size)
        if full:
            groups.append(NodeGroup(f"{d}-{fl}", full, size, fl))
        if part:
            groups.append(NodeGroup(f"{d}-{fl}-p", 1, part, fl))
    return groups


def _fits_alone(job, groups) -> bool:
    return fits_nodes(job, [g for g in groups if g.flavor == job.flavor])


def over_quota_jobs(sc: Scenario, jobs) -> dict[str, list[int]]:
    """dept -> ids of its jobs that can never start on its private cluster (larger than its nominal quota, or
    a gang whose pods do not fit its nodes): they have no alone baseline."""
    out: dict[str, list[int]] = {}
    for d in sorted(sc.departments):
        groups = _private_groups(sc, d)
        ids = [j.id for j in jobs if j.department == d and not _fits_alone(j, groups)]
        if ids:
            out[d] = ids
    return out


def alone_waits(sc: Scenario, jobs, policy_name: str = "fcfs") -> dict[str, dict[int, float]]:
    """Each department replayed alone on its private cluster (``_private_groups``) under ``policy_name``.
    Returns dept -> {job id: wait}; jobs that cannot fit the private cluster are left out (see
    ``over_quota_jobs``)."""
    out: dict[str, dict[int, float]] = {}
    for d, dept in sorted(sc.departments.items()):
        groups = _private_groups(sc, d)
        if not groups:
            continue
        # (its private cluster is one cluster, wherever its data lives: selectors and preferences do not apply)
        mine = [replace(j, cluster_selector=(), cluster_preference=()) for j in jobs
                if j.department == d and _fits_alone(j, groups)]  # fmt: skip
        if not mine:
            continue
        sub = replace(sc, clusters=(), node_groups=tuple(groups),
                      departments={d: Department(d, {fl: FlavorQuota(q.nominal) for fl, q in dept.quotas.items()})})
        res = simulate(scenario=sub, jobs=mine, policy=policies.make(policy_name), name=f"alone-{d}")
        out[d] = {r.spec.id: r.first_start - r.spec.submit for r in res.jobs if r.first_start is not None}
    return out


@functools.lru_cache(maxsize=8)
def _alone(path: str, seed: int, load: float | None, trace_dir: str | None, limit: int | None):
    sc, jobs, _ = prepared_scenario(path, seed, load, trace_dir, limit)
    return alone_waits(sc, jobs), over_quota_jobs(sc, jobs)


def _waits(res) -> dict[int, float]:
    return {r.spec.id: r.first_start - r.spec.submit for r in res.jobs if r.first_start is not None}


@functools.lru_cache(maxsize=8)
def _fcfs(path: str, seed: int, load: float | None, trace_dir: str | None, limit: int | None):
    """Waits under FCFS on the shared cluster: the reference for jobs that cannot run alone."""
    sc, jobs, _ = prepared_scenario(path, seed, load, trace_dir, limit)
    return _waits(simulate(scenario=sc, jobs=jobs, policy=policies.make("fcfs"), name="fcfs"))


def run_one(path: str | Path, policy: str, *, load: float | None = None, seed: int | None = None,
            trace_dir: str | None = None, limit: int | None = None, sharing: bool = True,
            keep_samples: bool = True) -> dict:
    path = str(path)
    if seed is None:
        seed = load_scenario(path).seed
    sc, jobs, info = prepared_scenario(path, seed, load, trace_dir, limit)
    res = simulate(scenario=sc, jobs=jobs, policy=policies.make(policy), name=policy)
    alone, big, fcfs = None, None, None
    if sharing:
        alone, big = _alone(path, seed, load, trace_dir, limit)
        if big:
            fcfs = _waits(res) if policy == "fcfs" else _fcfs(path, seed, load, trace_dir, limit)
    m = metrics.compute(res, rho=info["rho"], alone_waits=alone, keep_samples=keep_samples, fcfs_waits=fcfs,
                        over_quota=big if big else None)
    m.update(scenario=sc.name, load=load if load is not None else sc.load, seed=seed,
             compression=info["compression"], capacity=sc.capacity(), policy_kind=policies.kind(policy),
             min_cycle_interval_s=sc.options.min_cycle_interval_s, budgets=sc.budgets(),
             quota={d: sum(q.nominal for q in dep.quotas.values()) for d, dep in sc.departments.items()})
    if m["policy_kind"] == "portal":
        m["engine"] = policies.REGISTRY[policy].engine_name()
    return m
