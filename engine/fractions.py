"""Fractional GPUs (pure): the share of one GPU a pod asks for, and the per-GPU book that places such pods.

A **share** (``Share``) is a pod's part of one GPU under one of two sharing mechanisms a flavor may declare:

* ``hami``: memory-isolated sharing (HAMi): GPU memory in MiB (of the GPU's ``capacity`` MiB) and optionally a
  compute share in per cent of the SMs (``cores``; 0 = not limited, it then takes compute as it comes).
* ``replicas``: the NVIDIA device plugin's time-slicing or MPS replicas: ``replicas`` of the ``capacity``
  replicas each GPU is advertised as.

``fraction(share)`` is the one number "what part of a GPU is this", in milli-GPUs, used for quotas, prices,
holds, the ledger and the cluster page: for HAMi the larger of the memory share and the compute share (a pod
that holds 10% of the memory and 80% of the SMs keeps others from 80% of the GPU: what it denies others is what
it uses), for replicas ``replicas / capacity``. It is rounded to the nearest milli-GPU, at least 1.

The **book** (``GpuBook``, one per pool) knows each GPU of the pool that holds fractions (a *shared* GPU) and
what is left on it, in two dimensions: the first unit (MiB for HAMi, replicas) and compute per cent. A GPU
never holds more than it has (``never oversubscribed``). A shared GPU counts as one whole GPU taken from the
pool (``placement.Pool``): it is not free to a whole-GPU job until its last fraction has left. A fraction goes

1. to the shared GPU of the pool it fits best (least left in the first unit, then compute, then node name, then
   device index): packing fills GPUs already shared before opening one;
2. else it opens a whole GPU, on the node the pool's best fit chooses for one GPU (the node with the fewest free
   GPUs that still has one): the same anti-fragmentation rule whole-GPU jobs follow, so whole nodes stay free.

A reserved head never counts on a shared GPU becoming whole (its release is in ``Pool.shared_ends``, not in
the heads' plan ``Pool.events``): fractions join a shared GPU whatever the reservations (sessions are realtime,
judged before every head), so the last holder's declared end is no instant the engine can keep. A gang that
needs a GPU shared now reserves on other nodes, or not at all; the work behind it is then not held back for a
start that each notebook joining the GPU would push back.

Device indices are the portal's own numbering of a node's shared GPUs (0, 1, ...: the lowest index no shared
GPU of the node holds); the snapshot records each running fractional pod's index, and the Kubernetes adapter
names the device that index stands for (docs/fractions.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from fractions import Fraction

HAMI, REPLICAS = "hami", "replicas"
MECHANISMS: tuple[str, ...] = (HAMI, REPLICAS)
MILLI = 1000
FULL_CORES = 100


@dataclass(frozen=True, slots=True)
class Share:
    """One pod's part of one GPU (see the module's docstring for the units)."""

    mechanism: str
    capacity: int  # HAMi: the GPU's memory in MiB; replicas: the replicas each GPU is advertised as
    memory_mib: int = 0
    cores: int = 0
    replicas: int = 0
    # Worked out once (a cycle asks for them per job, many times): the first dimension's units, the fraction in
    # milli-GPUs, and as an exact number of GPUs.
    units: int = field(default=0, init=False, compare=False, repr=False)
    milli: int = field(default=0, init=False, compare=False, repr=False)
    gpus: Fraction = field(default=Fraction(0), init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        milli = fraction(self)
        object.__setattr__(self, "units", self.memory_mib if self.mechanism == HAMI else self.replicas)
        object.__setattr__(self, "milli", milli)
        object.__setattr__(self, "gpus", Fraction(milli, MILLI))


def fraction(share: Share) -> int:
    """The fraction of a GPU this request is, in milli-GPUs (1..1000): max(memory share, compute share) under
    HAMi, replicas / replicas-per-GPU under replicas. Callers outside the engine (the right-sizer, the quote)
    use this one function."""
    return _fraction(share.mechanism, share.capacity, share.memory_mib, share.cores, share.replicas)


def fraction_of(mechanism: str, capacity: int, *, memory_mib: int = 0, cores: int = 0, replicas: int = 0) -> int:
    """``fraction`` from plain numbers (a flavor's capacity and a request's figures)."""
    return _fraction(mechanism, capacity, memory_mib, cores, replicas)


def _fraction(mechanism: str, capacity: int, memory_mib: int, cores: int, replicas: int) -> int:
    if capacity <= 0:
        return MILLI
    if mechanism == HAMI:
        share = max(Fraction(memory_mib, capacity), Fraction(cores, FULL_CORES))
    else:
        share = Fraction(replicas, capacity)
    milli = int(share * MILLI + Fraction(1, 2))  # nearest milli-GPU (half up)
    return min(MILLI, max(1, milli))


def milli_of(gpus) -> int:
    """A number of GPUs (an int, or a ``Fraction`` that is a whole number of milli-GPUs, as every share is) in
    milli-GPUs, the quota book's unit."""
    if type(gpus) is int:
        return gpus * MILLI
    return gpus.numerator * MILLI // gpus.denominator


