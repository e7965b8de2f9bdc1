"""Honest estimated starts for the jobs a cycle leaves pending (like Slurm's ``squeue --start``).

For each flavor the estimate replays the future from the cycle's outcome: every running and just-admitted job
ends at its likely end (its owner's similar jobs' smoothed run time with 20% headroom when right-sizing knows
one, ``predicted_runtime_s``, never past its max runtime; a job already past its prediction at its max
runtime; a job already past that ends "now"), and so does every pending job it places, nothing new arrives, nobody is preempted, and
the pending jobs start *in queue order* (the cycle's pending order, ``ordering``), each at
the first instant when it fits both physically (best fit, whole gang) and quota-wise, and never before the
job ahead of it, and, for a member with a GPU limit (``user_limits``), once their jobs (of every flavor, as
they run now) have ended enough to let it in, and for a team with a borrowing limit (``teams``), once its jobs of
the flavor have ended enough to keep it within its nominal plus that limit. Backfill can only make a real start earlier, so the figure is an upper bound under those
assumptions. A blocked head with an EASY reservation gets its reservation time (a promise the backfill keeps).
A task of a throttled array starts only while fewer than its throttle of the array's tasks run in the replay.
Jobs waiting for dependencies (``late`` codes) are replayed after the flavor's other jobs (they cannot take
GPUs before what they wait for ends); the engine then keeps their estimate no earlier than those ends.

The estimate is None ("unknown") when it cannot be honest: the job waits on credits (refills are not
predictable), on an unknown flavor or an impossible size, on preemptions under way (eviction time is not
known), when it lies deeper than ``DEPTH`` jobs in its flavor's queue, or further than ``HORIZON_S`` ahead,
or when it needs more GPUs than its owner may ever hold.
"""

from __future__ import annotations

from bisect import bisect_right
from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from heapq import heappop, heappush
from operator import itemgetter

from .domains import required_level
from .explain import NO_ESTIMATE
from .fractions import MILLI
from .placement import BucketIndex, Pool
from .quota import QuotaBook
from .teams import TeamBook
from .types import PendingJob, RunningJob
from .user_limits import UserBook

DEPTH = 256  # jobs per flavor queue that get an estimate
TEAM = "team"  # first item of a team's key among the holders (a member's is (department, user))
HORIZON_S = 30 * 86400.0


@dataclass(frozen=True, slots=True)
class EstimateView:
    """What the estimate reads of a finished cycle (read-only by convention: it copies what it changes)."""

    now: float
    codes: Mapping[int, str]  # pending job id -> reason code
    pools_by_flavor: Mapping[str, Sequence[Pool]]
    quota: QuotaBook
    running: Sequence[RunningJob]
    # (end, department, flavor, milli-GPUs, cluster, user, array id or None) of this cycle's admissions
    admitted_end: Sequence[tuple[float, str, str, int, str, str, int | None]]
    heads: Mapping[int, float]  # reserved heads -> reserved start
    # per (cluster, flavor), (likely end, node index, GPUs) of the running and admitted pods (None: the pools'
    # own events, at max runtime); per running job id, its likely end
    events: Mapping[tuple[str, str], Sequence[tuple[float, int, int]]] | None = None
    running_end: Mapping[int, float] | None = None
    # Whether a job may start on a cluster (its pin, selector, and the cluster's state), and how the clusters
    # it may start on rank before fit (preferred labels, cost); None: any cluster, by name.
    allowed: Callable[[PendingJob, str], bool] | None = None
    rank: Callable[[PendingJob, str], tuple] | None = None
    users: UserBook | None = None  # the members' GPU limits, and what they hold after this cycle's admissions
    teams: TeamBook | None = None  # the teams' borrowing limits, and what they hold after this cycle's admissions
    late: frozenset[str] = frozenset()  # reason codes whose jobs are replayed after the others of their flavor
    # per (cluster, flavor), (node index, GPUs, until) held by the calendar (``bookings``): taken from now until
    # the window ends (an upper bound: a job that would end before a booking starts backfills in reality)
    holds: Mapping[tuple[str, str], Sequence[tuple[int, int, float]]] | None = None


def estimate_pending(view: EstimateView, still: list[PendingJob]) -> dict[int, float | None]:
    out: dict[int, float | None] = {}
    # Per flavor, its first DEPTH jobs in order with the late ones after the others (the rest get no estimate).
    early: dict[str, list[PendingJob]] = defaultdict(list)
    later: dict[str, list[PendingJob]] = defaultdict(list)
    codes, late = view.codes, view.late
    for job in still:
        code = codes[job.id]
        if code in NO_ESTIMATE:
            continue
        jobs = later[job.flavor] if code in late else early[job.flavor]
        if len(jobs) < DEPTH:
            jobs.append(job)
    for flavor in sorted(early.keys() | later.keys()):
        pools = view.pools_by_flavor.get(flavor)
        if pools:
            _simulate(view, flavor, pools, (early.get(flavor, []) + later.get(flavor, []))[:DEPTH], out)
    for job_id, when in view.heads.items():
        # The reservation is a promise; a head whose per-cluster quota lets it start earlier on another cluster
        # than the one it reserved on gets that earlier time.
        found = out.get(job_id)
        out[job_id] = when if found is None else min(when, found)
    return out


