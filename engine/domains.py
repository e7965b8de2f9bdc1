"""Topology domains inside a pool (pure): which nodes share a block, a rack or a host, and where a gang goes.

A cluster may declare topology levels, node label keys from the outermost to the innermost (for example
``topology.kubernetes.io/block``, ``topology.kubernetes.io/rack``, ``kubernetes.io/hostname``). A *domain* of a
level is the set of a pool's nodes that carry the same value of that label; a node without the label is in no
domain of that level. ``Domains`` holds them for one ``placement.Pool`` and chooses nodes for it:

* A gang (several pods) goes into the smallest domain that holds it: the levels are tried from the innermost
  out, and within a level the domain with the fewest free GPUs that still fits the whole gang (best fit across
  domains, ties by name), so that whole racks and blocks stay free for the large gangs. Within the domain
  the pods are placed by best fit over its nodes, as the pool places them.
* A job that *requires* a level never leaves one domain of that level (or of a level inside it): no fitting
  domain, no placement. One that only *prefers* (every gang does by default) is spread by the pool's best fit
  when no domain of any level fits, and ``choose`` says so.
* A single pod whose best-fit node is an empty one takes an empty node of the same size in the most used
  domain instead (of the innermost level whose domains have several nodes), so a start that has to break a
  whole node breaks one in a rack already broken.

Each level keeps a ``BucketIndex`` over its domains of their free GPUs as the pool's ``now`` index sees them
(kept up to date by ``Pool.take`` through ``moved``): the GPUs a job may use are never more than those (the
reservations only take some away), so a domain with fewer than the gang's GPUs there is never looked at, and
the search starts from the least free domain that may fit. The pool's behaviour without levels is untouched:
a pool of a cluster without levels has no ``Domains``.
"""

from __future__ import annotations

from .placement import BucketIndex

HOSTNAME = "kubernetes.io/hostname"
# A single pod looks at this many candidate domains for an empty node in a used one before it takes the best
# fit's: the search is a preference, never a cost that grows with the pool.
SINGLE_POD_SCAN = 32


def level_name(label: str) -> str:
    """The short name of a level for messages: the last part of its label key ("rack"), "node" for hosts."""
    if label == HOSTNAME:
        return "node"
    return label.rsplit("/", 1)[-1] or label


