"""The calendar (pure): GPUs booked ahead for their owners, and maintenance windows of nodes.

A booking holds ``gpus`` GPUs of a flavor on a cluster from ``start`` to ``end`` for its owners (departments,
teams or users). A maintenance window takes nodes (named, by label, or a whole cluster) out of service from
``start`` to ``end``. The clock is the snapshot's ``now``. The rules, as Slurm applies a job's time limit to
its reservations (``scontrol create reservation``, ``Flags=MAINT``):

1. *Before a window* the engine starts no job on held capacity that it would still hold at the window's start
   by its time limit (``max_runtime_s``). The hold is an EASY reservation of the pool (``Pool.reserve``) with
   the window's start as its reserved start: a job that ends before it backfills onto the held GPUs, one that
   would run past it keeps off them. A booking holds the GPUs that are free at its start (running pods at
   their time limit), the fullest nodes first so that a gang of the owners finds whole nodes; a maintenance
   window holds every GPU of its nodes.
2. *Inside a booking* what its owners do not use yet stays held against everyone else (as Slurm, nobody else
   uses a booking's idle GPUs: an owner arriving at 10:30 finds them free). An owner's job starts first on the
   booking's held GPUs, outside its department's quota (the booking is its quota), when it fits there and its
   time limit ends by the booking's end; otherwise it queues as any job on the rest of the cluster. The
   owners' jobs running inside the window (started in it, ending by its end) count against the booking and
   not against their quota.
3. *At the end* the hold is gone: the capacity is everyone's again.
4. *Inside a maintenance window* its nodes are out of the schedulable set (``adjust``), as a cordoned node:
   running jobs are left to run (rule 1 kept new ones away; a job started before the window was declared
   runs on until the node is drained by hand, and is then requeued as after any node drain).

The cycle calls ``adjust`` on the snapshot, builds a ``Calendar`` once the pools hold the running pods, asks
``owned`` for the owner's path, ``place_owner`` to start an owner's job on its booking, and ``blocking`` for
the reason of a job that waits for a hold. The estimates replay each hold as GPUs taken from now to the
window's end (``replay_holds``): an upper bound, as they are for every job.
"""

from __future__ import annotations

from dataclasses import replace

from . import reasons
from .explain import duration_text
from .placement import Pool
from .teams import account
from .types import Booking, MaintenanceWindow, Node, PendingJob, RunningJob, Snapshot

BOOKING = "booking"
MAINTENANCE = "maintenance"


def covers(window: MaintenanceWindow, node: Node) -> bool:
    """Whether ``window`` takes ``node`` out of service: its cluster's node named, or carrying every label of
    the selector, or any node of the cluster when the window names neither."""
    if node.cluster != window.cluster:
        return False
    if not window.nodes and not window.selector:
        return True
    if node.name in window.nodes:
        return True
    return bool(window.selector) and set(window.selector) <= set(node.labels)


def adjust(snapshot: Snapshot) -> Snapshot:
    """The snapshot with the nodes of the maintenance windows under way out of the schedulable set."""
    now = snapshot.now
    active = [m for m in snapshot.maintenance if m.start <= now < m.end]
    if not active:
        return snapshot
    nodes = tuple(replace(n, schedulable=False) if n.schedulable and any(covers(m, n) for m in active) else n
                  for n in snapshot.nodes)
    return replace(snapshot, nodes=nodes)


def owns(booking: Booking, department: str, user: str, team: str | None = None) -> bool:
    """Whether a job of ``user`` in ``department`` (and ``team``) is one of the booking's owners'. A booking
    names its teams by account (``department/team``): team slugs are unique only inside a department."""
    return (department in booking.departments or (user != "" and user in booking.users)
            or (bool(team) and account(department, team) in booking.teams))


WEEKDAYS = ("Thu", "Fri", "Sat", "Sun", "Mon", "Tue", "Wed")  # the epoch's day was a Thursday


def clock_text(t: float, now: float) -> str:
    """An instant (seconds since the epoch) as the reasons give it: the UTC hour and minute, with the weekday
    when it is another day than ``now``'s within a week, the number of days ahead beyond that."""
    day, second = divmod(int(t), 86400)
    text = f"{second // 3600:02d}:{second % 3600 // 60:02d} UTC"
    ahead = day - int(now) // 86400
    if ahead == 0:
        return text
    if 0 < ahead < 7:
        return f"{WEEKDAYS[day % 7]} {text}"
    return f"{text} in {ahead} days" if ahead > 0 else f"{text} {-ahead} days ago"


class Hold:
    """One window's hold on one pool: the reservation ``rid`` (negative, apart from the jobs' ids)."""

    __slots__ = ("kind", "window", "key", "rid", "gpus", "short", "nodes")

    def __init__(self, kind: str, window, key: tuple[str, str], rid: int):
        self.kind = kind
        self.window = window
        self.key = key
        self.rid = rid
        self.gpus = 0  # GPUs held on the pool
        self.short = 0  # GPUs it should hold but could not (running work the window was declared over)
        self.nodes: list[tuple[int, int]] = []  # (node index, GPUs held there)


