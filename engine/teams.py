"""Teams inside departments (one level): each team's split of its department's quota, and its place in the
fair-share tree.

Per (department, flavor) the department's nominal quota is split among its teams (``types.TeamQuota``); what
no team holds is the department's *unassigned share*, which members of no team draw on. A team's nominal has a
*guaranteed* part (nominal - lending limit, never lent to a sibling) and a *lendable* part (all of it when the
lending limit is None), as a department's has in the cohort (``quota``). A job of team ``t`` needing ``k``
GPUs of flavor ``f`` is admissible when, besides its department's own quota check:

* ``usage_t + k <= nominal_t + borrowing_limit_t`` (no limit when None): the team's borrowing limit
  (``team_borrow_limit``), and
* the department's own check (``QuotaBook.check``: its nominal, its borrowing limit and the cohort's pool)
  passes with its teams' idle guaranteed GPUs counted as in use (``QuotaBook.hold``): those GPUs stay their
  teams', neither a sibling nor another department may use them (``team_quota``: "team quota in use,
  department has 2 idle"); the job's own team's idle guaranteed GPUs are already counted, so it adds only
  what it needs beyond them (``need``).

So a team uses its own quota, then its siblings' idle lendable quota and the unassigned share (all inside the
department's nominal), then borrows from the cohort exactly as the department does today; a sibling's
guaranteed GPUs are never its to take, and a team's borrowing never takes another department's guarantee
(the department's own check still holds). A member of no team, or a team without a row for the flavor, has no
quota of its own there and no guaranteed part: it draws on the unassigned share and what the teams lend.
Team quotas count the department's GPUs of a flavor on every cluster together.

A department without team quotas is never looked at: the cycle asks this book nothing for its jobs, and it
decides exactly as before (``active`` is False for a snapshot without teams).

Fair share is a tree (``tree_ratios``): a team's use ratio inside its department (its share of the
department's GPUs running now and of its decayed history, over its share of the department's team quotas) is
combined with its department's in the cohort, so that its jobs' fair factor is the department's times the
team's (``2^-w(r_d - 1) x 2^-w(r_t - 1) = 2^-w((r_d + r_t - 1) - 1)``). Jobs of no team take the
department's factor alone.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping

from .fractions import milli_of
from .policy import use_ratios
from .quota import QuotaBook
from .types import PendingJob, RunningJob, Snapshot, TeamQuota

Key = tuple[str, str, str]  # (department, team, flavor)
SEPARATOR = "/"  # between a department and its team in an account name (slugs have no slash)


def account(department: str, team: str) -> str:
    """The fair-share account of a job: its department, or ``department/team`` for a team's job."""
    return department if not team else f"{department}{SEPARATOR}{team}"