class Domains:
    """The domains of one pool's indexed nodes, per level (outermost first)."""

    __slots__ = ("levels", "of", "members", "names", "gpus", "free", "spread_level")

    def __init__(self, levels: tuple[str, ...], node_labels: list[dict[str, str]], indexed: list[int],
                 size: list[int], names: list[str] | None = None):
        self.levels = levels
        if names is not None and HOSTNAME in levels:  # a node is its own host even where nothing labels it so
            node_labels = [labels if HOSTNAME in labels else {**labels, HOSTNAME: name}
                           for labels, name in zip(node_labels, names, strict=True)]
        self.of: list[list[int]] = []  # level -> node -> domain (-1: not in one)
        self.members: list[list[list[int]]] = []  # level -> domain -> its indexed nodes, by index
        self.names: list[list[str]] = []  # level -> domain -> its label value
        self.gpus: list[list[int]] = []  # level -> domain -> its GPUs when empty
        for label in levels:
            values = sorted({node_labels[i][label] for i in indexed if label in node_labels[i]})
            ids = {v: d for d, v in enumerate(values)}
            of = [-1] * len(node_labels)
            members: list[list[int]] = [[] for _ in values]
            gpus = [0] * len(values)
            for i in indexed:
                v = node_labels[i].get(label)
                if v is not None:
                    d = of[i] = ids[v]
                    members[d].append(i)
                    gpus[d] += size[i]
            self.of.append(of)
            self.members.append(members)
            self.names.append(values)
            self.gpus.append(gpus)
        self.free: list[BucketIndex] = []
        # The innermost level whose domains hold several nodes: where a single pod prefers a used domain.
        self.spread_level = next((li for li in range(len(levels) - 1, -1, -1)
                                  if any(len(m) > 1 for m in self.members[li])), None)

    def level_index(self, label: str) -> int | None:
        try:
            return self.levels.index(label)
        except ValueError:
            return None

    def build(self, now: BucketIndex) -> None:
        """Index each level's domains by their free GPUs in ``now`` (the pool's index as the cycle begins)."""
        self.free = []
        val = now.val
        for li in range(len(self.levels)):
            totals = [sum(val[i] for i in m) for m in self.members[li]]
            self.free.append(BucketIndex(totals, list(range(len(totals))), max(self.gpus[li], default=0)))

    def copy(self) -> Domains:
        other = Domains.__new__(Domains)
        for name in ("levels", "of", "members", "names", "gpus", "spread_level"):
            setattr(other, name, getattr(self, name))
        other.free = [index.copy() for index in self.free]
        return other

    def moved(self, i: int, delta: int) -> None:
        """Node ``i``'s free GPUs in the pool's ``now`` index changed by ``delta``."""
        if delta:
            for li, of in enumerate(self.of):
                d = of[i]
                if d >= 0:
                    index = self.free[li]
                    index.set(d, index.val[d] + delta)

    # ------------------------------------------------------------ choosing nodes

    def choose(self, index: BucketIndex, g: int, pods: int, required: int | None) -> tuple[list[int] | None, int | None]:
        """Nodes for ``pods`` x ``g`` GPUs in the smallest domain that holds them, read from ``index`` (the free
        GPUs the job may use), and the level of that domain; (None, None) when no domain fits. ``required``: the
        outermost level it may use (None: any)."""
        last = 0 if required is None else required
        for li in range(len(self.levels) - 1, last - 1, -1):
            d = self.best_domain(li, index.val, g, pods)
            if d is not None:
                return best_fit(self.members[li][d], index.val, g, pods), li
        return None, None

    def best_domain(self, li: int, val: list[int], g: int, pods: int) -> int | None:
        """The domain of level ``li`` with the fewest free GPUs (in the pool's ``now``) that holds ``pods`` x ``g``
        GPUs by ``val``, ties by name; None if none does."""
        dom = self.free[li]
        members = self.members[li]
        for f in range(g * pods, dom.top + 1):
            if not dom.count[f]:
                continue
            for d in sorted({d for d in dom.heaps[f] if dom.val[d] == f}):
                cap = 0
                for i in members[d]:
                    v = val[i]
                    if v >= g:
                        cap += v // g
                        if cap >= pods:
                            return d
        return None

    def fits(self, index: BucketIndex, g: int, pods: int, required: int) -> bool:
        """Whether some domain of level ``required`` or inside it holds the gang in ``index``."""
        return self.best_domain(required, index.val, g, pods) is not None

    def single(self, index: BucketIndex, i: int, g: int, size: list[int]) -> int:
        """The node a single pod of ``g`` GPUs takes when best fit chose ``i``: ``i`` unless it is an empty
        node and an empty node of the same size lies in a more used domain (``SINGLE_POD_SCAN``)."""
        li = self.spread_level
        val = index.val
        f = val[i]
        if li is None or f != size[i]:
            return i
        dom, members = self.free[li], self.members[li]
        own = self.of[li][i]
        seen = 0
        for t in range(f, dom.top + 1):
            if not dom.count[t]:
                continue
            for d in sorted({d for d in dom.heaps[t] if dom.val[d] == t}):
                if d == own or dom.val[d] >= self.gpus[li][d]:
                    return i  # its own domain comes first, or only whole domains are left
                for j in members[d]:
                    if val[j] == f and size[j] == f:
                        return j
                seen += 1
                if seen >= SINGLE_POD_SCAN:
                    return i
        return i

    # ------------------------------------------------------------ explaining and estimating

    def largest(self, val: list[int], g: int, li: int) -> int:
        """The most GPUs, in pods of ``g``, that one domain of level ``li`` offers by ``val``."""
        return max((sum(val[i] // g for i in m if val[i] >= g) * g for m in self.members[li]), default=0)

    def ever_fits(self, g: int, pods: int, li: int, size: list[int]) -> bool:
        """Whether some domain of level ``li`` holds the gang when it is empty."""
        return any(sum(size[i] // g for i in m) >= pods for m in self.members[li])

    def place_values(self, val: list[int], g: int, pods: int, li: int) -> list[int] | None:
        """Nodes for the gang in the best-fit domain of level ``li`` by ``val`` alone (a replay's values, with
        no index of its domains), or None."""
        best = None
        for d, m in enumerate(self.members[li]):
            cap = free = 0
            for i in m:
                v = val[i]
                if v > 0:
                    free += v
                    if v >= g:
                        cap += v // g
            if cap >= pods and (best is None or free < best[0]):
                best = (free, d)
        return None if best is None else best_fit(self.members[li][best[1]], val, g, pods)

    def earliest_fit(self, pool, g: int, pods: int, now: float, li: int) -> tuple[float, list[tuple[int, int]]] | None:
        """``Pool.earliest_fit`` within one domain of level ``li``: when, and where, the gang first fits in a
        single domain as running and admitted pods end (at their max runtime) and nothing else is admitted."""
        spare = pool.spare
        index = pool.long if pool.reservations else pool.now
        of, members = self.of[li], self.members[li]
        val = index.val

        def cut(i: int, v: int) -> int:
            if i in spare and spare[i] < v:
                v = spare[i]
            return v if v > 0 else 0

        caps = [sum(val[i] // g for i in m if val[i] >= g) for m in members]
        projected: dict[int, int] = {}
        found = now if any(c >= pods for c in caps) else None
        if found is None:
            events = pool.sorted_events(now)
            indexed = pool._indexed_set
            for end, i, gpus in events:
                if found is not None and end > found:
                    break
                d = of[i]
                if d < 0 or i not in indexed:
                    continue
                old = projected.get(i, pool.free[i])
                new = old + gpus
                caps[d] += cut(i, new) // g - cut(i, old) // g
                projected[i] = new
                if found is None and caps[d] >= pods:
                    found = end
            if found is None:
                return None
        value = list(val)
        for i, v in projected.items():
            value[i] = cut(i, v)
        chosen = self.place_values(value, g, pods, li)
        if chosen is None:
            return None
        for i in chosen:
            value[i] -= g
        return max(now, found), [(i, value[i]) for i in chosen]

    def fit_after_heads(self, pool, g: int, pods: int, now: float, li: int) -> tuple[float, list[tuple[int, int]]] | None:
        """``Pool.fit_after_heads`` within one domain of level ``li``."""
        found = pool.fit_after_heads(g, pods, now)
        if found is None:
            return None
        value = list(pool.size)
        chosen = self.place_values(value, g, pods, li)
        if chosen is None:
            return None
        for i in chosen:
            value[i] -= g
        return found[0], [(i, value[i]) for i in chosen]


def best_fit(nodes: list[int], val: list[int], g: int, pods: int) -> list[int]:
    """``pods`` pods of ``g`` GPUs on ``nodes`` by best fit (the fewest free GPUs that fit, ties by index), as
    ``Pool.place`` does over a whole pool; the caller knows they fit."""
    left = {i: val[i] for i in nodes if val[i] >= g}
    out = []
    for _ in range(pods):
        i = min(left.items(), key=_fit_key)[0]
        out.append(i)
        v = left[i] - g
        if v >= g:
            left[i] = v
        else:
            del left[i]
    return out


def _fit_key(item: tuple[int, int]) -> tuple[int, int]:
    return item[1], item[0]


def spread_over(pool, nodes: list[int]) -> str:
    """The outermost level of ``pool``'s cluster whose domains ``nodes`` span more than one of ("" when they lie
    within one domain of every level, or the cluster has none); a node outside a level's domains spans it."""
    domains = pool.domains
    if domains is None or len(nodes) < 2:
        return ""
    for li, of in enumerate(domains.of):
        first = of[nodes[0]]
        if first < 0 or any(of[i] != first for i in nodes):
            return domains.levels[li]
    return ""


def required_level(pool, job) -> int | None:
    """The index of the level ``job`` requires among ``pool``'s levels (None: it requires none, or the pool's
    cluster lacks that level: the cycle keeps such a job off that pool)."""
    if not job.topology_required or pool.domains is None:
        return None
    return pool.domains.level_index(job.topology_level)


def victim_domains(pool, job) -> list[frozenset[int] | None]:
    """Where victims may be looked for ``job`` in ``pool``: anywhere (``[None]``), or for a job that requires a
    level, each domain of that level whose GPUs could hold the whole job, in name order (evicting elsewhere
    would free GPUs it may not use)."""
    li = required_level(pool, job)
    if li is None:
        return [None]
    domains = pool.domains
    return [frozenset(m) for m, total in zip(domains.members[li], domains.gpus[li], strict=True)
            if total >= job.total_gpus]


def wants_domains(pool, job) -> bool:
    """Whether ``job`` must be placed in one domain of ``pool`` (a required level the pool has)."""
    return job.topology_required and pool.domains is not None


def required_note(pool, job, index: BucketIndex) -> tuple[str, dict]:
    """Why a job that requires a level does not fit in ``pool`` now: "needs one rack with 16 free GPUs; the
    largest has 12", and the detail's figures."""
    li = required_level(pool, job)
    domains = pool.domains
    g, k = job.gpus_per_pod, job.total_gpus
    name = level_name(job.topology_level)
    if li is None:
        return f"needs one {name} with {k} free GPUs; {pool.cluster} has no {name} level", {}
    largest = domains.largest(index.val, g, li)
    return (f"needs one {name} with {k} free GPUs; the largest has {largest}",
            {"topology_level": job.topology_level, "largest_domain_free": largest})