def rid_of(kind: str, window_id: int) -> int:
    return -(2 * window_id + (1 if kind == BOOKING else 2))


class Calendar:
    """The holds of one cycle, by reservation id; which running jobs run inside a booking; the active bookings
    by owner. Set up once, before the first job is judged, and never changed after (a fork shares it: the
    holds themselves are the pools' reservations, which a fork copies)."""

    def __init__(self, snapshot: Snapshot, pools: dict[tuple[str, str], Pool], running: list[RunningJob]):
        self.now = now = snapshot.now
        self.holds: dict[int, Hold] = {}
        self.count: dict[tuple[str, str], int] = {}  # pool key -> its holds
        self.inside: dict[int, int] = {}  # running job -> the booking it runs inside
        self.active: list[Booking] = sorted((b for b in snapshot.bookings if b.start <= now < b.end and b.gpus > 0),
                                            key=lambda b: (b.start, b.id))
        self.departments = {d for b in self.active for d in b.departments}
        self.users = {u for b in self.active for u in b.users}
        self.teams = {t for b in self.active for t in b.teams}
        windows: list[tuple[float, int, str, object]] = []
        for b in snapshot.bookings:
            if b.end > now and b.gpus > 0:
                windows.append((b.start, b.id, BOOKING, b))
        for m in snapshot.maintenance:
            if m.start > now:  # (one under way has its nodes out of the pools already: ``adjust``)
                windows.append((m.start, m.id, MAINTENANCE, m))
        if not windows:
            return
        # A window that starts later than any pending job of the flavor could run holds nothing yet: no start
        # of this cycle could reach it, and the reserved heads plan as if a pool's holds never ended.
        reach: dict[str, float] = {}
        for job in snapshot.pending:
            if job.max_runtime_s > reach.get(job.flavor, 0.0):
                reach[job.flavor] = job.max_runtime_s
        used = self.booked_running(running)
        for start, _, kind, window in sorted(windows, key=lambda w: (w[0], w[2], w[1])):
            if kind == BOOKING:
                pool = pools.get((window.cluster, window.flavor))
                if pool is not None and (start <= now or start < now + reach.get(pool.flavor, 0.0)):
                    self.hold_booking(pool, window, used.get(window.id, 0))
            else:
                for pool in pools.values():
                    if pool.cluster == window.cluster and start < now + reach.get(pool.flavor, 0.0):
                        self.hold_maintenance(pool, window, snapshot)

    # ------------------------------------------------------------ set-up

    def booked_running(self, running: list[RunningJob]) -> dict[int, int]:
        """The GPUs each active booking's owners use inside it: their jobs on its cluster and flavor started in
        the window and ending by its end, by id, up to the booking's GPUs."""
        used: dict[int, int] = {}
        if not self.active:
            return used
        for job in running:
            for b in self.active:
                if (job.cluster == b.cluster and job.flavor == b.flavor and job.started_at >= b.start
                        and job.expected_end <= b.end and owns(b, job.department, job.user, getattr(job, "team", None))
                        and used.get(b.id, 0) + job.total_gpus <= b.gpus):
                    used[b.id] = used.get(b.id, 0) + job.total_gpus
                    self.inside[job.id] = b.id
                    break
        return used

    def add(self, pool: Pool, hold: Hold, until: float, end: float, spare: list[tuple[int, int]]) -> None:
        self.holds[hold.rid] = hold
        self.count[hold.key] = self.count.get(hold.key, 0) + 1
        pool.reserve(hold.rid, until, spare, 0, end)

    def hold_booking(self, pool: Pool, booking: Booking, used: int) -> None:
        """Hold what the booking's owners do not use yet: from its start on the GPUs free then (inside the
        window, the GPUs free now)."""
        want = booking.gpus - used
        hold = Hold(BOOKING, booking, (pool.cluster, pool.flavor), rid_of(BOOKING, booking.id))
        if want <= 0:
            return
        at = max(booking.start, self.now)
        free = self.free_at(pool, at)
        order = sorted((i for i in pool.indexed if free[i] > 0), key=lambda i: (-free[i], pool.names[i]))
        spare = []
        left = want
        for i in order:
            if left <= 0:
                break
            take = min(free[i], left)
            left -= take
            hold.nodes.append((i, take))
            spare.append((i, free[i] - take))
        hold.gpus, hold.short = want - left, left
        if spare:
            self.add(pool, hold, booking.start, booking.end, spare)

    def hold_maintenance(self, pool: Pool, window: MaintenanceWindow, snapshot: Snapshot) -> None:
        """Hold every GPU of the window's nodes in ``pool`` from its start."""
        nodes = {n.name for n in snapshot.nodes if covers(window, n)}
        chosen = [i for i in pool.indexed if pool.names[i] in nodes]
        if not chosen:
            return
        hold = Hold(MAINTENANCE, window, (pool.cluster, pool.flavor), rid_of(MAINTENANCE, window.id))
        hold.nodes = [(i, pool.size[i]) for i in chosen]
        hold.gpus = sum(pool.size[i] for i in chosen)
        self.add(pool, hold, window.start, window.end, [(i, 0) for i in chosen])

    def free_at(self, pool: Pool, at: float) -> list[int]:
        """Each node's GPUs free at ``at`` once the running pods that end by then have (at their time limit),
        no more than what the holds already made leave there."""
        free = list(pool.free)
        for end, i, g in pool.events + pool.shared_ends:
            if end <= at:
                free[i] += g
        for i, left in pool.spare.items():
            if left < free[i]:
                free[i] = left
        return free

    # ------------------------------------------------------------ the cycle's questions

    def heads(self, pool: Pool) -> int:
        """The pool's reservations that are jobs' (reserved heads), not the calendar's."""
        return len(pool.reservations) - self.count.get((pool.cluster, pool.flavor), 0)

    def owned(self, job: PendingJob) -> bool:
        """Whether the job's owner owns a booking under way of its flavor that it could end within (its job
        takes the owner's path, judged in full)."""
        team = getattr(job, "team", None)
        if not self.active or not (job.department in self.departments or job.user in self.users
                                   or (team and account(job.department, team) in self.teams)):
            return False
        end = self.now + job.max_runtime_s
        return any(b.flavor == job.flavor and end <= b.end and owns(b, job.department, job.user, team)
                   for b in self.active)

    def place_owner(self, job: PendingJob, pools: list[Pool]) -> tuple[Pool, list[int], float] | None:
        """Place an owner's job on the held GPUs of a booking of theirs under way (best fit, gang all or
        nothing) when its time limit ends by the booking's end: (pool, node indices, end); None if none
        takes it. The pool's free GPUs drop, the booking's hold keeps what it leaves to others."""
        g, n = job.gpus_per_pod, job.pods
        end = self.now + job.max_runtime_s
        team = getattr(job, "team", None)
        for b in self.active:
            if b.flavor != job.flavor or end > b.end or not owns(b, job.department, job.user, team):
                continue
            pool = next((p for p in pools if p.cluster == b.cluster), None)
            if pool is None:
                continue
            rid = rid_of(BOOKING, b.id)
            res = next((r for r in pool.reservations if r.job_id == rid), None)
            if res is None:
                continue
            free = pool.free
            held = {i: free[i] - left for i, left in res.spare.items() if free[i] - left >= g}
            if sum(v // g for v in held.values()) < n:
                continue
            # nodes another reservation the job runs past also holds are left alone (their spare is theirs)
            others = [r.spare for r in pool.reservations[:pool.crossed(end)] if r is not res]
            if others:
                held = {i: v for i, v in held.items() if not any(i in spare for spare in others)}
                if sum(v // g for v in held.values()) < n:
                    continue
            placed = []
            for _ in range(n):
                i = min((i for i, v in held.items() if v >= g), key=lambda i: (held[i], i))
                held[i] -= g
                pool.free[i] -= g
                pool.refresh(i)
                placed.append(i)
            return pool, placed, end
        return None

    def blocking(self, pools: list[Pool], g: int, n: int, end: float) -> tuple[str, dict, str] | None:
        """Why a job ending at ``end`` waits when a hold is what keeps it out: it would fit on the pool's free
        GPUs but not on those the holds it runs past leave. (code, detail, note), or None."""
        if not self.holds:
            return None
        for pool in pools:
            if pool.now.capacity(g) < n or pool.index_for(end).capacity(g) >= n:
                continue
            for r in pool.reservations[:pool.crossed(end)]:
                hold = self.holds.get(r.job_id)
                if hold is not None:
                    return self.why(hold, pool)
        return None

    def why(self, hold: Hold, pool: Pool) -> tuple[str, dict, str]:
        w = hold.window
        detail = {"cluster": pool.cluster, "window_start": w.start, "window_end": w.end, "held_gpus": hold.gpus}
        if hold.kind == BOOKING:
            detail["booking"] = w.id
            what = f"reserved for {w.purpose or 'a booking'}"
            when = (f"until {clock_text(w.end, self.now)}" if w.start <= self.now
                    else f"from {clock_text(w.start, self.now)} (in {duration_text(w.start - self.now)})")
            return reasons.BOOKED, detail, f"{pool.cluster} is {what} {when}"
        detail["maintenance"] = w.id
        names = [pool.names[i] for i, _ in hold.nodes]
        shown = ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
        node = "node" if len(names) == 1 else "nodes"
        note = (f"{node} {shown} {'goes' if len(names) == 1 else 'go'} into maintenance at {clock_text(w.start, self.now)} "
                f"(in {duration_text(w.start - self.now)})")
        return reasons.MAINTENANCE, detail, note

    def replay_holds(self) -> dict[tuple[str, str], list[tuple[int, int, float]]]:
        """For the estimates: per pool, (node, GPUs, window end) of each hold (taken from now until then)."""
        out: dict[tuple[str, str], list[tuple[int, int, float]]] = {}
        for hold in self.holds.values():
            out.setdefault(hold.key, []).extend((i, g, hold.window.end) for i, g in hold.nodes)
        return out
