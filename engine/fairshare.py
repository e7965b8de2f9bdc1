"""A department's fair-share statement (pure): what it is guaranteed, what it uses, borrows and lends, the decayed
history behind its fair-share factor, and what that factor does to its queued jobs' places.

Every figure is read from the same snapshot, with the same functions, that a cycle scores with
(``ordering.fair_standing``, ``quota.QuotaBook``, ``Scorer.order_key``), so the statement cannot disagree with
the engine:

* per quota scope (a flavor, or ``flavor@cluster``): **guaranteed** is the nominal quota, **used** the GPUs its
  admitted and running jobs hold there, **borrowed** what it uses above its nominal quota, and **lent** its share
  of what the others borrow: the cohort's borrowed GPUs in the scope split among the departments with idle
  lendable nominal (``min(lendable, nominal - used)``) in proportion to it, so the lent column sums to the
  borrowed one;
* **history**: its decayed GPU-seconds (each second weighted 2^(-age / usage_half_life_s)), its share of the
  cohort's, its share of the GPUs running now and of the nominal quotas (its entitlement); its use ratio is the
  mean of the two shares over its entitlement, and its factor ``2 ** (-(fair_share_weight / 100) * (ratio - 1))``;
* **queue places**: each queued job's place in its flavor's pending order now, and the place it would hold with
  its department's factor at 1 (exactly its share), everyone else's unchanged.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from fractions import Fraction

from .fractions import MILLI
from .ordering import Scorer, use_inputs
from .policy import fair_factor, fair_shares, use_ratios
from .quota import QuotaBook, in_milli, scope_key
from .teams import SEPARATOR, account, tree_ratios
from .types import Snapshot


@dataclass(frozen=True, slots=True)
class ScopeLine:
    scope: str  # the flavor, or flavor@cluster for a per-cluster quota
    guaranteed: int  # nominal quota
    borrowing_limit: int | None
    lending_limit: int | None
    used: int
    borrowed: int
    lent: float


@dataclass(frozen=True, slots=True)
class QueuePlace:
    job_id: int
    flavor: str
    tier: str
    place: int  # 1 = next in its flavor's pending order
    place_at_par: int  # its place with its department's factor at 1
    of: int  # the pending jobs of the flavor


@dataclass(frozen=True, slots=True)
class TeamLine:
    """A team's place in the fair-share tree inside its department (``teams.tree_ratios``)."""

    team: str
    nominal: int  # its nominal quotas, every flavor together
    running_gpus: int
    decayed_gpu_seconds: float
    use_ratio: float  # inside the department (1.0: exactly its share of the teams' quotas)
    factor: float  # the team's own fair factor; its jobs' is the department's times this


@dataclass(frozen=True, slots=True)
class FairStatement:
    department: str
    scopes: tuple[ScopeLine, ...]
    decayed_gpu_seconds: float
    history_share: float  # of the cohort's decayed GPU-seconds (0..1)
    running_gpus: int
    running_share: float  # of the GPUs running now (0..1)
    entitled_share: float  # of the nominal quotas (0..1)
    use_ratio: float
    factor: float
    half_life_s: float
    fair_share_weight: float
    places: tuple[QueuePlace, ...]
    teams: tuple[TeamLine, ...] = ()  # its teams' lines, by name (empty: a department without teams)


def fair_statements(snapshot: Snapshot) -> dict[str, FairStatement]:
    """Every department's statement (those with a quota, running jobs, usage or queued jobs), by name."""
    policy = snapshot.policy
    nominal, running = use_inputs(snapshot)
    ratios = use_ratios(nominal=nominal, running=running, usage=snapshot.usage)
    history = fair_shares(snapshot.usage)
    total_nominal = sum(max(0, n) for n in nominal.values())
    total_running = sum(max(0, n) for n in running.values())
    departments = sorted(set(ratios) | {j.department for j in snapshot.pending})
    scopes = _scope_lines(snapshot)
    places = _places(snapshot, departments)
    teams = _team_lines(snapshot, ratios)
    out = {}
    for d in departments:
        ratio = ratios.get(d, 1.0)
        out[d] = FairStatement(
            department=d, scopes=tuple(scopes.get(d, ())),
            decayed_gpu_seconds=max(0.0, float(snapshot.usage.get(d, 0.0))),
            history_share=history.get(d, 0.0),
            running_gpus=max(0, running.get(d, 0)),
            running_share=max(0, running.get(d, 0)) / total_running if total_running else 0.0,
            entitled_share=max(0, nominal.get(d, 0)) / total_nominal if total_nominal else 0.0,
            use_ratio=ratio, factor=fair_factor(policy, ratio),
            half_life_s=policy.usage_half_life_s, fair_share_weight=policy.fair_share_weight,
            places=tuple(places.get(d, ())),
            teams=tuple(teams.get(d, ())),
        )
    return out


