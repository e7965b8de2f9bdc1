"""FIFO + EASY backfill (Slurm-like, priority = age only, no quotas, no preemption).

Per flavor, jobs start in submission order while they fit. The first job that does not fit gets a reservation at
its shadow time (the earliest time enough GPUs on suitable nodes free up, with running jobs ending at their max
runtime); later jobs start now only if they fit and either end (by max runtime) before the shadow time or use
only the GPUs the head will not need at that time.
"""

from __future__ import annotations

from collections import defaultdict

from ._common import View, fifo_key, result


class EasyBackfill:
    name = "slurm-easy"
    time_dependent = False  # decides the same between events: no periodic cycles

    def __call__(self, snap):
        v = View(snap)
        now = snap.now
        adm = []
        by_flavor = defaultdict(list)
        for j in sorted(snap.pending, key=fifo_key):
            by_flavor[j.flavor].append(j)
        running_by_flavor = defaultdict(list)
        for rj in snap.running:
            running_by_flavor[rj.flavor].append(rj)
        for fl, jobs in by_flavor.items():
            shadow = None
            extra = 0
            for job in jobs:
                if v.flavor_free.get(fl, 0) < job.total_gpus and shadow is not None:
                    continue
                pl = v.place(fl, job.pods, job.gpus_per_pod)
                if shadow is None:
                    if pl is not None:
                        adm.append(v.admission(job, pl))
                        continue
                    shadow, extra = self._reserve(v, job, running_by_flavor[fl], now)
                    if shadow is None:  # can never fit: do not block the others
                        shadow, extra = float("inf"), 0
                    continue
                if pl is None:
                    continue
                if now + job.max_runtime_s <= shadow:
                    adm.append(v.admission(job, pl))
                elif job.total_gpus <= extra:
                    extra -= job.total_gpus
                    adm.append(v.admission(job, pl))
        return result(adm)

    @staticmethod
    def _reserve(v: View, job, running, now):
        freed: dict[str, int] = defaultdict(int)
        for rj in sorted(running, key=lambda r: (r.expected_end, r.id)):
            for name in rj.placement:
                if name in v.free:
                    freed[name] += rj.gpus_per_pod
            if v.place(job.flavor, job.pods, job.gpus_per_pod, freed) is not None:
                total = v.flavor_free.get(job.flavor, 0) + sum(freed.values())
                return max(rj.expected_end, now), total - job.total_gpus
        return None, 0