def gpus_of(milli: int) -> int | float:
    """Milli-GPUs as GPUs for people and JSON: an int when whole, else a float (what ``plain`` makes of the same
    exact ``Fraction``: the float nearest to it)."""
    whole, part = divmod(milli, MILLI)
    return whole if part == 0 else milli / MILLI


def describe(share: Share) -> str:
    """The request in words, as reasons and pages say it."""
    if share.mechanism == HAMI:
        text = f"{share.memory_mib / 1024:g} GiB of GPU memory"
        if share.cores:
            text += f" and {share.cores}% of its compute"
        return f"{text} ({share.milli / MILLI:g} GPU)"
    return f"{share.replicas} of {share.capacity} replicas of a GPU ({share.milli / MILLI:g} GPU)"


class SharedGpu:
    """What is left on one shared GPU of a pool, and the fractions it holds (job id per pod)."""

    __slots__ = ("node", "device", "units", "cores", "holders")

    def __init__(self, node: int, device: int, units: int, cores: int):
        self.node = node
        self.device = device
        self.units = units  # MiB or replicas left
        self.cores = cores  # compute per cent left
        self.holders: list[int] = []

    def fits(self, share: Share) -> bool:
        return share.units <= self.units and share.cores <= self.cores

    def copy(self) -> SharedGpu:
        other = SharedGpu(self.node, self.device, self.units, self.cores)
        other.holders = list(self.holders)
        return other


class GpuBook:
    """The shared GPUs of one pool (``SharedGpu`` by (node index, device index)) during a cycle.

    ``version`` counts the changes (a fraction held, taken, a GPU opened); ``rooms`` remembers, per size of
    share, the room counted at a version: the jobs of a deep queue that find no room ask again and again while
    nothing changed, and each count is a walk over every shared GPU of the pool."""

    __slots__ = ("gpus", "version", "rooms")

    def __init__(self) -> None:
        self.gpus: dict[tuple[int, int], SharedGpu] = {}
        self.version = 0
        self.rooms: dict[tuple[int, int], tuple[int, int]] = {}  # (units, cores) -> (version, room)

    def copy(self) -> GpuBook:
        other = GpuBook()
        other.gpus = {key: gpu.copy() for key, gpu in self.gpus.items()}
        other.version, other.rooms = self.version, dict(self.rooms)
        return other

    def hold(self, job_id: int, node: int, device: int, share: Share) -> bool:
        """A running fractional pod on (node, device); True when it opened that GPU (the pool then counts it
        as one whole GPU taken). A GPU recorded beyond its capacity (an input that over-commits) stays full."""
        key = (node, device)
        gpu = self.gpus.get(key)
        opened = gpu is None
        if opened:
            gpu = self.gpus[key] = SharedGpu(node, device, share.capacity, FULL_CORES)
        gpu.units -= share.units
        gpu.cores -= share.cores
        gpu.holders.append(job_id)
        self.version += 1
        return opened

    def best(self, share: Share, taints) -> SharedGpu | None:
        """The shared GPU ``share`` fits best among those on untainted nodes (``taints[node]`` false): the least
        left after it (first unit, then compute), ties by node then device index."""
        best = None
        best_key = None
        units, cores = share.units, share.cores
        least = None  # (what the best so far leaves in the first unit: most GPUs leave more, and are passed by)
        for gpu in self.gpus.values():
            left = gpu.units - units
            if left < 0 or gpu.cores < cores or taints[gpu.node] or (least is not None and left > least):
                continue
            key = (left, gpu.cores - cores, gpu.node, gpu.device)
            if best_key is None or key < best_key:
                best, best_key, least = gpu, key, left
        return best

    def room(self, share: Share, taints, enough: int | None = None) -> int:
        """How many pods of ``share`` the shared GPUs of untainted nodes take as they are (no GPU opened); the
        count stops at ``enough`` once it is reached (a job asks whether its pods fit, not how many would). The
        pool's ``taints`` are fixed for the cycle: a full count holds until the book changes."""
        units, cores = share.units, share.cores
        key = (units, cores)
        hit = self.rooms.get(key)
        if hit is not None and hit[0] == self.version:
            return hit[1]
        n = 0
        for gpu in self.gpus.values():
            if units <= gpu.units and cores <= gpu.cores and not taints[gpu.node]:
                by_units = gpu.units // units if units > 0 else MILLI
                by_cores = gpu.cores // cores if cores > 0 else MILLI
                n += by_units if by_units < by_cores else by_cores
                if enough is not None and n >= enough:
                    return n
        self.rooms[key] = (self.version, n)
        return n

    def open(self, node: int, share: Share) -> SharedGpu:
        """Open a GPU of ``node`` for fractions: the lowest device index no shared GPU of the node holds."""
        used = {d for (i, d) in self.gpus if i == node}
        device = 0
        while device in used:
            device += 1
        gpu = self.gpus[(node, device)] = SharedGpu(node, device, share.capacity, FULL_CORES)
        self.version += 1
        return gpu

    def take(self, gpu: SharedGpu, job_id: int, share: Share) -> None:
        gpu.units -= share.units
        gpu.cores -= share.cores
        gpu.holders.append(job_id)
        self.version += 1

    def shared_on(self, node: int) -> int:
        return sum(1 for (i, _) in self.gpus if i == node)