def _simulate(view: EstimateView, flavor: str, pools, jobs, out: dict[int, float | None]) -> None:
    now = view.now
    book = view.quota.clone()
    free = [list(p.free) for p in pools]
    released = []
    if view.holds:
        for pi, p in enumerate(pools):
            for i, g, until in view.holds.get((p.cluster, p.flavor), ()):
                free[pi][i] -= g
                released.append((until, pi, i, g, None))
    index = [BucketIndex(f, p.indexed, p.top) for f, p in zip(free, pools, strict=True)]
    users = view.users if view.users is not None and view.users.active else None
    teams = view.teams if view.teams is not None and view.teams.active else None
    if teams is not None and not any(limit[1] is not None and key[2] == flavor for key, limit in teams.limits.items()):
        teams = None  # no team has a borrowing limit of the flavor: nothing to replay
    base, held, arrays = _events(view, flavor, pools, users, teams)
    if released:
        base = sorted(base + released, key=itemgetter(0))
    seq = 0
    ends = [ev[0] for ev in base]  # (sorted)
    nb, bi = len(base), 0
    heap: list[tuple] = []  # (time, seq, event) of the jobs this replay starts
    t = now
    limit = now + HORIZON_S
    for job in jobs:
        g, n = job.gpus_per_pod, job.pods
        cand = _candidates(view, pools, job)
        if job.topology_required:  # only the pools with the level it requires, and one domain of it for the gang
            li = {pi: required_level(pools[pi], job) for pi in cand}
            cand = [pi for pi in cand if li[pi] is not None]
        else:
            li = dict.fromkeys(cand)
        if not any(pools[pi].empty.capacity(g) >= n for pi in cand):
            continue
        cap = None if users is None else users.limit(job.department, job.user)
        if cap is not None and job.gpu_milli > cap * MILLI:
            continue  # more than its owner may ever hold: no honest estimate
        member = (job.department, job.user)
        # a team's borrowing limit, as the cycle applies it (``teams.over_limit``): its team's GPUs of the flavor
        tcap = None if teams is None else teams.cap(job.department, job.team, flavor)
        if tcap is not None and job.total_gpus > tcap:
            continue  # more than its team may ever hold: no honest estimate
        team = (TEAM, job.department, job.team)
        # The earliest instant it fits on any cluster open to it (quota included: per-cluster quotas differ).
        scoped = (job.department, flavor) in book.scoped
        throttle = job.array_throttle if job.array_id is not None else None
        chosen = None
        while True:
            if cap is not None and held.get(member, 0) + job.gpu_milli > cap * MILLI:
                pass  # its owner holds too much until some of their jobs end
            elif tcap is not None and held.get(team, 0) + job.total_gpus > tcap:
                pass  # its team holds too much of the flavor until some of its jobs end
            elif throttle and arrays[job.array_id] >= throttle:
                pass  # its array runs its throttle's worth: wait for one of them to end
            elif scoped or book.check(job.department, flavor, job.gpu_milli)[0] is None:
                chosen = next(
                    (
                        pi
                        for pi in cand
                        if index[pi].capacity(g) >= n
                        and (li[pi] is None or pools[pi].domains.place_values(index[pi].val, g, n, li[pi]) is not None)
                        and (not scoped or book.check(job.department, flavor, job.gpu_milli, cluster=pools[pi].cluster)[0] is None)
                    ),
                    None,
                )
                if chosen is not None:
                    break
            nxt = ends[bi] if bi < nb else None
            if heap and (nxt is None or heap[0][0] < nxt):
                nxt = heap[0][0]
            if nxt is None:
                break
            t = max(t, nxt)
            if t > limit:
                return
            # Everything ending by t is given back before the next check, so the order within that instant is
            # immaterial: the sorted ends first, then what this replay's starts pushed.
            upto = bisect_right(ends, t, bi)
            batch = base[bi:upto]
            bi = upto
            while heap and heap[0][0] <= t:
                batch.append(heappop(heap)[2])
            _release(batch, free, index, book, held, arrays, flavor)
        if chosen is None:
            continue
        out[job.id] = t
        end = t + job.likely_runtime_s
        idx = index[chosen]
        inside = None if li[chosen] is None else iter(pools[chosen].domains.place_values(idx.val, g, n, li[chosen]))
        for _ in range(n):
            i = idx.best(g) if inside is None else next(inside)
            free[chosen][i] -= g
            idx.set(i, free[chosen][i])
            heappush(heap, (end, seq, (end, chosen, i, g, None)))
            seq += 1
        heappush(heap, (end, seq, (end, -1, 0, job.gpu_milli, (job.department, pools[chosen].cluster, job.array_id))))
        seq += 1
        if job.array_id is not None:
            arrays[job.array_id] += 1
        book.add(job.department, flavor, job.gpu_milli, pools[chosen].cluster)
        if cap is not None:
            held[member] = held.get(member, 0) + job.gpu_milli
            heappush(heap, (end, seq, (end, -2, 0, job.gpu_milli, member)))
            seq += 1
        if tcap is not None:
            held[team] = held.get(team, 0) + job.total_gpus
            heappush(heap, (end, seq, (end, -2, 0, job.total_gpus, team)))
            seq += 1


