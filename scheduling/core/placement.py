"""Node state and best-fit placement, indexed so a cycle never loops over pending x nodes.

A ``Pool`` holds the schedulable nodes of one (cluster, flavor). Node ``i`` is the i-th node by name, so every
"smallest index" choice is a name tie-break. A ``BucketIndex`` keeps the nodes in buckets by free GPUs
(0..max node size), each bucket a heap of node indices with lazy deletion, and exact per-bucket counts:

* ``best(g)``: the node with the fewest free GPUs that still fits ``g`` (best fit), ties by node name, in
  O(max node size + log nodes). Best fit fills partly used nodes first and so keeps whole nodes free.
* ``capacity(g)``: how many pods of ``g`` GPUs fit in total (sum of floor(free / g)), in O(max node size),
  remembered per ``g`` until a node's value changes: every job a cycle leaves waiting asks again, while the
  index changes only when a job is placed. Identical pods placed one by one by best fit always succeed when
  ``capacity(g) >= pods`` (each pod lowers the capacity by exactly one), so a gang is checked before anything
  is taken: all or nothing.
* ``free_total()``: the sum of the (clamped) free GPUs, kept up to date on every change.

Nodes that are cordoned / not Ready are not in any pool. Tainted (but schedulable) nodes are in their pool yet
not in the index: the adapter reports only taints the portal's pods do not tolerate, so no job uses them. Free GPUs may be negative when the input over-commits a node; the index sees max(0, free).
"""

from __future__ import annotations

from heapq import heappop, heappush

from .types import Node


class BucketIndex:
    __slots__ = ("val", "heaps", "count", "top", "total", "caps")

    def __init__(self, values: list[int], members: list[int], top: int):
        self.top = top
        self.val = [-1] * len(values)
        self.heaps: list[list[int]] = [[] for _ in range(top + 1)]
        self.count = [0] * (top + 1)
        self.total = 0
        for i in members:  # increasing i: every bucket list is already a valid heap
            v = min(top, max(0, values[i]))
            self.val[i] = v
            self.heaps[v].append(i)
            self.count[v] += 1
            self.total += v
        self.caps: dict[int, int] = {}  # g -> capacity(g), until the next change

    def set(self, i: int, value: int) -> None:
        old = self.val[i]
        if old < 0:
            return  # not a member (tainted node)
        value = min(self.top, max(0, value))
        if old == value:
            return
        self.count[old] -= 1
        self.count[value] += 1
        self.total += value - old
        self.val[i] = value
        heappush(self.heaps[value], i)
        if self.caps:
            self.caps.clear()

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
        "reservation",
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
        self.now: BucketIndex | None = None
        self.long: BucketIndex | None = None  # free GPUs usable by jobs running past the reservation
        self.spare: dict[int, int] = {}  # reserved node -> GPUs left at the reservation time
        self.initial_count: list[int] = []
        self.initial_caps: dict[int, int] = {}  # g -> initial_capacity(g): it never changes within a cycle
        self.empty: BucketIndex | None = None
        self.events: list[tuple[float, int, int]] = []  # (end, node index, gpus) of running/admitted pods
        self.reservation: Reservation | None = None

    @property
    def top(self) -> int:
        return max(self.size, default=0)

    def build(self) -> None:
        """Index the free GPUs once running pods were subtracted."""
        top = self.top
        self.now = BucketIndex(self.free, self.indexed, top)
        self.initial_count = list(self.now.count)
        self.empty = BucketIndex(self.size, self.indexed, top)

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

    def take(self, i: int, g: int, long: bool) -> None:
        self.free[i] -= g
        if long and i in self.spare:
            self.spare[i] -= g
        self.now.set(i, self.free[i])
        if self.long is not None:
            self.long.set(i, self.eff(i))

    def place(self, g: int, pods: int, long: bool) -> list[int] | None:
        """Best-fit ``pods`` pods of ``g`` GPUs on indexed nodes, all or nothing. A ``long`` job (one that runs
        past this pool's reservation) only uses GPUs the reserved head will not need."""
        index = self.long if (long and self.long is not None) else self.now
        if index.capacity(g) < pods:
            return None
        out = []
        for _ in range(pods):
            i = index.best(g)
            out.append(i)
            self.take(i, g, long)
        return out

    def earliest_fit(self, g: int, pods: int, now: float) -> tuple[float, list[int]] | None:
        """When (and where, by best fit) ``pods`` x ``g`` GPUs fit here if running and admitted pods end at their
        max runtime and nothing else is admitted; None if they never do."""
        cap = self.now.capacity(g)
        projected: dict[int, int] = {}
        when = now
        if cap < pods:
            indexed = set(self.indexed)
            events = sorted(self.events)
            found = None
            for end, i, gpus in events:
                if found is not None and end > found:
                    break  # every pod ending at the same instant is released before placing
                if i not in indexed:
                    continue
                old = projected.get(i, self.free[i])
                new = old + gpus
                cap += max(0, new) // g - max(0, old) // g
                projected[i] = new
                if found is None and cap >= pods:
                    found = end
            if found is None:
                return None
            when = max(now, found)
        value = {i: max(0, projected.get(i, self.free[i])) for i in self.indexed}
        heap = [(v, i) for i, v in value.items() if v >= g]
        heap.sort()
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

    def reserve(self, job_id: int, when: float, spare_after: list[tuple[int, int]]) -> None:
        """Hold capacity for a blocked head: until ``when``, jobs ending later keep off its GPUs (EASY)."""
        for i, left in spare_after:
            self.spare[i] = min(self.spare.get(i, left), left)
        self.reservation = Reservation(job_id, when, tuple(sorted(self.spare)))
        values = [self.eff(i) for i in range(len(self.free))]
        self.long = BucketIndex(values, self.indexed, self.top)


class Reservation:
    __slots__ = ("job_id", "until", "nodes")

    def __init__(self, job_id: int, until: float, nodes: tuple[int, ...]):
        self.job_id = job_id
        self.until = until
        self.nodes = nodes