class TeamBook:
    """The cycle's team quotas and what each team holds (mutable working state; the snapshot is not changed)."""

    __slots__ = ("limits", "guaranteed_teams", "usage", "departments", "held_keys", "distinct", "counted", "ends")

    def __init__(self, quotas: Iterable[TeamQuota], running: Iterable[RunningJob]):
        # (nominal, borrowing_limit or None, guaranteed) per (department, team, flavor)
        self.limits: dict[Key, tuple[int, int | None, int]] = {}
        # per (department, flavor), the teams with a guaranteed part (the only ones ``held`` sums over)
        self.guaranteed_teams: dict[tuple[str, str], list[str]] = defaultdict(list)
        self.departments: set[str] = set()
        # (department, flavor) pairs whose idle guaranteed GPUs the department's quota book holds (``hold_in``)
        self.held_keys: set[tuple[str, str]] = set()
        # Teams whose jobs may be judged otherwise than a member of no team's (a guaranteed part or a borrowing
        # limit of the flavor): any other team's job waits for the same reason, only said of its own team
        # (``verdicts`` keys them alike and renames the team, ``renamed``).
        self.distinct: set[Key] = set()
        for q in sorted(quotas, key=lambda q: (q.department, q.team, q.flavor)):
            nominal = max(0, q.nominal)
            lendable = nominal if q.lending_limit is None else min(nominal, max(0, q.lending_limit))
            limit = None if q.borrowing_limit is None else max(0, q.borrowing_limit)
            self.limits[(q.department, q.team, q.flavor)] = (nominal, limit, nominal - lendable)
            self.departments.add(q.department)
            if nominal - lendable > 0:
                self.guaranteed_teams[(q.department, q.flavor)].append(q.team)
            if nominal - lendable > 0 or limit is not None:
                self.distinct.add((q.department, q.team, q.flavor))
        self.usage: dict[Key, int] = defaultdict(int)
        # For the start estimates: the running jobs counted in ``usage``, and (likely end, department, team,
        # flavor, GPUs) of this cycle's admissions of teams' jobs (``add``), so a replay gives them back.
        self.counted: list[RunningJob] = []
        self.ends: list[tuple[float, str, str, str, int]] = []
        if self.departments:
            for job in running:
                if job.team and job.department in self.departments:
                    self.usage[(job.department, job.team, job.flavor)] += job.total_gpus
                    self.counted.append(job)

    def clone(self) -> TeamBook:
        other = TeamBook.__new__(TeamBook)
        other.limits, other.guaranteed_teams, other.departments = self.limits, self.guaranteed_teams, self.departments
        other.held_keys, other.distinct = self.held_keys, self.distinct
        other.usage = defaultdict(int, self.usage)
        other.counted, other.ends = self.counted, list(self.ends)
        return other

    @property
    def active(self) -> bool:
        return bool(self.departments)

    def applies(self, job: PendingJob) -> bool:
        """Whether the team book has anything to say of ``job``: its department has teams."""
        return job.department in self.departments

    def over_limit(self, job: PendingJob) -> dict | None:
        """The detail of a ``team_borrow_limit`` wait when ``job`` would take its team past its nominal plus its
        borrowing limit (``never`` when the job alone is larger than that), else None."""
        if not job.team:
            return None
        found = self.limits.get((job.department, job.team, job.flavor))
        if found is None or found[1] is None:
            return None
        nominal, limit, _ = found
        used, k = self.usage[(job.department, job.team, job.flavor)], job.total_gpus
        if used + k <= nominal + limit:
            return None
        detail = self.detail(job.department, job.team, job.flavor, k)
        if k > nominal + limit:
            detail["never"] = True
        return detail

    def held(self, department: str, team: str, flavor: str) -> int:
        """GPUs of ``flavor`` that the other teams' guaranteed parts hold and those teams do not use now."""
        out = 0
        for other in self.guaranteed_teams.get((department, flavor), ()):
            if other != team:
                spare = self.limits[(department, other, flavor)][2] - self.usage[(department, other, flavor)]
                if spare > 0:
                    out += spare
        return out

    def holders(self, department: str, team: str, flavor: str) -> list[str]:
        """The other teams whose guaranteed parts of ``flavor`` are partly idle (``held``'s), by name."""
        return [
            other for other in self.guaranteed_teams.get((department, flavor), ())
            if other != team
            and self.usage[(department, other, flavor)] < self.limits[(department, other, flavor)][2]
        ]  # fmt: skip

    def detail(self, department: str, team: str, flavor: str, k: int) -> dict[str, object]:
        nominal, limit, _ = self.limits.get((department, team, flavor), (0, None, 0))
        return {
            "level": "team",
            "team": team,
            "team_in_use": self.usage[(department, team, flavor)] if team else 0,
            "team_nominal": nominal,
            "team_borrowing_limit": limit,
            "requested": k,
        }

    def idle_guarantees(self) -> dict[tuple[str, str], int]:
        """Per (department, flavor), the GPUs its teams' guaranteed parts hold that those teams do not use."""
        out: dict[tuple[str, str], int] = {}
        for (d, f), teams in sorted(self.guaranteed_teams.items()):
            out[(d, f)] = sum(max(0, self.limits[(d, t, f)][2] - self.usage[(d, t, f)]) for t in teams)
        return out

    def hold_in(self, book: QuotaBook) -> None:
        """Make the department's quota book count its teams' idle guaranteed GPUs as in use (``QuotaBook.hold``):
        the cohort cannot borrow them, and a sibling's job needs room beyond them. Only in a global quota: a
        department whose quota of the flavor is per cluster gets its teams' borrowing limits only."""
        for (d, f), idle in self.idle_guarantees().items():
            if (d, f) in book.scoped or (d, f) not in book.limits:
                continue
            self.held_keys.add((d, f))
            if idle > 0:
                book.hold(d, f, milli_of(idle))

    def need(self, job: PendingJob) -> int:
        """What ``job`` adds to its department's quota book: its GPUs, less those of its team's guaranteed part
        that the book already holds for it."""
        k = job.total_gpus
        if (job.department, job.flavor) not in self.held_keys:
            return k
        return max(0, k - self.own_idle(job.department, job.team, job.flavor))

    def own_idle(self, department: str, team: str, flavor: str) -> int:
        """What the team's own guaranteed part of ``flavor`` holds idle (0 for no team, or no such part)."""
        if not team:
            return 0
        found = self.limits.get((department, team, flavor))
        return 0 if found is None else max(0, found[2] - self.usage[(department, team, flavor)])

    def verdict_team(self, job: PendingJob) -> str:
        """The team a remembered verdict of ``job`` is keyed by: its own when it is judged as itself, else ""."""
        return job.team if job.team and (job.department, job.team, job.flavor) in self.distinct else ""

    def renamed(self, job: PendingJob, reason: tuple[str, str, dict]) -> tuple[str, str, dict]:
        """A remembered ``team_quota`` verdict said of ``job``'s own team (its figures, its name)."""
        code, message, detail = reason
        if detail.get("team", "") == job.team:
            return reason
        mine = {**detail, **self.detail(job.department, job.team, job.flavor, job.total_gpus)}
        if held_note(detail) in message:
            message = message.replace(held_note(detail), held_note(mine))
        return code, message, mine

    def add(self, department: str, team: str, flavor: str, k: int, end: float | None = None) -> None:
        """The team holds ``k`` more GPUs of ``flavor`` (an admission: until its likely ``end``, when given)."""
        if team and department in self.departments:
            self.usage[(department, team, flavor)] += k
            if end is not None:
                self.ends.append((end, department, team, flavor, k))

    def cap(self, department: str, team: str, flavor: str) -> int | None:
        """The most GPUs of ``flavor`` the team may ever hold (nominal + borrowing limit), None: no bound."""
        found = self.limits.get((department, team, flavor)) if team else None
        if found is None or found[1] is None:
            return None
        return found[0] + found[1]


