"""Kueue-style quotas in one cohort: nominal, borrowing limit, lending limit per department x flavor.

Per flavor, each department's nominal quota splits into a *guaranteed* part (nominal - lendable, never lent)
and a *lendable* part (``lending_limit``, or all of nominal when None). The cohort's shared pool for the
flavor is the sum of lendable parts; a department's usage above its guaranteed part draws on that pool.
A job of department ``d`` needing ``k`` more GPUs is admissible quota-wise when

* ``usage + k <= nominal + borrowing_limit`` (no limit when None), and
* the pool's draw after admission ``sum_d max(0, usage_d - guaranteed_d) <= sum_d lendable_d``.

A department within its nominal quota only fails the second test when others borrowed its lent GPUs: it then
reclaims them by preemption. A job is *borrowed* when ``usage + k > nominal``. A department without a quota
row for a flavor has nominal 0 and borrowing limit 0: it cannot use that flavor.

Several clusters: a quota is *global* (``Quota.cluster`` None: the department's GPUs of the flavor on every
cluster count) or *per cluster* (only that cluster's GPUs of the flavor count). Each is its own *scope* with
its own cohort pool: per-cluster quotas lend and borrow only among the same cluster's per-cluster quotas, since
a GPU lent on one cluster cannot be used on another; global quotas lend and borrow across clusters. A
department's use on cluster ``c`` counts in its per-cluster scope of ``c`` when it has a row there, and in its
global scope when it has a global row, or has no row for ``c`` (then, as before, a missing global row means
nominal 0). A job must fit every scope it counts in: a global row with a per-cluster row caps the department's
share of one cluster inside its global quota. Scope keys are the flavor (global) and ``flavor@cluster``; with
no per-cluster rows every key is the flavor, and the book behaves exactly as with one cluster.

Units: the book counts a GPU flavor's keys in **milli-GPUs** (a whole GPU is 1000; ``PendingJob.gpu_milli``), so
a fraction of a GPU adds and compares as an int, exactly; a CPU pool's keys in their own units (millicores,
MiB). Every ``k``, ``removed`` and ``delta`` a method takes is in those units; the quota rows (whole GPUs) are
converted when the book is made, and the details it gives (``detail``) are in GPUs again.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from . import reasons
from .fractions import MILLI, gpus_of
from .shapes import CPU, MEMORY, resource_key
from .types import Quota, RunningJob

Key = tuple[str, str]


class QuotaBook:
    __slots__ = ("limits", "usage", "running_usage", "pool_cap", "pool_used", "scoped")

    def __init__(self, quotas: Iterable[Quota], running: Iterable[RunningJob]):
        # (nominal, borrowing_limit or None, guaranteed), per (department, scope key)
        self.limits: dict[Key, tuple[int, int | None, int]] = {}
        self.pool_cap: dict[str, int] = defaultdict(int)
        # (department, flavor) pairs with at least one per-cluster row: only they have more than one scope
        self.scoped: set[Key] = set()
        for q in sorted(quotas, key=lambda q: (q.department, q.flavor, q.cluster or "")):
            unit = MILLI if in_milli(q.flavor) else 1
            nominal = max(0, q.nominal) * unit
            lendable = nominal if q.lending_limit is None else min(nominal, max(0, q.lending_limit) * unit)
            limit = None if q.borrowing_limit is None else max(0, q.borrowing_limit) * unit
            key = scope_key(q.flavor, q.cluster)
            self.limits[(q.department, key)] = (nominal, limit, nominal - lendable)
            self.pool_cap[key] += lendable
            if q.cluster is not None:
                self.scoped.add((q.department, q.flavor))
        self.usage: dict[Key, int] = defaultdict(int)
        for job in running:
            if not self.scoped:  # (one scope per flavor: the flavor's)
                self.usage[(job.department, job.flavor)] += job.gpu_milli
                continue
            for key in self.keys(job.department, job.flavor, job.cluster):
                self.usage[(job.department, key)] += job.gpu_milli
        for job in running:  # pods on CPU pools: their cores and memory count under the pool's resource keys
            for flavor, _, cpu, mem in job.cpu_pods:
                for resource, k in ((CPU, cpu), (MEMORY, mem)):
                    for key in self.keys(job.department, resource_key(flavor, resource), job.cluster):
                        self.usage[(job.department, key)] += k
        self.running_usage: dict[Key, int] = dict(self.usage)  # before this cycle's admissions
        self.pool_used: dict[str, int] = defaultdict(int)
        for (dept, key), used in sorted(self.usage.items()):
            self.pool_used[key] += max(0, used - self.guaranteed(dept, key))

    def clone(self) -> QuotaBook:
        other = QuotaBook.__new__(QuotaBook)
        other.limits = self.limits
        other.pool_cap = self.pool_cap
        other.scoped = self.scoped
        other.usage = defaultdict(int, self.usage)
        other.running_usage = self.running_usage
        other.pool_used = defaultdict(int, self.pool_used)
        return other

    def keys(self, dept: str, flavor: str, cluster: str | None) -> tuple[str, ...]:
        """The scopes that ``dept``'s GPUs of ``flavor`` on ``cluster`` count in (None: the global one only)."""
        if cluster is None or (dept, flavor) not in self.scoped:
            return (flavor,)
        local = scope_key(flavor, cluster)
        if (dept, local) not in self.limits:
            return (flavor,)
        return (flavor, local) if (dept, flavor) in self.limits else (local,)

    def counts(self, dept: str, flavor: str, cluster: str | None, key: str) -> bool:
        return key in self.keys(dept, flavor, cluster)

    def has(self, dept: str, flavor: str) -> bool:
        """Whether the department has a quota row of ``flavor`` (a scope key) anywhere."""
        return (dept, flavor) in self.limits or (dept, flavor) in self.scoped

    def nominal(self, dept: str, key: str) -> int:
        return self.limits.get((dept, key), (0, 0, 0))[0]

    def guaranteed(self, dept: str, key: str) -> int:
        return self.limits.get((dept, key), (0, 0, 0))[2]

    def over_nominal(self, dept: str, flavor: str, removed: int = 0, cluster: str | None = None) -> bool:
        """Whether the department's *running* jobs (not this cycle's admissions) exceed its nominal quota in a
        scope its GPUs on ``cluster`` count in, after ``removed`` GPUs of them there are evicted: only then may
        its borrowed jobs be victims."""
        return any(
            self.running_usage.get((dept, key), 0) - removed > self.nominal(dept, key)
            for key in self.keys(dept, flavor, cluster)
        )

    def within_nominal(self, dept: str, flavor: str, delta: int, cluster: str | None = None) -> bool:
        """Whether the department's use changed by ``delta`` GPUs on ``cluster`` stays within nominal in every
        scope it counts in."""
        return all(
            self.usage[(dept, key)] + delta <= self.nominal(dept, key) for key in self.keys(dept, flavor, cluster)
        )

    def borrows(self, dept: str, flavor: str, k: int, cluster: str | None = None) -> bool:
        if not self.scoped:  # (the common case, no per-cluster quota anywhere: one scope, no generator)
            return self.usage[(dept, flavor)] + k > self.limits.get((dept, flavor), (0, 0, 0))[0]
        return any(self.usage[(dept, key)] + k > self.nominal(dept, key) for key in self.keys(dept, flavor, cluster))

    def never(self, dept: str, flavor: str, k: int, cluster: str | None = None) -> str | None:
        """The reason code when ``k`` GPUs exceed what the department could ever hold, else None."""
        if not self.scoped:  # (the common case: one scope, no loop)
            nominal, limit, guaranteed = self.limits.get((dept, flavor), (0, 0, 0))
            if limit is not None and k > nominal + limit:
                return reasons.QUOTA_EXHAUSTED if limit == 0 else reasons.BORROW_LIMIT
            over = k - guaranteed
            if (over if over > 0 else 0) > self.pool_cap.get(flavor, 0):
                return reasons.QUOTA_EXHAUSTED
            return None
        for key in self.keys(dept, flavor, cluster):
            nominal, limit, guaranteed = self.limits.get((dept, key), (0, 0, 0))
            if limit is not None and k > nominal + limit:
                return reasons.QUOTA_EXHAUSTED if limit == 0 else reasons.BORROW_LIMIT
            if max(0, k - guaranteed) > self.pool_cap.get(key, 0):
                return reasons.QUOTA_EXHAUSTED
        return None

    def limit_code(self, dept: str, flavor: str, k: int, cluster: str | None = None) -> str | None:
        """The reason code when ``k`` more GPUs would take the department beyond nominal + borrowing limit
        now (its own running jobs hold what it may use), else None."""
        if not self.scoped:  # (the common case: one scope, no loop)
            nominal, limit, _ = self.limits.get((dept, flavor), (0, 0, 0))
            if limit is not None and self.usage[(dept, flavor)] + k > nominal + limit:
                return reasons.QUOTA_EXHAUSTED if limit == 0 else reasons.BORROW_LIMIT
            return None
        for key in (flavor,) if not self.scoped else self.keys(dept, flavor, cluster):
            nominal, limit, _ = self.limits.get((dept, key), (0, 0, 0))
            if limit is not None and self.usage[(dept, key)] + k > nominal + limit:
                return reasons.QUOTA_EXHAUSTED if limit == 0 else reasons.BORROW_LIMIT
        return None

    def check(
        self,
        dept: str,
        flavor: str,
        k: int,
        removed: Mapping[str, int] | None = None,
        cluster: str | None = None,
    ) -> tuple[str | None, dict[str, object]]:
        """(None, {}) when ``k`` more GPUs on ``cluster`` are admissible after ``removed`` GPUs per department
        are freed there, else (reason code, detail)."""
        if not self.scoped:
            return self._check(dept, flavor, k, removed)
        keys = self.keys(dept, flavor, cluster)
        for key in keys:
            gone = removed
            if removed and self.scoped:
                # a freed GPU helps a scope only when its department's use there counts in it
                gone = {d: n for d, n in removed.items() if self.counts(d, flavor, cluster, key)}
            code, detail = self._check(dept, key, k, gone)
            if code is not None:
                if key != flavor:
                    detail["quota_cluster"] = cluster
                return code, detail
        return None, {}

    def _check(self, dept: str, flavor: str, k: int, removed: Mapping[str, int] | None) -> tuple[str | None, dict]:
        nominal, limit, guaranteed = self.limits.get((dept, flavor), (0, 0, 0))
        if not removed:  # the hot path: one job, nothing freed
            used = self.usage[(dept, flavor)]
            new = used + k
            if limit is not None and new > nominal + limit:
                code = reasons.QUOTA_EXHAUSTED if limit == 0 else reasons.BORROW_LIMIT
                return code, self._detail(dept, flavor, k, used)
            draw = self.pool_used.get(flavor, 0) + max(0, new - guaranteed) - max(0, used - guaranteed)
            if draw > self.pool_cap.get(flavor, 0):
                code = reasons.QUOTA_LENT_OUT if new <= nominal else reasons.QUOTA_EXHAUSTED
                return code, self._detail(dept, flavor, k, used)
            return None, {}
        used = self.usage[(dept, flavor)] - removed.get(dept, 0)
        new = used + k
        if limit is not None and new > nominal + limit:
            code = reasons.QUOTA_EXHAUSTED if limit == 0 else reasons.BORROW_LIMIT
            return code, self._detail(dept, flavor, k, used)
        draw = self.pool_used.get(flavor, 0)
        for other in set(removed) | {dept}:
            before = self.usage[(other, flavor)]
            after = before - removed.get(other, 0) + (k if other == dept else 0)
            g = self.guaranteed(other, flavor)
            draw += max(0, after - g) - max(0, before - g)
        if draw > self.pool_cap.get(flavor, 0):
            code = reasons.QUOTA_LENT_OUT if new <= nominal else reasons.QUOTA_EXHAUSTED
            return code, self._detail(dept, flavor, k, used)
        return None, {}

    def detail(
        self, dept: str, flavor: str, k: int, used: int | None = None, cluster: str | None = None
    ) -> dict[str, object]:
        """The figures of the scope that blocks ``k`` more GPUs on ``cluster`` (the last one when none does)."""
        keys = self.keys(dept, flavor, cluster)
        key = keys[-1]
        for candidate in keys:
            nominal, limit, guaranteed = self.limits.get((dept, candidate), (0, 0, 0))
            use = self.usage[(dept, candidate)]
            if (
                (limit is not None and use + k > nominal + limit)
                or max(0, k - guaranteed) > self.pool_cap.get(candidate, 0)
                or self._check(dept, candidate, k, None)[0] is not None
            ):
                key = candidate
                break
        detail = self._detail(dept, key, k, used)
        if key != flavor:
            detail["quota_cluster"] = cluster
        return detail

    def _detail(self, dept: str, key: str, k: int, used: int | None = None) -> dict[str, object]:
        nominal, limit, _ = self.limits.get((dept, key), (0, 0, 0))
        in_use = self.usage[(dept, key)] if used is None else used
        idle = max(0, self.pool_cap.get(key, 0) - self.pool_used.get(key, 0))
        if in_milli(key):  # (said in GPUs, as the quota rows are)
            return {"in_use": gpus_of(in_use), "nominal": gpus_of(nominal),
                    "borrowing_limit": None if limit is None else gpus_of(limit), "requested": gpus_of(k),
                    "cohort_idle": gpus_of(idle)}
        return {"in_use": in_use, "nominal": nominal, "borrowing_limit": limit, "requested": k, "cohort_idle": idle}

    def hold(self, dept: str, flavor: str, k: int) -> None:
        """Count ``k`` GPUs of the department's global scope of ``flavor`` as in use though nothing runs on them:
        its teams' idle guaranteed GPUs (``teams``), which it lends to nobody. They count from the start of the
        cycle (its running use too, so its borrowed jobs are reclaimable while they draw on the cohort)."""
        before = self.usage[(dept, flavor)]
        g = self.guaranteed(dept, flavor)
        self.usage[(dept, flavor)] = before + k
        self.running_usage[(dept, flavor)] = self.running_usage.get((dept, flavor), 0) + k
        self.pool_used[flavor] += max(0, before + k - g) - max(0, before - g)

    def over(self, dept: str, key: str, used: int) -> int:
        """GPUs of ``used`` that draw on the scope's cohort pool (above the guaranteed part)."""
        return max(0, used - self.guaranteed(dept, key))

    def add(self, dept: str, flavor: str, k: int, cluster: str | None = None) -> None:
        if not self.scoped:  # (the common case: one scope, the flavor's)
            g = self.limits.get((dept, flavor), (0, 0, 0))[2]
            before = self.usage[(dept, flavor)]
            after = self.usage[(dept, flavor)] = before + k
            self.pool_used[flavor] += max(0, after - g) - max(0, before - g)
            return
        for key in self.keys(dept, flavor, cluster):
            g = self.guaranteed(dept, key)
            before = self.usage[(dept, key)]
            self.usage[(dept, key)] = before + k
            self.pool_used[key] += max(0, before + k - g) - max(0, before - g)


def in_milli(key: str) -> bool:
    """Whether the book counts ``key`` (a flavor or scope key) in milli-GPUs: every key but a CPU pool's
    (``shapes.resource_key``, the only keys with a ``#``)."""
    return "#" not in key


def scope_key(flavor: str, cluster: str | None) -> str:
    """The book's key of a quota scope: the flavor for a global quota, ``flavor@cluster`` for a per-cluster one."""
    return flavor if cluster is None else f"{flavor}@{cluster}"
