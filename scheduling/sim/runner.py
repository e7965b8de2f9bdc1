"""Run replays: one (scenario, policy, load, seed) -> metrics dict; the "alone on nominal quota" reference."""

from __future__ import annotations

import functools
from dataclasses import replace
from pathlib import Path

from . import metrics, policies
from .scenario import Department, FlavorQuota, NodeGroup, Scenario, load_scenario, prepare
from .simulator import simulate


@functools.lru_cache(maxsize=8)
def _prepared(path: str, seed: int, load: float | None, trace_dir: str | None, limit: int | None):
    sc = load_scenario(path)
    if limit:
        sc = replace(sc, trace=dict(sc.trace, limit=limit))
    return prepare(sc, seed=seed, load=load, trace_dir=trace_dir)


def alone_waits(sc: Scenario, jobs, policy_name: str = "fcfs") -> dict[str, dict[int, float]]:
    """Each department replayed alone on a private cluster of its nominal quota (per flavor, nodes of the
    flavor's size, the last one partial) under ``policy_name``. Returns dept -> {job id: wait}; jobs larger than
    the private cluster are left out."""
    out: dict[str, dict[int, float]] = {}
    for d, dept in sorted(sc.departments.items()):
        groups = []
        for fl, q in sorted(dept.quotas.items()):
            size = sc.node_size(fl)
            full, part = divmod(q.nominal, size)
            if full:
                groups.append(NodeGroup(f"{d}-{fl}", full, size, fl))
            if part:
                groups.append(NodeGroup(f"{d}-{fl}-p", 1, part, fl))
        if not groups:
            continue
        cap = {fl: q.nominal for fl, q in dept.quotas.items()}
        mine = [j for j in jobs if j.department == d and j.gpus <= cap.get(j.flavor, 0)]
        if not mine:
            continue
        sub = replace(sc, node_groups=tuple(groups),
                      departments={d: Department(d, {fl: FlavorQuota(q.nominal) for fl, q in dept.quotas.items()})})
        res = simulate(scenario=sub, jobs=mine, policy=policies.make(policy_name), name=f"alone-{d}")
        out[d] = {r.spec.id: r.first_start - r.spec.submit for r in res.jobs if r.first_start is not None}
    return out


@functools.lru_cache(maxsize=8)
def _alone(path: str, seed: int, load: float | None, trace_dir: str | None, limit: int | None):
    sc, jobs, _ = _prepared(path, seed, load, trace_dir, limit)
    return alone_waits(sc, jobs)


def run_one(path: str | Path, policy: str, *, load: float | None = None, seed: int | None = None,
            trace_dir: str | None = None, limit: int | None = None, sharing: bool = True,
            keep_samples: bool = True) -> dict:
    path = str(path)
    if seed is None:
        seed = load_scenario(path).seed
    sc, jobs, info = _prepared(path, seed, load, trace_dir, limit)
    res = simulate(scenario=sc, jobs=jobs, policy=policies.make(policy), name=policy)
    alone = _alone(path, seed, load, trace_dir, limit) if sharing else None
    m = metrics.compute(res, rho=info["rho"], alone_waits=alone, keep_samples=keep_samples)
    m.update(scenario=sc.name, load=load if load is not None else sc.load, seed=seed,
             compression=info["compression"], capacity=sc.capacity(),
             quota={d: sum(q.nominal for q in dep.quotas.values()) for d, dep in sc.departments.items()})
    if policy == "portal":
        m["engine"] = policies.REGISTRY["portal"].engine_name()
    return m
