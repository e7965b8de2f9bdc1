"""Queue + DRF proportion (kube-batch / Volcano-like).

Each department is a queue weighted by its nominal quota. ``deserved`` is the capacity water-filled over the
queues by weight, capped by each queue's demand (held + pending GPUs), so idle capacity flows to queues with
demand. Allocation repeatedly serves the queue with the lowest allocated/deserved share (DRF with one resource)
that is not overused, its jobs in priority then creation order (a job that does not fit is skipped). Reclaim: a
queue that stays within its deserved share with the job evicts preemptible jobs of overused queues (most overused
first, lowest priority, latest started) as long as they stay at or above their deserved share. No minimum runtime
(Volcano has none).
"""

from __future__ import annotations

import heapq
from collections import defaultdict

from ._common import View, preemption, prio, priority_key, result


def water_fill(capacity: float, weights: dict[str, float], demand: dict[str, float]) -> dict[str, float]:
    deserved = dict.fromkeys(weights, 0.0)
    active = {d for d in weights if demand.get(d, 0) > 0 and weights[d] > 0}
    remaining = float(capacity)
    while active and remaining > 1e-9:
        wsum = sum(weights[d] for d in active)
        capped = set()
        give = {d: remaining * weights[d] / wsum for d in active}
        for d in sorted(active):
            if deserved[d] + give[d] >= demand[d]:
                capped.add(d)
        if not capped:
            for d in active:
                deserved[d] += give[d]
            break
        for d in capped:
            remaining -= demand[d] - deserved[d]
            deserved[d] = float(demand[d])
        active -= capped
    return deserved


class VolcanoDRF:
    name = "volcano-drf"
    time_dependent = False  # decides the same between events: no periodic cycles

    def __call__(self, snap):
        v = View(snap)
        flavors = sorted(v.flavor_cap)
        weights: dict[str, dict[str, float]] = defaultdict(dict)
        for q in snap.quotas:
            weights[q.flavor][q.department] = float(max(q.nominal, 0))
        demand: dict[tuple[str, str], float] = defaultdict(float)
        for rj in snap.running:
            demand[(rj.department, rj.flavor)] += rj.total_gpus
        by_queue: dict[tuple[str, str], list] = defaultdict(list)
        for j in snap.pending:
            demand[(j.department, j.flavor)] += j.total_gpus
            by_queue[(j.department, j.flavor)].append(j)
        adm, pre = [], []
        taken: set[int] = set()
        for fl in flavors:
            w = weights.get(fl) or {}
            for d in {k[0] for k in by_queue if k[1] == fl}:
                w.setdefault(d, 0.0)
            if not any(w.values()):
                w = dict.fromkeys(w, 1.0)
            des = water_fill(v.flavor_cap[fl], w, {d: demand[(d, fl)] for d in w})
            alloc = {d: float(v.used[(d, fl)]) for d in w}
            heap = []
            queues = {}
            for d in w:
                jobs = sorted(by_queue.get((d, fl), ()), key=priority_key)
                if jobs and des[d] > 0:
                    queues[d] = jobs
                    heapq.heappush(heap, (alloc[d] / des[d], d, 0))
            smallest = min((j.total_gpus for k, js in queues.items() for j in js), default=0)
            while heap:
                if v.flavor_free.get(fl, 0) < smallest and not any(alloc[x] > des[x] + 1e-9 for x in w):
                    break  # nothing fits and nothing can be reclaimed
                _, d, i = heapq.heappop(heap)
                jobs = queues[d]
                if i >= len(jobs) or alloc[d] >= des[d] - 1e-9:
                    continue
                job = jobs[i]
                pl = v.place(fl, job.pods, job.gpus_per_pod)
                if pl is not None:
                    adm.append(v.admission(job, pl))
                    alloc[d] += job.total_gpus
                elif v.soon_free[fl] >= job.total_gpus:
                    v.soon_free[fl] -= job.total_gpus
                    alloc[d] += job.total_gpus
                elif alloc[d] + job.total_gpus <= des[d] + 1e-9:
                    # reclaim only what keeps the victim queue at or above its deserved share
                    spare = {x: alloc[x] - des[x] for x in w if alloc[x] > des[x] + 1e-9 and x != d}
                    cands = [
                        rj for rj in snap.running
                        if rj.preemptible and rj.id not in taken and rj.flavor == fl
                        and rj.total_gpus <= spare.get(rj.department, 0) + 1e-9
                    ]
                    cands.sort(key=lambda rj: (-spare[rj.department], prio(rj), -rj.started_at, -rj.id))
                    victims = v.victims_for(job, cands) if cands else None
                    if victims:
                        lose = defaultdict(float)
                        for x in victims:
                            lose[x.department] += x.total_gpus
                        if all(lose[x] <= spare[x] + 1e-9 for x in lose):
                            taken.update(x.id for x in victims)
                            for x in victims:
                                alloc[x.department] -= x.total_gpus
                            pre.append(preemption(job, victims, "reclaim"))
                            alloc[d] += job.total_gpus
                heapq.heappush(heap, (alloc[d] / des[d], d, i + 1))
        return result(adm, pre)
