"""Jobs of any shape (pure): CPU pools and the roles of a job that run on them.

A job is one or more roles (``types.Role``). Its roles with GPUs form one gang on the job's GPU flavor, placed by
``placement.Pool`` as every job's pods always were (``PendingJob.pods`` x ``gpus_per_pod``). Its roles without
GPUs run on a **CPU pool**: the nodes of a flavor of kind ``cpu`` (``Node.kind``), sized in millicores and MiB.
This module places those pods, all of a job's roles or none, and names the role that does not fit.

A ``CpuPool`` holds the schedulable, untainted nodes of one (cluster, CPU flavor), node ``i`` the i-th by name.
A pod goes to the node it leaves the fewest cores free on (then the least memory, then the name): best fit,
which fills used nodes first and keeps whole nodes free for large pods. The nodes are kept sorted by what they
have free, so a pod is placed by a bisection rather than a look at every node; a role larger than all that is
free is turned away at once, and a role that did not fit is remembered with the pool's version (``failed``):
the next role of that size fails on a lookup until the pool changes. CPU work neither reserves nor preempts: it is admitted in the queue's order
by what fits now.

Quotas in cores and memory are the quota book's rows under the keys ``<flavor>#cpu`` (millicores) and
``<flavor>#memory`` (MiB) (``resource_key``): nominal, borrowing and lending behave as for GPUs. The cores row
is required, as a GPU quota is; a department without a memory row is not limited in memory.
"""

from __future__ import annotations

from bisect import bisect_left, insort
from functools import lru_cache

from .types import Node, Role

CPU_KIND = "cpu"
CPU, MEMORY = "cpu", "memory"


def resource_key(flavor: str, resource: str) -> str:
    """The quota book's key of a CPU pool's cores (``cpu``, in millicores) or memory (``memory``, in MiB)."""
    return f"{flavor}#{resource}"


@lru_cache(maxsize=4096)
def demand(roles: tuple[Role, ...]) -> tuple[tuple[str, int, int], ...]:
    """Per CPU flavor (sorted), the millicores and MiB its roles ask for in all (the quotas add the roles up)."""
    out: dict[str, tuple[int, int]] = {}
    for r in roles:
        cpu, mem = out.get(r.flavor, (0, 0))
        out[r.flavor] = (cpu + r.pods * r.cpu_m, mem + r.pods * r.memory_mib)
    return tuple((flavor, cpu, mem) for flavor, (cpu, mem) in sorted(out.items()))


def role_text(role: Role) -> str:
    return f"role {role.name} ({role.pods} x {role.cpu_m / 1000:g} cores, {role.memory_mib / 1024:g} GiB)"


