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
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from . import reasons
from .types import Quota, RunningJob

Key = tuple[str, str]


class QuotaBook:
    __slots__ = ("limits", "usage", "running_usage", "pool_cap", "pool_used")

    def __init__(self, quotas: Iterable[Quota], running: Iterable[RunningJob]):
        # (nominal, borrowing_limit or None, guaranteed)
        self.limits: dict[Key, tuple[int, int | None, int]] = {}
        self.pool_cap: dict[str, int] = defaultdict(int)
        for q in sorted(quotas, key=lambda q: (q.department, q.flavor)):
            nominal = max(0, q.nominal)
            lendable = nominal if q.lending_limit is None else min(nominal, max(0, q.lending_limit))
            limit = None if q.borrowing_limit is None else max(0, q.borrowing_limit)
            self.limits[(q.department, q.flavor)] = (nominal, limit, nominal - lendable)
            self.pool_cap[q.flavor] += lendable
        self.usage: dict[Key, int] = defaultdict(int)
        for job in running:
            self.usage[(job.department, job.flavor)] += job.gpus
        self.running_usage: dict[Key, int] = dict(self.usage)  # before this cycle's admissions
        self.pool_used: dict[str, int] = defaultdict(int)
        for (dept, flavor), used in sorted(self.usage.items()):
            self.pool_used[flavor] += max(0, used - self.guaranteed(dept, flavor))

    def clone(self) -> QuotaBook:
        other = QuotaBook.__new__(QuotaBook)
        other.limits = self.limits
        other.pool_cap = self.pool_cap
        other.usage = defaultdict(int, self.usage)
        other.running_usage = self.running_usage
        other.pool_used = defaultdict(int, self.pool_used)
        return other

    def nominal(self, dept: str, flavor: str) -> int:
        return self.limits.get((dept, flavor), (0, 0, 0))[0]

    def guaranteed(self, dept: str, flavor: str) -> int:
        return self.limits.get((dept, flavor), (0, 0, 0))[2]

    def over_nominal(self, dept: str, flavor: str, removed: int = 0) -> bool:
        """Whether the department's *running* jobs (not this cycle's admissions) exceed its nominal quota
        after ``removed`` GPUs of them are evicted: only then may its borrowed jobs be victims."""
        return self.running_usage.get((dept, flavor), 0) - removed > self.nominal(dept, flavor)

    def borrows(self, dept: str, flavor: str, k: int) -> bool:
        return self.usage[(dept, flavor)] + k > self.nominal(dept, flavor)

    def never(self, dept: str, flavor: str, k: int) -> str | None:
        """The reason code when ``k`` GPUs exceed what the department could ever hold, else None."""
        nominal, limit, guaranteed = self.limits.get((dept, flavor), (0, 0, 0))
        if limit is not None and k > nominal + limit:
            return reasons.QUOTA_EXHAUSTED if limit == 0 else reasons.BORROW_LIMIT
        if max(0, k - guaranteed) > self.pool_cap.get(flavor, 0):
            return reasons.QUOTA_EXHAUSTED
        return None

    def limit_code(self, dept: str, flavor: str, k: int) -> str | None:
        """The reason code when ``k`` more GPUs would take the department beyond nominal + borrowing limit
        now (its own running jobs hold what it may use), else None."""
        nominal, limit, _ = self.limits.get((dept, flavor), (0, 0, 0))
        if limit is not None and self.usage[(dept, flavor)] + k > nominal + limit:
            return reasons.QUOTA_EXHAUSTED if limit == 0 else reasons.BORROW_LIMIT
        return None

    def check(
        self, dept: str, flavor: str, k: int, removed: Mapping[str, int] | None = None
    ) -> tuple[str | None, dict[str, object]]:
        """(None, {}) when ``k`` more GPUs are admissible after ``removed`` GPUs per department are freed,
        else (reason code, detail)."""
        nominal, limit, guaranteed = self.limits.get((dept, flavor), (0, 0, 0))
        if not removed:  # the hot path: one job, nothing freed
            used = self.usage[(dept, flavor)]
            new = used + k
            code = self.limit_code(dept, flavor, k)
            if code is not None:
                return code, self.detail(dept, flavor, k, used)
            draw = self.pool_used.get(flavor, 0) + max(0, new - guaranteed) - max(0, used - guaranteed)
            if draw > self.pool_cap.get(flavor, 0):
                code = reasons.QUOTA_LENT_OUT if new <= nominal else reasons.QUOTA_EXHAUSTED
                return code, self.detail(dept, flavor, k, used)
            return None, {}
        used = self.usage[(dept, flavor)] - removed.get(dept, 0)
        new = used + k
        if limit is not None and new > nominal + limit:
            code = reasons.QUOTA_EXHAUSTED if limit == 0 else reasons.BORROW_LIMIT
            return code, self.detail(dept, flavor, k, used)
        draw = self.pool_used.get(flavor, 0)
        for other in set(removed) | {dept}:
            before = self.usage[(other, flavor)]
            after = before - removed.get(other, 0) + (k if other == dept else 0)
            g = self.guaranteed(other, flavor)
            draw += max(0, after - g) - max(0, before - g)
        if draw > self.pool_cap.get(flavor, 0):
            code = reasons.QUOTA_LENT_OUT if new <= nominal else reasons.QUOTA_EXHAUSTED
            return code, self.detail(dept, flavor, k, used)
        return None, {}

    def detail(self, dept: str, flavor: str, k: int, used: int | None = None) -> dict[str, object]:
        nominal, limit, _ = self.limits.get((dept, flavor), (0, 0, 0))
        return {
            "in_use": self.usage[(dept, flavor)] if used is None else used,
            "nominal": nominal,
            "borrowing_limit": limit,
            "requested": k,
            "cohort_idle": max(0, self.pool_cap.get(flavor, 0) - self.pool_used.get(flavor, 0)),
        }

    def over(self, dept: str, flavor: str, used: int) -> int:
        """GPUs of ``used`` that draw on the cohort pool (above the guaranteed part)."""
        return max(0, used - self.guaranteed(dept, flavor))

    def add(self, dept: str, flavor: str, k: int) -> None:
        g = self.guaranteed(dept, flavor)
        before = self.usage[(dept, flavor)]
        self.usage[(dept, flavor)] = before + k
        self.pool_used[flavor] += max(0, before + k - g) - max(0, before - g)