def _candidates(view: EstimateView, pools, job: PendingJob) -> list[int]:
    """The indices of the pools ``job`` may start in, in the order it prefers them."""
    if view.allowed is None:
        cand = [pi for pi, p in enumerate(pools) if job.cluster in (None, p.cluster)]
    else:
        cand = [pi for pi, p in enumerate(pools) if view.allowed(job, p.cluster)]
    if view.rank is not None and len(cand) > 1:
        cand.sort(key=lambda pi: (view.rank(job, pools[pi].cluster), pools[pi].cluster))
    return cand


def _events(view: EstimateView, flavor: str, pools, users: UserBook | None,
            teams: TeamBook | None = None) -> tuple[list, dict, dict]:
    """The future as a list of (time, pool, node, GPUs, owner) sorted by time: the pools' GPUs coming free (pool
    index), the flavor's quota and its array's task count given back (pool -1, owner (department, cluster, array
    id or None)) and, for members with a limit and teams, their GPUs given back (pool -2); what each limited
    member and each team (``(TEAM, department, team)``, the flavor's GPUs) holds now; how many tasks of each
    array run now. The pools' events and the teams' count GPUs, the quota's and the members' milli-GPUs (the
    quota book's unit: a fraction adds up exactly and cheaply)."""
    base: list[tuple] = []
    for pi, pool in enumerate(pools):
        events = pool.events if view.events is None else view.events.get((pool.cluster, pool.flavor), ())
        base += [(end, pi, i, g, None) for end, i, g in events]
    arrays: dict[int, int] = defaultdict(int)  # array id -> its tasks running in the replay
    now = view.now
    running = [job for job in view.running if job.flavor == flavor]
    ends = [_likely_end(view, job) for job in running]
    base += [(end if end > now else now, -1, 0, job.gpu_milli,
              (job.department, job.cluster, job.array_id))
             for end, job in zip(ends, running, strict=True)]  # fmt: skip
    for job in running:
        if job.array_id is not None:
            arrays[job.array_id] += 1
    for end, dept, fl, gpus, cluster, _, array in view.admitted_end:
        if fl == flavor:
            base.append((end, -1, 0, gpus, (dept, cluster, array)))
            if array is not None:
                arrays[array] += 1
    held: dict[tuple, int] = {}
    if users is not None:
        held = _members_holding(view, users, base)
    if teams is not None:
        held = {**held, **_teams_holding(view, teams, flavor, base)}
    base.sort(key=itemgetter(0))
    return base, held, arrays


def _members_holding(view: EstimateView, users: UserBook, base: list) -> dict:
    """What each limited member holds after the cycle's admissions (every flavor), and the events (pool -2: no
    node, no quota) that give it back as their jobs end."""
    held: dict[tuple[str, str], int] = defaultdict(int)
    ends = [(_likely_end(view, j), j.department, j.user, j.gpu_milli) for j in view.running]
    ends += [(end, dept, user, gpus) for end, dept, _, gpus, _, user, _ in view.admitted_end]
    for end, dept, user, gpus in ends:
        if users.limit(dept, user) is not None:
            held[(dept, user)] += gpus
            base.append((max(view.now, end), -2, 0, gpus, (dept, user)))
    return held


def _teams_holding(view: EstimateView, teams: TeamBook, flavor: str, base: list) -> dict:
    """What each team holds of ``flavor`` after the cycle's admissions, as the team book counts it, and the
    events (pool -2) that give it back as its jobs end."""
    held: dict[tuple, int] = defaultdict(int)
    for (d, t, f), gpus in teams.usage.items():
        if f == flavor and gpus:
            held[(TEAM, d, t)] += gpus
    for job in teams.counted:
        if job.flavor == flavor:
            base.append((max(view.now, _likely_end(view, job)), -2, 0, job.total_gpus, (TEAM, job.department, job.team)))
    for end, d, t, f, gpus in teams.ends:
        if f == flavor:
            base.append((max(view.now, end), -2, 0, gpus, (TEAM, d, t)))
    return held


def _release(batch: list[tuple], free, index, book: QuotaBook, held: dict, arrays: dict, flavor: str) -> None:
    """Give back what the events of ``batch`` (time, pool, node, GPUs, owner) hold: pods' GPUs, quota and array
    tasks, members' GPUs."""
    for _, pi, i, gpus, owner in batch:
        if pi >= 0:
            value = free[pi][i] = free[pi][i] + gpus
            index[pi].set(i, value)
        elif pi == -2:
            held[owner] -= gpus
        else:
            book.add(owner[0], flavor, -gpus, owner[1])
            if owner[2] is not None:
                arrays[owner[2]] -= 1


def _likely_end(view: EstimateView, job: RunningJob) -> float:
    """When a running job likely ends: its predicted end where the view has one, else its max runtime's."""
    found = None if view.running_end is None else view.running_end.get(job.id)
    return job.expected_end if found is None else found