class CpuPool:
    """The schedulable nodes of one (cluster, CPU flavor) and their free millicores and MiB during a cycle.

    ``order`` keeps (free millicores, free MiB, node index) of every node sorted, so the best fit of a pod of
    ``c`` millicores and ``m`` MiB is the first entry from ``(c, m)`` on whose memory is enough too (a bisection,
    then a short walk past nodes short of memory): no pod looks at every node. ``free_cpu``/``free_mem`` (the
    clamped totals) turn away a role larger than everything free at once."""

    __slots__ = ("cluster", "flavor", "names", "pos", "cpu", "mem", "cpu_size", "mem_size", "version", "failed",
                 "order", "free_cpu", "free_mem", "fits_empty")

    def __init__(self, cluster: str, flavor: str, nodes: list[Node]):
        nodes = sorted((n for n in nodes if n.schedulable and not n.taints), key=lambda n: n.name)
        self.cluster = cluster
        self.flavor = flavor
        self.names = [n.name for n in nodes]
        self.pos = {n.name: i for i, n in enumerate(nodes)}
        self.cpu_size = [n.cpu_m for n in nodes]
        self.mem_size = [n.memory_mib for n in nodes]
        self.cpu = list(self.cpu_size)
        self.mem = list(self.mem_size)
        self.order = sorted((c, m, i) for i, (c, m) in enumerate(zip(self.cpu, self.mem, strict=True)))
        self.free_cpu = sum(max(0, c) for c in self.cpu)
        self.free_mem = sum(max(0, m) for m in self.mem)
        self.version = 0  # bumped by every change: a remembered failure holds while it is unchanged
        self.failed: dict[tuple[int, int, int], int] = {}  # (cores, MiB, pods) -> version it failed at
        self.fits_empty: dict[tuple[int, int], bool] = {}  # (cores, MiB) -> whether an empty node takes it

    def fork(self) -> CpuPool:
        other = CpuPool.__new__(CpuPool)
        for name in ("cluster", "flavor", "names", "pos", "cpu_size", "mem_size", "version", "free_cpu", "free_mem",
                     "fits_empty"):
            setattr(other, name, getattr(self, name))
        other.cpu, other.mem, other.failed, other.order = list(self.cpu), list(self.mem), dict(self.failed), list(self.order)
        return other

    def _set(self, i: int, cpu: int, mem: int) -> None:
        old_c, old_m = self.cpu[i], self.mem[i]
        del self.order[bisect_left(self.order, (old_c, old_m, i))]
        insort(self.order, (cpu, mem, i))
        self.free_cpu += max(0, cpu) - max(0, old_c)
        self.free_mem += max(0, mem) - max(0, old_m)
        self.cpu[i], self.mem[i] = cpu, mem

    def hold(self, node: str, cpu: int, mem: int) -> None:
        """A running pod's share of its node (a node not in the pool, cordoned or tainted, is skipped)."""
        i = self.pos.get(node)
        if i is not None:
            self._set(i, self.cpu[i] - cpu, self.mem[i] - mem)
            self.version += 1

    def free(self) -> tuple[int, int]:
        return self.free_cpu, self.free_mem

    def ever_fits(self, role: Role) -> bool:
        """Whether one pod of ``role`` fits an empty node of the pool at all."""
        key = (role.cpu_m, role.memory_mib)
        hit = self.fits_empty.get(key)
        if hit is None:
            hit = self.fits_empty[key] = any(c >= key[0] and m >= key[1]
                                             for c, m in zip(self.cpu_size, self.mem_size, strict=True))
        return hit

    def best(self, c: int, m: int) -> int:
        """The node a pod of ``c`` millicores and ``m`` MiB fits best (fewest cores left, then memory, then
        name), or -1."""
        order = self.order
        for k in range(bisect_left(order, (c, m, -1)), len(order)):
            if order[k][1] >= m:
                return order[k][2]
        return -1

    def place_role(self, role: Role) -> list[int] | None:
        """Best-fit every pod of ``role``, all or nothing: the node indices taken, or None (nothing taken)."""
        c, m, n = role.cpu_m, role.memory_mib, role.pods
        shape = (c, m, n)
        if self.failed.get(shape) == self.version:
            return None
        if c * n > self.free_cpu or m * n > self.free_mem:
            self.failed[shape] = self.version
            return None
        taken: list[int] = []
        for _ in range(n):
            i = self.best(c, m)
            if i < 0:
                for j in reversed(taken):
                    self._set(j, self.cpu[j] + c, self.mem[j] + m)
                self.failed[shape] = self.version
                return None
            self._set(i, self.cpu[i] - c, self.mem[i] - m)
            taken.append(i)
        self.version += 1
        return taken

    def fits_role(self, role: Role) -> bool:
        """Whether every pod of ``role`` fits now, without placing them: pods of one size fit wherever they go,
        each taking exactly one of the ``min(free cores // c, free MiB // m)`` slots of its node, so best fit
        places them all exactly when the nodes have that many slots in all (counted from the first node with
        the cores, until there are enough)."""
        c, m, n = role.cpu_m, role.memory_mib, role.pods
        if self.failed.get((c, m, n)) == self.version or c * n > self.free_cpu or m * n > self.free_mem:
            return False
        if c <= 0 or m <= 0:  # (no slot count without a size to divide by: placed and given back)
            taken = self.place_role(role)
            if taken is None:
                return False
            self.release(role, taken)
            return True
        slots = 0
        order = self.order
        for k in range(bisect_left(order, (c, m, -1)), len(order)):
            cpu, mem, _ = order[k]
            if mem >= m:
                slots += min(cpu // c, mem // m)
                if slots >= n:
                    return True
        return False

    def release(self, role: Role, taken: list[int]) -> None:
        for i in taken:
            self._set(i, self.cpu[i] + role.cpu_m, self.mem[i] + role.memory_mib)
        self.version += 1


def place_roles(pools: dict[tuple[str, str], CpuPool], cluster: str, roles: tuple[Role, ...]
                ) -> tuple[list[list[int]], None] | tuple[None, tuple[Role, dict]]:
    """Place every CPU role of a job on ``cluster``'s CPU pools, all or nothing: the node indices of each role's
    pods, or the first role that does not fit with the detail of why (nothing is taken then)."""
    placed: list[tuple[CpuPool, Role, list[int]]] = []
    for role in roles:
        pool = pools.get((cluster, role.flavor))
        taken = None if pool is None else pool.place_role(role)
        if taken is None:
            for p, r, t in reversed(placed):
                p.release(r, t)
            return None, (role, why(pool, role, cluster))
        placed.append((pool, role, taken))
    return [t for _, _, t in placed], None


def roles_fit(pools: dict[tuple[str, str], CpuPool], cluster: str, roles: tuple[Role, ...]) -> bool:
    """Whether ``place_roles`` would place every CPU role of a job on ``cluster`` now, nothing taken. Roles on
    pools of their own are counted (``CpuPool.fits_role``); two roles on one pool are placed and given back,
    the first one's pods changing what the second finds."""
    flavors = [r.flavor for r in roles]
    if len(set(flavors)) < len(flavors):
        placed, _ = place_roles(pools, cluster, roles)
        if placed is None:
            return False
        for role, taken in zip(roles, placed, strict=True):
            pools[(cluster, role.flavor)].release(role, taken)
        return True
    for role in roles:
        pool = pools.get((cluster, role.flavor))
        if pool is None or not pool.fits_role(role):
            return False
    return True


def why(pool: CpuPool | None, role: Role, cluster: str) -> dict:
    """The detail of a CPU role that does not fit: its size, the pool's free cores and memory, and whether it
    could ever fit (``never``: no node of the pool is that large, or no such pool on the cluster)."""
    detail: dict[str, object] = {"role": role.name, "pods": role.pods, "cpu_millicores": role.cpu_m,
                                 "memory_mib": role.memory_mib, "flavor": role.flavor, "cluster": cluster}
    if pool is None:
        detail["never"] = True
        return detail
    free_cpu, free_mem = pool.free()
    detail["free_cpu_millicores"], detail["free_memory_mib"] = free_cpu, free_mem
    detail["never"] = not pool.ever_fits(role)
    return detail