def _team_lines(snapshot: Snapshot, ratios: dict[str, float]) -> dict[str, list[TeamLine]]:
    tree = tree_ratios(snapshot, ratios)
    nominal: dict[tuple[str, str], int] = defaultdict(int)
    for q in snapshot.team_quotas:
        nominal[(q.department, q.team)] += max(0, q.nominal)
    running: dict[tuple[str, str], int] = defaultdict(int)
    for job in snapshot.running:
        if job.team:
            running[(job.department, job.team)] += job.total_gpus
    out: dict[str, list[TeamLine]] = defaultdict(list)
    for (d, t), n in sorted(nominal.items()):
        inside = tree.get(account(d, t), 1.0) - ratios.get(d, 1.0) + 1.0
        out[d].append(TeamLine(team=t, nominal=n, running_gpus=running.get((d, t), 0),
                               decayed_gpu_seconds=max(0.0, float(snapshot.team_usage.get((d, t), 0.0))),
                               use_ratio=round(inside, 4), factor=fair_factor(snapshot.policy, inside)))
    return out


def _quota_units(value: int, key: str) -> int | Fraction:
    """The book's use of ``key`` in the quota rows' units: GPUs (exact) for a GPU flavor, counted in milli-GPUs."""
    if not in_milli(key):
        return value
    whole, part = divmod(value, MILLI)
    return whole if part == 0 else Fraction(value, MILLI)


def _scope_lines(snapshot: Snapshot) -> dict[str, list[ScopeLine]]:
    book = QuotaBook(snapshot.quotas, snapshot.running)
    by_scope: dict[str, list] = defaultdict(list)
    for q in sorted(snapshot.quotas, key=lambda q: (q.flavor, q.cluster or "", q.department)):
        by_scope[scope_key(q.flavor, q.cluster)].append(q)
    out: dict[str, list[ScopeLine]] = defaultdict(list)
    for key, quotas in sorted(by_scope.items()):
        used = {q.department: _quota_units(book.running_usage.get((q.department, key), 0), key) for q in quotas}
        borrowed = {q.department: max(0, used[q.department] - max(0, q.nominal)) for q in quotas}
        idle = {}
        for q in quotas:
            nominal = max(0, q.nominal)
            lendable = nominal if q.lending_limit is None else min(nominal, max(0, q.lending_limit))
            idle[q.department] = min(lendable, max(0, nominal - used[q.department]))
        total_borrowed, total_idle = sum(borrowed.values()), sum(idle.values())
        for q in quotas:
            lent = total_borrowed * idle[q.department] / total_idle if total_idle else 0.0
            out[q.department].append(ScopeLine(
                scope=key, guaranteed=max(0, q.nominal), borrowing_limit=q.borrowing_limit,
                lending_limit=q.lending_limit, used=used[q.department], borrowed=borrowed[q.department],
                lent=round(min(lent, idle[q.department]), 2)))
    return out


def _places(snapshot: Snapshot, departments: list[str]) -> dict[str, list[QueuePlace]]:
    if not snapshot.pending:
        return {}
    scorer = Scorer(snapshot)
    by_flavor: dict[str, list] = defaultdict(list)
    for job in snapshot.pending:
        by_flavor[job.flavor].append(job)
    out: dict[str, list[QueuePlace]] = defaultdict(list)
    for flavor, jobs in sorted(by_flavor.items()):
        keys = dict(zip((j.id for j in jobs), scorer.cycle_keys(jobs), strict=True))
        order = sorted(jobs, key=lambda j: keys[j.id])
        place = {j.id: i + 1 for i, j in enumerate(order)}
        for d in sorted({j.department for j in jobs}):
            par = dict(scorer.ratios)
            par[d] = 1.0
            for acct, r in scorer.tree.items():  # its teams keep their part inside the department
                if acct.partition(SEPARATOR)[0] == d:
                    par[acct] = r - scorer.ratios.get(d, 1.0) + 1.0
            # the others keep this cycle's keys; only this department's jobs move
            at_par = {j.id: (scorer.order_key(j, par) if j.department == d else keys[j.id]) for j in jobs}
            order_par = sorted(jobs, key=lambda j: at_par[j.id])
            place_par = {j.id: i + 1 for i, j in enumerate(order_par)}
            for j in order:
                if j.department == d:
                    out[d].append(QueuePlace(job_id=j.id, flavor=flavor, tier=j.tier, place=place[j.id],
                                             place_at_par=place_par[j.id], of=len(jobs)))
    return out
