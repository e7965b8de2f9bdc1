"""The state of one admission cycle, as the modules the cycle delegates to read it: results (admissions,
reasons, estimates), pricing (forks and replays) and verdicts (the memo of waiting jobs).

``engine.cycle.Cycle`` is the one implementation; this Protocol names, with their types, the attributes and
methods those modules use, so each takes the state explicitly and the cycle's module imports them without
their importing it back. The resizer (``resize.Resizer``) reads the state too, so the state names it only by
what the cycle asks of it (``Resizing``): a module that the state imported could not take the state typed."""

from __future__ import annotations

from typing import Any, Protocol

from .bookings import Calendar
from .eviction import Evictions
from .ordering import Scorer
from .outcomes import Outcome, Waiting
from .placement import Pool
from .quota import QuotaBook
from .shapes import CpuPool
from .sweeps import Gates
from .teams import TeamBook
from .topology import Topology
from .types import Admission, PendingJob, Policy, Resize, Role, RunningJob, Snapshot
from .user_limits import UserBook


class Resizing(Protocol):
    """The resizable jobs' soft pods, as the cycle uses them (``resize.Resizer``)."""

    def held(self, running: list[RunningJob]) -> list[RunningJob]: ...

    def settle(self) -> list[Resize]: ...


class CycleState(Protocol):
    # fixed for the snapshot (a fork shares them: ``pricing.SHARED``)
    snap: Snapshot
    now: float
    policy: Policy
    running: list[RunningJob]
    running_end: dict[int, float]  # running job -> its likely end
    order: list[PendingJob]  # the pending order
    keys: list[tuple]  # the order's keys
    fork_prices: bool
    user_limits: bool  # whether any member has a GPU limit (``UserBook.active``), asked by every job judged
    resizer: Resizing  # the resizable jobs' soft pods (``resize``; only the cycle itself settles them)
    team_quotas: bool  # whether any department has teams (``TeamBook.active``), asked by every job judged
    calendar: Calendar  # the bookings' and maintenance windows' holds (``bookings``)
    team_shares: bool  # whether any team has a share of its department's budget (its own entry in ``credits``)
    needs: dict[int, tuple]  # per job: its CPU roles and what they ask, with quota keys (``Cycle.cpu_needs``)

    # the working state (a fork copies or replaces each: ``pricing.REPLACED``)
    topology: Topology
    pools: dict[tuple[str, str], Pool]
    pools_by_flavor: dict[str, list[Pool]]
    closed_for: dict[int, dict[str, str]]  # job -> matching clusters closed to admissions
    likely_events: dict[tuple[str, str], list[tuple[float, int, int]]]
    scorer: Scorer
    quota: QuotaBook
    users: UserBook
    teams: TeamBook
    evictions: Evictions
    headroom_held: set[int]
    credits: dict[str, int] | None
    admissions: dict[int, Admission]
    reasons: dict[int, tuple[str, str, dict]]  # pending job -> (code, message, detail)
    gates: Gates
    # (likely end, department, flavor, milli-GPUs, cluster, user, array id or None) of the cycle's admissions
    admitted_end: list[tuple[float, str, str, int, str, str, int | None]]
    heads: dict[int, float]  # reserved heads -> reserved start
    heads_full: set[Pool]
    late_realtime: int
    verdicts: object | None  # the memo of waiting jobs (``verdicts.Verdicts``), None when off
    before: CycleState | None  # the fork taken before the priced winner being admitted
    outcomes: dict[int, Outcome]
    place: int
    prices: dict[int, int]  # priced winners' critical bids
    spent_shapes: set[tuple]
    order_sums: Any  # the running sums over ``order`` that the price bounds read (``pricing.OrderSums``), or None
    cpu_pools: dict[tuple[str, str], CpuPool]  # the CPU pools, by (cluster, flavor)
    cpu_short: dict[int, tuple[Role, dict]]  # jobs whose GPU gang had room but a CPU role did not
    cpu_only_admitted: int  # CPU-only admissions (they change no GPU pool)
    cpu_admitted: int  # admissions that took CPU pods (all that changes a CPU-only job's verdict)

    def __init__(self, snapshot: Snapshot, *, memo: bool = True, fork_prices: bool = True) -> None: ...

    def consider(self, job: PendingJob) -> Outcome: ...

    def judge(self, job: PendingJob) -> Outcome: ...

    def price_of(self, job: PendingJob) -> int: ...

    def across_quota(self, job: PendingJob) -> bool: ...

    def pend(self, job: PendingJob, code: str, detail: dict, note: str | None = None) -> Waiting: ...

    def cpu_quota(self, job: PendingJob) -> Waiting | None: ...
