"""Node state and best-fit placement, indexed so a cycle never loops over pending x nodes.

A ``Pool`` holds the schedulable nodes of one (cluster, flavor). Node ``i`` is the i-th node by name, so every
"smallest index" choice is a name tie-break. A ``BucketIndex`` keeps the nodes in buckets by free GPUs
(0..max node size), each bucket a heap of node indices with lazy deletion, and exact per-bucket counts:

* ``best(g)``: the node with the fewest free GPUs that still fits ``g`` (best fit), ties by node name, in
  O(max node size + log nodes). Best fit fills partly used nodes first and so keeps whole nodes free.
* ``capacity(g)``: how many pods of ``g`` GPUs fit in total (sum of floor(free / g)), in O(max node size)
  once per ``g``, then kept up to date as nodes change (by the changed node's pods of ``g``): every job a
  cycle judges asks. Identical pods placed one by one by best fit always succeed when
  ``capacity(g) >= pods`` (each pod lowers the capacity by exactly one), so a gang is checked before anything
  is taken: all or nothing.
* ``free_total()``: the sum of the (clamped) free GPUs, kept up to date on every change.

Nodes that are cordoned / not Ready are not in any pool. Tainted (but schedulable) nodes are in their pool yet
not in the index: the adapter reports only taints the portal's pods do not tolerate, so no job uses them. Free GPUs may be negative when the input over-commits a node; the index sees max(0, free).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from heapq import heapify, heappop, heappush
from itertools import islice
from operator import itemgetter

from .types import Node


class BucketIndex:
    __slots__ = ("val", "heaps", "count", "top", "total", "caps")

    def __init__(self, values: list[int], members: list[int], top: int):
        self.top = top
        self.val = [-1] * len(values)
        self.heaps: list[list[int]] = [[] for _ in range(top + 1)]
        self.count = [0] * (top + 1)
        self.total = 0
        val, heaps, count, total = self.val, self.heaps, self.count, 0
        for i in members:  # increasing i: every bucket list is already a valid heap
            v = values[i]
            v = 0 if v < 0 else top if v > top else v
            val[i] = v
            heaps[v].append(i)
            count[v] += 1
            total += v
        self.total = total
        self.caps: dict[int, int] = {}  # g -> capacity(g), until the next change

    def set(self, i: int, value: int) -> None:
        old = self.val[i]
        if old < 0:
            return  # not a member (tainted node)
        if value < 0:
            value = 0
        elif value > self.top:
            value = self.top
        if old == value:
            return
        self.count[old] -= 1
        self.count[value] += 1
        self.total += value - old
        self.val[i] = value
        heappush(self.heaps[value], i)
        caps = self.caps
        if caps:  # each remembered capacity moves by the node's pods of g, rather than being summed again
            for g in caps:
                caps[g] += value // g - old // g

    def best(self, g: int) -> int | None:
        val, heaps, count = self.val, self.heaps, self.count
        for f in range(max(g, 1), self.top + 1):
            if count[f]:
                heap = heaps[f]
                while val[heap[0]] != f:
                    heappop(heap)
                return heap[0]
        return None

    def capacity(self, g: int) -> int:
        cap = self.caps.get(g)
        if cap is None:
            count = self.count
            cap = self.caps[g] = sum(count[f] * (f // g) for f in range(g, self.top + 1) if count[f])
        return cap

    def free_total(self) -> int:
        return self.total

    def copy(self) -> BucketIndex:
        other = BucketIndex.__new__(BucketIndex)
        other.top, other.total = self.top, self.total
        other.val, other.count, other.caps = list(self.val), list(self.count), dict(self.caps)
        other.heaps = [list(heap) for heap in self.heaps]
        return other


class Pool:
    """The schedulable nodes of one (cluster, flavor) and their free GPUs during a cycle."""

    __slots__ = (
        "cluster",
        "flavor",
        "names",
        "pos",
        "size",
        "free",
        "taints",
        "indexed",
        "now",
        "long",
        "spare",
        "initial_count",
        "initial_caps",
        "empty",
        "events",
        "_events_sorted",
        "_indexed_set",
        "reservation",
        "reservations",
        "untils",
        "prefix",
        "reserved_gpus",
        "gpus_total",
        "due",
        "soon",
        "shares",
        "shared_ends",
        "domains",
    )

    def __init__(self, cluster: str, flavor: str, nodes: list[Node]):
        nodes = sorted(nodes, key=lambda n: n.name)
        self.cluster = cluster
        self.flavor = flavor
        self.names = [n.name for n in nodes]
        self.pos = {n.name: i for i, n in enumerate(nodes)}
        self.size = [max(0, n.gpus - n.used_by_others) for n in nodes]
        self.free = list(self.size)
        self.taints = [frozenset(n.taints) for n in nodes]
        self.indexed = [i for i, n in enumerate(nodes) if not n.taints]
        self.gpus_total = sum(self.size[i] for i in self.indexed)  # GPUs of the indexed nodes
        self.now: BucketIndex | None = None
        self.long: BucketIndex | None = None  # free GPUs usable by jobs running past every reservation
        self.spare: dict[int, int] = {}  # reserved node -> GPUs left at the reservation times (the least of them)
        self.initial_count: list[int] = []
        self.initial_caps: dict[int, int] = {}  # g -> initial_capacity(g): it never changes within a cycle
        self.empty: BucketIndex | None = None
        self.events: list[tuple[float, int, int]] = []  # (end, node index, gpus) of running/admitted pods
        # The events in order, extended as admissions append more: each reserved head asks for them, and
        # sorting a sorted list with a short unsorted tail is linear where a fresh sort is not.
        self._events_sorted: list[tuple[float, int, int]] = []
        self._indexed_set = frozenset(self.indexed)
        self.reservation: Reservation | None = None  # the earliest of the reservations
        self.reservations: list[Reservation] = []  # by (reserved start, head id)
        self.untils: list[float] = []  # their reserved starts, in that order
        self.reserved_gpus = 0  # GPUs of the reserved heads
        self.prefix: dict[int, BucketIndex] = {}  # m -> free GPUs usable by jobs running past the first m
        # For the reserved heads' earliest fits, built at the first: per node, the GPUs of its pods that end at
        # the cycle's start (each head's walk would release them all first), and the index of what a later head
        # may use once they have (``cut`` of free + due), kept up to date as pods are placed and heads reserve.
        self.due: list[int] | None = None
        self.soon: BucketIndex | None = None
        self.shares = None  # its GPUs holding fractions (``fractions.GpuBook``), made at the first fraction
        # (end, node index, 1) of each shared GPU: when its last fraction ends at the latest. Not among ``events``,
        # the heads' plan: a fraction joins a shared GPU whatever the reservations (a session, realtime, is judged
        # before every head and starts at once), so that end is no instant a head can count on.
        self.shared_ends: list[tuple[float, int, int]] = []
        # The cluster's topology domains over these nodes (``domains.Domains``), None when it declares no levels.
        self.domains = None

    def fork(self) -> Pool:
        """A copy whose free GPUs, reservations and events change apart from this pool's (the node facts and the
        cycle-start indexes, never changed, are shared; the cut indexes are caches, rebuilt when asked)."""
        other = Pool.__new__(Pool)
        for name in ("cluster", "flavor", "names", "pos", "size", "taints", "indexed", "gpus_total", "_indexed_set",
                     "initial_count", "initial_caps", "empty", "reserved_gpus", "untils"):
            setattr(other, name, getattr(self, name))
        other.free = list(self.free)
        other.now = self.now.copy()
        other.long = None if self.long is None else self.long.copy()
        other.spare = dict(self.spare)
        other.events = list(self.events)
        other._events_sorted = list(self._events_sorted)
        other.reservations = [Reservation(r.job_id, r.until, dict(r.spare), r.end) for r in self.reservations]
        other.reservation = other.reservations[0] if other.reservations else None
        other.prefix = {}
        other.due = None if self.due is None else list(self.due)
        other.soon = None if self.soon is None else self.soon.copy()
        other.shares = None if self.shares is None else self.shares.copy()
        other.shared_ends = list(self.shared_ends)
        other.domains = None if self.domains is None else self.domains.copy()
        return other

    @property
    def top(self) -> int:
        return max(self.size, default=0)

    def build(self) -> None:
        """Index the free GPUs once running pods were subtracted."""
        top = self.top
        self.now = BucketIndex(self.free, self.indexed, top)
        self.initial_count = list(self.now.count)
        self.empty = BucketIndex(self.size, self.indexed, top)
        if self.domains is not None:
            self.domains.build(self.now)

    def initial_capacity(self, g: int) -> int:
        """How many pods of ``g`` GPUs fit as the cycle began (before its admissions)."""
        cap = self.initial_caps.get(g)
        if cap is None:
            count = self.initial_count
            cap = self.initial_caps[g] = sum(count[f] * (f // g) for f in range(g, len(count)) if count[f])
        return cap

    def eff(self, i: int) -> int:
        spare = self.spare.get(i)
        return self.free[i] if spare is None else min(self.free[i], spare)

    def cut(self, i: int, m: int) -> int:
        """Node ``i``'s free GPUs open to a job that runs past the first ``m`` reservations (by start)."""
        value = self.free[i]
        for r in self.reservations[:m]:
            left = r.spare.get(i)
            if left is not None and left < value:
                value = left
        return value

    def crossed(self, end: float) -> int:
        """How many reservations a job ending at ``end`` runs past: it must keep off their heads' GPUs."""
        return bisect_left(self.untils, end) if self.untils else 0

    def index_for(self, end: float) -> BucketIndex:
        """The free GPUs a job ending at ``end`` may use now."""
        return self.index_past(self.crossed(end))

    def index_past(self, m: int) -> BucketIndex:
        """The free GPUs a job that runs past the first ``m`` reservations may use now."""
        if m == 0:
            return self.now
        if m == len(self.reservations):
            return self.long
        index = self.prefix.get(m)
        if index is None:
            index = self.prefix[m] = BucketIndex([self.cut(i, m) for i in range(len(self.free))], self.indexed, self.top)
        return index

    def take(self, i: int, g: int, m: int) -> None:
        """Place ``g`` GPUs on node ``i`` for a job that runs past the first ``m`` reservations: those heads
        have that many GPUs fewer to spare there (and its domains that many fewer free)."""
        domains = self.domains
        if domains is None:
            self._take(i, g, m)
            return
        old = self.now.val[i]
        self._take(i, g, m)
        domains.moved(i, self.now.val[i] - old)

    def _take(self, i: int, g: int, m: int) -> None:
        free = self.free[i] = self.free[i] - g
        if i in self.spare:  # a reserved node: the heads' spares and the cut values depend on them
            for r in self.reservations[:m]:
                if i in r.spare:
                    r.spare[i] -= g
            self.spare[i] = min(r.spare[i] for r in self.reservations if i in r.spare)
            self.now.set(i, free)
            if self.long is not None:
                self.long.set(i, self.eff(i))
            for mm, index in self.prefix.items():
                index.set(i, self.cut(i, mm))
            if self.soon is not None:
                self.soon.set(i, min(free + self.due[i], self.spare[i]))
            return
        # a node no head holds: every index sees its free GPUs
        self.now.set(i, free)
        if self.long is not None:
            self.long.set(i, free)
        for index in self.prefix.values():
            index.set(i, free)
        if self.soon is not None:
            self.soon.set(i, free + self.due[i])

    def refresh(self, i: int) -> None:
        """Set node ``i``'s value in every index after its free GPUs changed outside ``take`` (an owner's job
        on its booking's held GPUs, ``bookings``: the holds' spares stay as they were)."""
        free = self.free[i]
        self.now.set(i, free)
        if self.long is not None:
            self.long.set(i, self.eff(i))
        for mm, index in self.prefix.items():
            index.set(i, self.cut(i, mm))
        if self.soon is not None:
            v = free + self.due[i]
            self.soon.set(i, v if i not in self.spare else min(v, self.spare[i]))

    def place(self, g: int, pods: int, end: float, compact: bool = False, required: int | None = None) -> list[int] | None:
        """Best-fit ``pods`` pods of ``g`` GPUs on indexed nodes, all or nothing. A job ending at ``end`` only
        uses GPUs that the heads of the reservations it runs past will not need. On a pool with topology
        domains a ``compact`` gang goes into the smallest domain that holds it (spread by best fit when none
        does), one that names a ``required`` level (its index in the levels) into a domain of it or nothing."""
        m = self.crossed(end)
        index = self.index_past(m)
        if index.capacity(g) < pods:
            return None
        domains = self.domains
        if domains is not None and (compact or required is not None):
            chosen, _ = domains.choose(index, g, pods, required)
            if chosen is not None:
                for i in chosen:
                    self.take(i, g, m)
                return chosen
            if required is not None:
                return None
        out = []
        for _ in range(pods):
            i = index.best(g)
            if domains is not None and pods == 1:
                i = domains.single(index, i, g, self.size)
            out.append(i)
            self.take(i, g, m)
        return out

    def earliest_fit(self, g: int, pods: int, now: float) -> tuple[float, list[int]] | None:
        """When (and where, by best fit) ``pods`` x ``g`` GPUs fit here if running and admitted pods end at their
        max runtime and nothing else is admitted; None if they never do. A GPU shared by fractions never comes
        free in this plan (``shared_ends``): a gang that needs it finds no instant here."""
        spare = self.spare  # GPUs earlier reservations' heads leave free per node: a later head gets no more

        def cut(i: int, v: int) -> int:
            if i in spare and spare[i] < v:
                v = spare[i]
            return v if v > 0 else 0

        cap = self.long.capacity(g) if self.reservations else self.now.capacity(g)
        projected: dict[int, int] = {}
        when = now
        index = self.long if self.reservations else self.now
        if cap < pods:
            indexed = self._indexed_set
            events = self.sorted_events(now)
            start, base = 0, self.free
            if self.soon is not None:  # every pod ending at the start is released: resume after them
                index, base = self.soon, [f + d for f, d in zip(self.free, self.due, strict=True)]
                cap = index.capacity(g)
                start = bisect_right(events, now, key=itemgetter(0))
            found = now if cap >= pods else None
            for end, i, gpus in islice(events, start, None):
                if found is not None and end > found:
                    break  # every pod ending at the same instant is released before placing
                if i not in indexed:
                    continue
                old = projected.get(i, base[i])
                new = old + gpus
                # cap += cut(i, new) // g - cut(i, old) // g, inline: this walk visits most running pods
                left = spare.get(i)
                if left is None:
                    cap += (new if new > 0 else 0) // g - (old if old > 0 else 0) // g
                else:
                    a = old if old < left else left
                    b = new if new < left else left
                    cap += (b if b > 0 else 0) // g - (a if a > 0 else 0) // g
                projected[i] = new
                if found is None and cap >= pods:
                    found = end
            if found is None:
                return None
            when = max(now, found)
        # Only nodes with g GPUs or more to offer can be chosen: the index's buckets from g up hold the nodes no
        # pod end changed (its value of a node is cut(i, free[i])), the projection the others. A full pool is
        # never walked node by node.
        value = {}
        val = index.val
        for f in range(g, index.top + 1):
            if index.count[f]:
                for i in index.heaps[f]:
                    if val[i] == f and i not in projected:
                        value[i] = f
        for i, v in projected.items():
            value[i] = cut(i, v)
        heap = [(v, i) for i, v in value.items() if v >= g]
        heapify(heap)  # (the pairs are distinct: the pops come in sorted order all the same)
        chosen: list[int] = []
        while len(chosen) < pods:
            v, i = heappop(heap)
            if value[i] != v:
                continue
            chosen.append(i)
            value[i] = v - g
            if value[i] >= g:
                heappush(heap, (value[i], i))
        return when, [(i, value[i]) for i in chosen]

    def sorted_events(self, now: float) -> list[tuple[float, int, int]]:
        """The running and admitted pods' (end, node, GPUs) in order, and at the first call the pods due at
        ``now`` and the index of free + due (``soon``); None of that when a pod ended before ``now`` (its
        instant would come first: the walk then starts from the beginning)."""
        events = self._events_sorted
        if len(events) != len(self.events):
            tail = self.events[len(events):]
            events.extend(tail)
            events.sort()
            if self.due is not None:
                self.add_due(tail, now)
        if self.due is None and (not events or events[0][0] >= now):
            self.due = [0] * len(self.free)
            self.add_due(events[:bisect_right(events, now, key=itemgetter(0))], now)
            spare = self.spare
            self.soon = BucketIndex([f + d if i not in spare else min(f + d, spare[i])
                                     for i, (f, d) in enumerate(zip(self.free, self.due, strict=True))],
                                    self.indexed, self.top)
        return events

    def add_due(self, events: list[tuple[float, int, int]], now: float) -> None:
        """Count the pods of ``events`` that end at ``now`` as due there; one that ended before drops ``soon``."""
        due, soon, spare, free = self.due, self.soon, self.spare, self.free
        for end, i, g in events:
            if end < now:
                self.soon = soon = None
                return
            if end == now:
                due[i] += g
                if soon is not None:
                    v = free[i] + due[i]
                    soon.set(i, v if i not in spare else min(v, spare[i]))

    def fit_after_heads(self, g: int, pods: int, now: float) -> tuple[float, list[tuple[int, int]]] | None:
        """When (and where, by best fit on the empty pool) ``pods`` x ``g`` GPUs fit once every running and
        admitted pod and every reserved head has ended (at their max runtimes): the start of a head that
        ``earliest_fit`` finds no room for on what the earlier heads leave, which holds them for ever there.
        Later than need be when the gang needs only part of the pool, never earlier than it can start."""
        if self.empty.capacity(g) < pods:
            return None
        when = now
        for end, i, _ in self.events + self.shared_ends:  # (a shared GPU too: never earlier than it can start)
            if end > when and i in self._indexed_set:
                when = end
        for r in self.reservations:
            if r.end > when:
                when = r.end
        value = {i: self.size[i] for i in self.indexed if self.size[i] >= g}
        heap = [(v, i) for i, v in value.items()]
        heapify(heap)
        chosen: list[int] = []
        while len(chosen) < pods:
            v, i = heappop(heap)
            chosen.append(i)
            value[i] = v - g
            if value[i] >= g:
                heappush(heap, (value[i], i))
        return when, [(i, value[i]) for i in chosen]

    def reserve(self, job_id: int, when: float, spare_after: list[tuple[int, int]], gpus: int = 0,
                end: float | None = None) -> None:
        """Hold capacity for a blocked head: until ``when``, jobs ending later keep off its GPUs (EASY). Several
        heads may hold reservations: each later one is placed on what the earlier ones leave (conservative
        backfill), and a job must keep off the GPUs of every reservation it would run past. ``end``: when the
        head would end if it started at ``when`` (at its max runtime; ``fit_after_heads``)."""
        res = Reservation(job_id, when, dict(spare_after), when if end is None else end)
        self.reserved_gpus += gpus
        for i, left in spare_after:
            self.spare[i] = min(self.spare.get(i, left), left)
        self.reservations.append(res)
        self.reservations.sort(key=lambda r: (r.until, r.job_id))
        self.reservation = self.reservations[0]
        self.untils = [r.until for r in self.reservations]
        # The cut indexes of the reservations before the new one do not change: kept (a pool with holds of the
        # calendar, ``bookings``, reserves among them for every head, and rebuilding each would cost a node walk).
        at = self.reservations.index(res)
        if self.prefix:
            self.prefix = {m: index for m, index in self.prefix.items() if m <= at}
        if self.long is None:
            self.long = BucketIndex([self.eff(i) for i in range(len(self.free))], self.indexed, self.top)
        else:  # only the new head's nodes have less to spare
            for i, _ in spare_after:
                self.long.set(i, self.eff(i))
        if self.soon is not None:
            for i, _ in spare_after:
                self.soon.set(i, min(self.free[i] + self.due[i], self.spare[i]))


class Reservation:
    __slots__ = ("job_id", "until", "spare", "end")

    def __init__(self, job_id: int, until: float, spare: dict[int, int], end: float | None = None):
        self.job_id = job_id
        self.until = until
        self.spare = spare  # reserved node -> GPUs the head leaves free there at ``until``
        self.end = until if end is None else end  # the head's end if it starts at ``until``