# ---------------------------------------------------------------- the cycle's hooks (on a ``placement.Pool``)


def book_of(pool) -> GpuBook:
    """The pool's book of shared GPUs, made at the first fraction (a pool without fractions has none)."""
    book = pool.shares
    if book is None:
        book = pool.shares = GpuBook()
    return book


def per_gpu(share: Share) -> int:
    """How many pods of ``share`` one empty GPU takes."""
    by_units = share.capacity // share.units if share.units > 0 else MILLI
    by_cores = FULL_CORES // share.cores if share.cores > 0 else MILLI
    return max(0, min(by_units, by_cores))


def hold_running(pool, jobs, end_of, likely_of, likely_events: list) -> None:
    """Book the running fractional ``jobs`` of ``pool`` on their shared GPUs (each pod on the device its
    snapshot names; a pod without one on the lowest free device of its node). Each shared GPU is one GPU taken
    from the pool until its last fraction ends (``Pool.shared_ends`` at the latest declared end of its holders,
    ``likely_events`` at the latest likely end)."""
    book = book_of(pool)
    pos, free = pool.pos, pool.free
    ends: dict[tuple[int, int], list[float]] = {}
    for job in jobs:
        devices = job.devices
        end, likely = end_of(job), likely_of(job)
        for k, name in enumerate(job.placement):
            i = pos.get(name)
            if i is None:
                continue
            d = devices[k] if k < len(devices) else book.open(i, job.share).device
            if book.hold(job.id, i, d, job.share):
                free[i] -= 1
                ends[(i, d)] = [end, likely]
            else:
                pair = ends.setdefault((i, d), [end, likely])
                pair[0], pair[1] = max(pair[0], end), max(pair[1], likely)
    for (i, _), (end, likely) in sorted(ends.items()):
        pool.shared_ends.append((end, i, 1))
        likely_events.append((likely, i, 1))


def capacity(pool, share: Share, end: float, enough: int | None = None) -> int:
    """How many pods of ``share`` fit ``pool`` now: the room on its shared GPUs, then on the whole GPUs a job
    ending at ``end`` may open (the reservations' rules, as for one GPU). With ``enough``, a count of at least
    that once it is reached: the whole GPUs are not counted when the shared ones hold that many."""
    book = pool.shares
    room = 0 if book is None else book.room(share, pool.taints, enough)
    if enough is not None and room >= enough:
        return room
    return room + pool.index_for(end).capacity(1) * per_gpu(share)


def place(pool, job, end: float) -> tuple[list[int], list[int], list[int]]:
    """Place every pod of the fractional ``job`` (``capacity`` said they fit): on the shared GPU each fits best,
    else on a GPU it opens on the node the pool's one-GPU best fit chooses. (node indices, device indices, nodes
    of the GPUs opened)."""
    book = book_of(pool)
    share = job.share
    taints = pool.taints
    nodes: list[int] = []
    devices: list[int] = []
    opened: list[int] = []
    for _ in range(job.pods):
        gpu = book.best(share, taints)
        if gpu is None:
            (i,) = pool.place(1, 1, end)
            gpu = book.open(i, share)
            opened.append(i)
        book.take(gpu, job.id, share)
        nodes.append(gpu.node)
        devices.append(gpu.device)
    return nodes, devices, opened


def plain(value):
    """A number for JSON and for people: an integral ``Fraction`` as an int, another as a float."""
    if type(value) is Fraction:
        return value.numerator if value.denominator == 1 else float(value)
    return value


def plain_detail(detail):
    """``detail`` with its ``Fraction`` values made ``plain`` (the detail itself when it has none)."""
    if not any(type(v) is Fraction for v in detail.values()):
        return detail
    return {k: plain(v) for k, v in detail.items()}
