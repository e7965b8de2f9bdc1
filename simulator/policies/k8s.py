"""Kubernetes-native baselines.

- ``FCFS``: the default kube-scheduler without PriorityClasses or quotas: pods tried in arrival order, each placed
  if it fits (no head-of-line blocking, no preemption). Multi-pod jobs are placed all-or-nothing here (the default
  scheduler has no gang scheduling; this is kinder to it than reality).
- ``StrictFCFS``: head-of-line FCFS per flavor: jobs start in arrival order and nothing starts ahead of a
  blocked head (a job that does not fit stops its flavor's queue until it does), no quotas, no preemption.
- ``QuotaPriority``: a ResourceQuota per department equal to its nominal quota (hard cap, no borrowing) and the
  tiers' PriorityClasses with preemption: a pod that fits its quota but no node preempts strictly lower-priority
  pods (any department, latest started first), with no minimum runtime (the native scheduler has none).
"""

from __future__ import annotations

from ._common import View, fifo_key, preemption, prio, priority_key, result


class FCFS:
    name = "fcfs"
    time_dependent = False  # decides the same between events: no periodic cycles

    def __call__(self, snap):
        v = View(snap)
        adm = []
        for job in sorted(snap.pending, key=fifo_key):
            if v.flavor_free.get(job.flavor, 0) < job.total_gpus:
                continue
            pl = v.place(job.flavor, job.pods, job.gpus_per_pod)
            if pl is not None:
                adm.append(v.admission(job, pl))
        return result(adm)


class StrictFCFS:
    name = "fcfs-strict"
    time_dependent = False

    def __call__(self, snap):
        v = View(snap)
        adm = []
        blocked: set[str] = set()  # flavors whose head does not fit
        for job in sorted(snap.pending, key=fifo_key):
            if job.flavor in blocked:
                continue
            pl = v.place(job.flavor, job.pods, job.gpus_per_pod) if v.flavor_free.get(job.flavor, 0) >= job.total_gpus \
                else None
            if pl is None:
                blocked.add(job.flavor)
                continue
            adm.append(v.admission(job, pl))
        return result(adm)


class QuotaPriority:
    name = "k8s-quota-priority"
    time_dependent = False  # decides the same between events: no periodic cycles

    def __call__(self, snap):
        v = View(snap)
        nominal = {(q.department, q.flavor): q.nominal for q in snap.quotas}
        adm, pre = [], []
        taken: set[int] = set()
        for job in sorted(snap.pending, key=priority_key):
            key = (job.department, job.flavor)
            if v.used[key] + job.total_gpus > nominal.get(key, 0):
                continue
            pl = v.place(job.flavor, job.pods, job.gpus_per_pod)
            if pl is not None:
                adm.append(v.admission(job, pl))
                continue
            if v.soon_free[job.flavor] >= job.total_gpus:  # evictions already under way will make room
                v.soon_free[job.flavor] -= job.total_gpus
                v.used[key] += job.total_gpus
                continue
            p = prio(job)
            cands = [
                rj for rj in snap.running
                if rj.preemptible and rj.id not in taken and prio(rj) < p and rj.flavor == job.flavor
            ]
            cands.sort(key=lambda rj: (prio(rj), -rj.started_at, -rj.id))
            victims = v.victims_for(job, cands)
            if victims:
                taken.update(x.id for x in victims)
                pre.append(preemption(job, victims))
                v.used[key] += job.total_gpus  # the quota is held for the preemptor
        return result(adm, pre)