def limit_note(detail: Mapping[str, object]) -> str:
    """The one-line note of a ``team_borrow_limit`` wait."""
    cap = int(detail["team_nominal"]) + int(detail["team_borrowing_limit"] or 0)
    if detail.get("never"):
        return f"the job needs {detail['requested']} GPUs, more than team {detail['team']} may ever hold ({cap})"
    return (
        f"team {detail['team']} holds {detail['team_in_use']} of nominal {detail['team_nominal']} + borrowing limit "
        f"{detail['team_borrowing_limit']}, {detail['requested']} requested"
    )


def held_note(detail: Mapping[str, object]) -> str:
    """The one-line note of a ``team_quota`` wait: the level, and what the department has idle and for whom."""
    whose = ", ".join(detail.get("guaranteed_to", ())) or "other teams"
    team = f"team {detail['team']} quota" if detail.get("team") else "the unassigned share"
    return (
        f"{team} in use ({detail['team_in_use']} of nominal {detail['team_nominal']}, {detail['requested']} "
        f"requested), department has {detail['department_idle']} idle, guaranteed to {whose}"
    )


def tree_ratios(snapshot: Snapshot, ratios: Mapping[str, float]) -> dict[str, float]:
    """The fair-share tree's ratios of the teams' accounts (``account``), from the departments' ``ratios``: each
    team's ratio inside its department combined with its department's (``r_d + r_t - 1``, so its fair factor is
    the product of the two). Empty without teams."""
    if not snapshot.team_quotas:
        return {}
    nominal: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for q in snapshot.team_quotas:
        nominal[q.department][q.team] += max(0, q.nominal)
    # Only the teams with a split are in the tree: a team named for its share of the budget alone counts as
    # no team here, as its jobs did before.
    running: dict[str, dict[str, int]] = defaultdict(lambda: defaultdict(int))
    for job in snapshot.running:
        if job.team and job.team in nominal.get(job.department, ()):
            running[job.department][job.team] += job.total_gpus
    usage: dict[str, dict[str, float]] = defaultdict(dict)
    for (d, t), seconds in snapshot.team_usage.items():
        if t and t in nominal.get(d, ()):
            usage[d][t] = seconds
    out: dict[str, float] = {}
    for d in sorted(nominal):
        inside = use_ratios(nominal=nominal[d], running=running.get(d, {}), usage=usage.get(d, {}))
        for t, r in inside.items():
            out[account(d, t)] = ratios.get(d, 1.0) + r - 1.0
    return out
