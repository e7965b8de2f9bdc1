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
    time_dependent = False  # needs periodic cycles even without events

    def __call__(self, snap):
        v = View(snap)
        qs = {(q.department, q.flavor): q for q in snap.quotas}
        adm, pre = [], []
        taken: set[int] = set()
        depts_of = defaultdict(set)
        for d, fl in list(qs) + [(j.department, j.flavor) for j in snap.pending]:
            depts_of[fl].add(d)

        def nominal(d, fl):
            q = qs.get((d, fl))
            return q.nominal if q else 0

        def lendable(d, fl):
            q = qs.get((d, fl))
            if q is None:
                return 0
            return q.nominal if q.lending_limit is None else min(q.lending_limit, q.nominal)

        def fits_quota(d, fl, g):
            use = v.used[(d, fl)] + g
            q = qs.get((d, fl))
            nom = nominal(d, fl)
            if use > nom and q is not None and q.borrowing_limit is not None and use - nom > q.borrowing_limit:
                return False
            if use > nom and q is None:
                return False
            pool = 0
            for x in depts_of[fl]:
                lend = lendable(x, fl)
                guaranteed = nominal(x, fl) - lend
                ux = v.used[(x, fl)] + (g if x == d else 0)
                pool += lend - max(0, ux - guaranteed)
            return pool >= 0

        order = sorted(
            snap.pending,
            key=lambda j: (v.used[(j.department, j.flavor)] + j.gpus > nominal(j.department, j.flavor),)
            + priority_key(j),
        )
        for job in order:
            key = (job.department, job.flavor)
            d, fl = key
            borrowing = v.used[key] + job.gpus > nominal(d, fl)
            if fits_quota(d, fl, job.gpus):
                pl = v.place(fl, job.pods, job.gpus_per_pod)
                if pl is not None:
                    adm.append(v.admission(job, pl, borrowed=borrowing))
                    continue
                if v.soon_free[fl] >= job.gpus:
                    v.soon_free[fl] -= job.gpus
                    v.used[key] += job.gpus
                    continue
            # preemption (only for a workload that then fits its nominal quota): reclaim borrowed capacity of
            # others (any priority) and own lower-priority workloads
            if job.gpus > nominal(d, fl):
                continue
            within = v.used[key] + job.gpus <= nominal(d, fl)
            p = prio(job)
            cands = []
            for rj in snap.running:
                if not rj.preemptible or rj.id in taken or rj.flavor != fl:
                    continue
                other_borrowing = rj.department != d and v.used[(rj.department, fl)] > nominal(rj.department, fl)
                if (within and other_borrowing) or (rj.department == d and prio(rj) < p):
                    cands.append(rj)
            if not cands:
                continue
            cands.sort(key=lambda rj: (rj.department == d, prio(rj), -rj.started_at, -rj.id))
            victims = v.victims_for(job, cands)
            own = sum(x.gpus for x in victims or () if x.department == d)
            if victims and v.used[key] - own + job.gpus <= nominal(d, fl):  # preempt only to fit within nominal
                taken.update(x.id for x in victims)
                for x in victims:
                    v.used[(x.department, fl)] -= x.gpus
                v.used[key] += job.gpus
                pre.append(preemption(job, victims, "reclaim" if within else "priority"))
        return result(adm, pre)
