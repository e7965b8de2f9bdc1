"""Cohort borrowing + priority preemption (Kueue-like).

One ClusterQueue per department with nominal quota, borrowing limit and lending limit per flavor, all in one
cohort; BestEffortFIFO queues. Workloads are tried in Kueue's entry order: not borrowing (at the start of the
cycle) first, then priority, then creation time (one pass stands for Kueue's back-to-back cycles over heads). A
workload is admitted if it fits its quota (nominal, or borrowing the cohort's unused lendable quota within its
borrowing limit) and a node set; otherwise it may preempt (``reclaimWithinCohort: Any`` for work within its
nominal quota, ``withinClusterQueue: LowerPriority``), then is skipped. No minimum runtime.
"""

from __future__ import annotations

from collections import defaultdict

from ._common import View, preemption, prio, priority_key, result


class Kueue:
    name = "kueue"
    time_dependent = False  # decides the same between events: no periodic cycles

    def __call__(self, snap):
        cycle = _Cycle(snap)
        for job in cycle.order():
            if cycle.admit(job):
                continue
            # preemption (only for a workload that then fits its nominal quota): reclaim borrowed capacity of
            # others (any priority) and own lower-priority workloads
            if job.total_gpus <= cycle.nominal(job.department, job.flavor):
                cycle.preempt_for(job)
        return result(cycle.adm, cycle.pre)


class _Cycle:
    """One cycle's quota arithmetic over a mutable view of the snapshot: the cohort's lendable pool, the
    admissions and preemptions so far."""

    def __init__(self, snap):
        self.snap = snap
        self.v = View(snap)
        qs = {(q.department, q.flavor): q for q in snap.quotas}
        self.qs = qs
        self.adm, self.pre = [], []
        self.taken: set[int] = set()
        # A victim search that found nothing fails again for any workload with the same shape and rights until
        # the cycle's state changes (an admission or a preemption): without this memo a cycle with thousands
        # of blocked workloads repeats the same O(running x nodes) search for each of them.
        self.failed: set[tuple] = set()
        self.depts_of = defaultdict(set)
        for d, fl in list(qs) + [(j.department, j.flavor) for j in snap.pending]:
            self.depts_of[fl].add(d)
        self.nom = {k: q.nominal for k, q in qs.items()}
        self.lend = {k: q.nominal if q.lending_limit is None else min(q.lending_limit, q.nominal)
                     for k, q in qs.items()}
        self.guar = {k: self.nom[k] - self.lend[k] for k in qs}
        self.pool_left: dict[str, int] = {}  # flavor -> the cohort's unused lendable GPUs; dropped when usage changes

    def nominal(self, d, fl):
        return self.nom.get((d, fl), 0)

    def cohort_left(self, fl):
        left = self.pool_left.get(fl)
        if left is None:
            used = self.v.used
            left = sum(self.lend.get((x, fl), 0) - max(0, used[(x, fl)] - self.guar.get((x, fl), 0))
                       for x in self.depts_of[fl])
            self.pool_left[fl] = left
        return left

    def fits_quota(self, d, fl, g):
        k = (d, fl)
        u = self.v.used[k]
        use = u + g
        q = self.qs.get(k)
        n = self.nom.get(k, 0)
        if use > n and (q is None or (q.borrowing_limit is not None and use - n > q.borrowing_limit)):
            return False
        gu = self.guar.get(k, 0)
        return self.cohort_left(fl) - (max(0, use - gu) - max(0, u - gu)) >= 0

    def changed(self):
        self.failed.clear()
        self.pool_left.clear()

    def order(self):
        """Kueue's entry order: not borrowing first, then priority and creation time."""
        used = self.v.used
        return sorted(
            self.snap.pending,
            key=lambda j: (used[(j.department, j.flavor)] + j.total_gpus > self.nominal(j.department, j.flavor),)
            + priority_key(j),
        )

    def admit(self, job) -> bool:
        """Admit the job if it fits its quota and a node set (or GPUs being freed, which it then waits for)."""
        v = self.v
        key = (job.department, job.flavor)
        d, fl = key
        borrowing = v.used[key] + job.total_gpus > self.nominal(d, fl)
        if not self.fits_quota(d, fl, job.total_gpus):
            return False
        pl = v.place(fl, job.pods, job.gpus_per_pod)
        if pl is not None:
            self.adm.append(v.admission(job, pl, borrowed=borrowing))
            self.changed()
            return True
        if v.soon_free[fl] >= job.total_gpus:
            v.soon_free[fl] -= job.total_gpus
            v.used[key] += job.total_gpus
            self.changed()
            return True
        return False

    def candidates(self, job, within: bool, p: int) -> list:
        """Running workloads the job may preempt: others' borrowed capacity (for work within its nominal
        quota) and its own department's lower-priority workloads."""
        v, d, fl = self.v, job.department, job.flavor
        cands = []
        for rj in self.snap.running:
            if not rj.preemptible or rj.id in self.taken or rj.flavor != fl:
                continue
            other_borrowing = rj.department != d and v.used[(rj.department, fl)] > self.nominal(rj.department, fl)
            if (within and other_borrowing) or (rj.department == d and prio(rj) < p):
                cands.append(rj)
        return cands

    def preempt_for(self, job) -> None:
        v = self.v
        key = (job.department, job.flavor)
        d, fl = key
        within = v.used[key] + job.total_gpus <= self.nominal(d, fl)
        p = prio(job)
        shape = (d, fl, p, within, job.pods, job.gpus_per_pod)
        if shape in self.failed:
            return
        cands = self.candidates(job, within, p)
        if not cands or sum(x.total_gpus for x in cands) + v.flavor_free[fl] < job.total_gpus:
            self.failed.add(shape)
            return
        cands.sort(key=lambda rj: (rj.department == d, prio(rj), -rj.started_at, -rj.id))
        victims = v.victims_for(job, cands)
        own = sum(x.total_gpus for x in victims or () if x.department == d)
        if victims and v.used[key] - own + job.total_gpus <= self.nominal(d, fl):  # preempt only to fit within nominal
            self.taken.update(x.id for x in victims)
            for x in victims:
                v.used[(x.department, fl)] -= x.total_gpus
            v.used[key] += job.total_gpus
            self.pre.append(preemption(job, victims, "reclaim" if within else "priority"))
            self.changed()
        else:
            self.failed.add(shape)
