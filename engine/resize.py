"""Resizable jobs: a job whose size may change between a minimum and a maximum number of pods of its GPU gang
("elastic jobs" in the sense of a changing size; not the *elastic tier*, which is about preemptibility).

Three narrow hooks in the cycle (``engine.cycle.Cycle``), the sizing logic all here:

* ``held(running)`` at the start: each running resizable job is held at its minimum. Its pods beyond it (the
  last ones of its placement) are *soft*: the pools, the quota book and the victim search see their GPUs free.
  Any job that may start there takes them, so a resizable job shrinks (never below its minimum) before any whole
  job is preempted for the same GPUs, and a reserved head counts on the GPUs it lent to a resizable job.
* ``sized(job)`` before a pending resizable job is judged: the largest size in its range that fits now without
  displacing anyone (free GPUs it may use past every reservation it would run past, and room in its quota),
  else its minimum (it queues, reserves and preempts at that size).
* ``settle()`` after the pass: an admission that landed on soft GPUs waits (``waiting_for_resize``) while their
  job shrinks at its next checkpoint (a "down" resize for that job); soft pods that nobody took stay with their
  job. Then running resizable jobs grow into the GPUs still idle (an "up" resize), the smallest share of their
  maximum first, never onto the GPUs a reserved head needs before the job's next checkpoint (it could not give
  them back in time), and within their department's borrowing limit. The grown part is borrowed,
  preemptible capacity: it is soft from the next cycle on, and charged at the flavor's clearing price.

A job that is ``resizing`` (a decision still waiting for its checkpoint) is held whole and neither grows nor
shrinks again until the adapter reports the resize done.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import replace

from . import reasons
from .fractions import MILLI
from .placement import Pool
from .state import CycleState
from .types import Admission, PendingJob, Resize, RunningJob

UP, DOWN = "up", "down"
IDLE, FOR_JOB = "idle", "for_job"
# A grow keeps off the GPUs a reserved head needs before the job's next checkpoint: it gives grown GPUs back
# only at a checkpoint (or its answer to a notice), so a head due sooner would wait for it; a head due later
# finds the grown pods soft at its start and waits at most for that one checkpoint. Two checkpoints (an hour on
# the labs) left the GPUs of heads due in the second of them idle, for 8-GPU waits only 0-3% shorter.
GROW_CLEAR_CHECKPOINTS = 1


def resizable(job: RunningJob) -> bool:
    return job.min_pods is not None and job.max_pods is not None and not job.resizing


def speedup(pods: int, of: int, per_doubling: float = 0.9) -> float:
    """The throughput of ``pods`` pods relative to ``of`` pods, when each doubling of the size multiplies it by
    2 x ``per_doubling`` (0.9: 1.8x for twice the GPUs)."""
    if pods == of:
        return 1.0
    from math import log2

    return (pods / of) ** log2(2 * per_doubling)


class Resizer:
    """The cycle's resizable jobs: their soft pods, the admissions that wait for a shrink, and the resizes."""

    def __init__(self, cycle: CycleState):
        self.cycle = cycle
        # running job -> its soft pods' node names (the pods beyond its minimum), in placement order
        self.soft: dict[int, tuple[str, ...]] = {}
        self.full: dict[int, RunningJob] = {}  # the running resizable jobs as the snapshot gave them
        self.resizes: list[Resize] = []
        self.taker: dict[int, int] = {}  # shrinking job -> a job that took its soft GPUs
        self._flavors: dict[int, str] | None = None  # pending job -> its flavor, built when first asked

    # ------------------------------------------------------------ the hooks

    def held(self, running: list[RunningJob]) -> list[RunningJob]:
        """``running`` with each resizable job cut to its minimum (its soft pods recorded)."""
        out = []
        for job in running:
            if resizable(job) and job.pods > job.min_pods and job.evicting_for is None:
                self.full[job.id] = job
                self.soft[job.id] = job.placement[job.min_pods:]
                job = replace(job, placement=job.placement[:job.min_pods])
            out.append(job)
        return out

    @staticmethod
    def sized(cycle: CycleState, job: PendingJob) -> PendingJob:
        """The job at the size ``cycle`` (the cycle, or a price's replay of it) judges it at: the largest of its
        range that starts now without displacing anyone, else its minimum."""
        low = job.min_pods
        if low is None or low >= job.pods:
            return job
        g = job.gpus_per_pod
        end = cycle.now + job.max_runtime_s
        pools, _ = cycle.topology.job_pools(job)
        headroom = cycle.policy.realtime_headroom_gpus if job.tier != "realtime" else 0
        room = 0
        for pool in pools:
            fits = pool.index_for(end).capacity(g)
            if headroom > 0 and not cycle.evictions.may_evict_soon((pool.cluster, pool.flavor)):
                fits = min(fits, (pool.now.free_total() - headroom) // g)  # (``Cycle.leaves_headroom``)
            room = max(room, fits)
        best = low
        for pods in range(min(job.pods, room), low - 1, -1):
            if pods <= low:
                break
            clusters = {p.cluster for p in pools} or {None}
            if any(cycle.quota.check(job.department, job.flavor, pods * g * MILLI, cluster=c)[0] is None
                   for c in clusters):
                best = pods
                break
        return job if best == job.pods else replace(job, pods=best)

    def settle(self) -> list[Resize]:
        """Defer the admissions that took soft GPUs (their jobs shrink), then grow into what stays idle."""
        if not self.soft and not self.full and not self._growable():
            return []
        cycle = self.cycle
        kept = self._defer_takers()
        for job_id, nodes in kept.items():
            job = self.full[job_id]
            pool = cycle.pools.get((job.cluster, job.flavor))
            if nodes:
                cycle.quota.add(job.department, job.flavor, len(nodes) * job.gpus_per_pod * MILLI, job.cluster)
            if len(nodes) < len(self.soft[job_id]):
                placement = job.placement[:job.min_pods] + nodes
                self.resizes.append(Resize(job.id, placement, DOWN, FOR_JOB, for_job=self.taker.get(job_id)))
            if pool is not None:
                for name in nodes:
                    i = pool.pos.get(name)
                    if i is not None:
                        pool.free[i] -= job.gpus_per_pod  # (the indexes are not read after the pass)
        self._grow(kept)
        victims = cycle.evictions.taken  # (a victim of this cycle goes whole: no resize of it)
        self.resizes = [r for r in self.resizes if r.job_id not in victims]
        return self.resizes

    # ------------------------------------------------------------ shrinking for the jobs that took soft GPUs

    def _defer_takers(self) -> dict[int, tuple[str, ...]]:
        """Per job with soft pods, the soft pods it keeps. A node whose free GPUs went below its soft GPUs was
        taken by this cycle's admissions there: each such admission waits for the shrink instead, and the soft
        pods on that node give way, the youngest job's first, until the deficit is covered."""
        cycle = self.cycle
        soft_on: dict[tuple[str, str, str], list[tuple[int, int]]] = {}  # (cluster, flavor, node) -> [(job, pod)]
        for job_id, nodes in self.soft.items():
            job = self.full[job_id]
            for k, name in enumerate(nodes):
                soft_on.setdefault((job.cluster, job.flavor, name), []).append((job_id, k))
        given: dict[int, set[int]] = {}
        if soft_on:
            by_id = {job.id: job for job in cycle.order}
            for key, pods in sorted(soft_on.items()):
                pool = cycle.pools.get(key[:2])
                i = None if pool is None else pool.pos.get(key[2])
                if i is None:
                    continue
                soft_gpus = sum(self.full[j].gpus_per_pod for j, _ in pods)
                deficit = soft_gpus - pool.free[i]
                if deficit <= 0:
                    continue
                takers = [a for a in cycle.admissions.values()
                          if a.cluster == key[0] and key[2] in a.placement
                          and by_id[a.job_id].flavor == key[1]]
                for pod_job, k in sorted(pods, key=lambda p: (-p[0], -p[1])):
                    if deficit <= 0:
                        break
                    given.setdefault(pod_job, set()).add(k)
                    deficit -= self.full[pod_job].gpus_per_pod
                    if takers:
                        self.taker.setdefault(pod_job, takers[0].job_id)
                for adm in takers:
                    self._wait_for_resize(by_id[adm.job_id], adm, key[0])
        return {job_id: tuple(n for k, n in enumerate(nodes) if k not in given.get(job_id, ()))
                for job_id, nodes in self.soft.items()}

    def _wait_for_resize(self, job: PendingJob, adm: Admission, cluster: str) -> None:
        cycle = self.cycle
        if cycle.admissions.pop(job.id, None) is None:
            return
        # (its GPUs stay taken in the pools for the rest of this cycle: nothing grows into them)
        cycle.prices.pop(job.id, None)
        shrinking = sorted(j for j, nodes in self.soft.items()
                           if any(n in adm.placement for n in nodes))
        cycle.pend(job, reasons.WAITING_FOR_RESIZE, {"resizing": shrinking, reasons.DETAIL_CLUSTER: cluster},
                   (f"resizable jobs {', '.join(map(str, shrinking))} give back GPUs at their next checkpoints"
                    if len(shrinking) > 1 else f"resizable job {shrinking[0]} gives back GPUs at its next checkpoint"))

    # ------------------------------------------------------------ growing into idle GPUs

    def _growable(self) -> bool:
        return any(resizable(job) and job.pods < job.max_pods for job in self.cycle.running)

    def _grow(self, kept: dict[int, tuple[str, ...]]) -> None:
        cycle = self.cycle
        now = cycle.now
        victims = cycle.evictions.taken
        cands = []
        for job in cycle.running:  # (held: cut to their minimum)
            if not resizable(job) or job.id in victims or job.evicting_for is not None:
                continue
            pods = job.pods + len(kept.get(job.id, ()))
            if pods >= job.max_pods:
                continue
            cands.append((pods / job.max_pods, job.started_at, job.id, job, pods))
        if not cands:
            return
        used: dict[tuple[str, str], dict[int, int]] = {}
        clearing = self.clearing_price
        for _, _, _, job, pods in sorted(cands, key=lambda c: c[:3]):
            pool = cycle.pools.get((job.cluster, job.flavor))
            if pool is None:
                continue
            g = job.gpus_per_pod
            horizon = now + GROW_CLEAR_CHECKPOINTS * (job.checkpoint_interval_s or job.max_runtime_s)
            m = bisect_left(pool.untils, horizon) if pool.untils else 0
            taken = used.setdefault((job.cluster, job.flavor), {})
            added: list[str] = []
            while pods + len(added) < job.max_pods:
                if cycle.quota.check(job.department, job.flavor, g * MILLI, cluster=job.cluster)[0] is not None:
                    break
                i = _best(pool, m, taken, g)
                if i is None:
                    break
                taken[i] = taken.get(i, 0) + g
                cycle.quota.add(job.department, job.flavor, g * MILLI, job.cluster)
                added.append(pool.names[i])
            if added:
                full = self.full.get(job.id)
                before = job.placement + kept.get(job.id, ()) if full is not None else job.placement
                self.resizes = [r for r in self.resizes if r.job_id != job.id]  # (a shrink elsewhere and a grow)
                direction = UP if len(before) + len(added) >= (full or job).pods else DOWN
                self.resizes.append(Resize(job.id, tuple(before) + tuple(added), direction, IDLE,
                                           price=clearing(job.flavor)))

    def clearing_price(self, flavor: str) -> int | None:
        """The flavor's clearing price this cycle (the highest price a borrowed winner pays), None if none."""
        best = None
        for adm in self.cycle.admissions.values():
            price = self.cycle.prices.get(adm.job_id)
            if adm.borrowed and price and self._flavor(adm.job_id) == flavor:
                best = price if best is None else max(best, price)
        return best

    def _flavor(self, job_id: int) -> str | None:
        flavors = self._flavors
        if flavors is None:
            flavors = self._flavors = {job.id: job.flavor for job in self.cycle.order}
        return flavors.get(job_id)


def _best(pool: Pool, m: int, taken: dict[int, int], g: int) -> int | None:
    """The node with the fewest free GPUs that still has ``g`` for a job that must keep off the first ``m``
    reservations' heads (best fit, ties by name), after ``taken`` GPUs grown this cycle."""
    best = None
    for i in pool.indexed:
        left = pool.cut(i, m) - taken.get(i, 0)
        if left >= g and (best is None or left < best[0]):
            best = (left, i)
    return None if best is None else best[1]
