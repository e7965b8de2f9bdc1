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
        v = View(snap)
        qs = {(q.department, q.flavor): q for q in snap.quotas}
        adm, pre = [], []
        taken: set[int] = set()
        # A victim search that found nothing fails again for any workload with the same shape and rights until
        # the cycle's state changes (an admission or a preemption): without this memo a cycle with thousands
        # of blocked workloads repeats the same O(running x nodes) search for each of them.
        failed: set[tuple] = set()
        depts_of = defaultdict(set)
        for d, fl in list(qs) + [(j.department, j.flavor) for j in snap.pending]:
            depts_of[fl].add(d)

        nom = {k: q.nominal for k, q in qs.items()}
        lend = {k: q.nominal if q.lending_limit is None else min(q.lending_limit, q.nominal) for k, q in qs.items()}
        guar = {k: nom[k] - lend[k] for k in qs}
        pool_left: dict[str, int] = {}  # flavor -> the cohort's unused lendable GPUs; dropped when usage changes

        def nominal(d, fl):
            return nom.get((d, fl), 0)

        def cohort_left(fl):
            left = pool_left.get(fl)
            if left is None:
                left = sum(lend.get((x, fl), 0) - max(0, v.used[(x, fl)] - guar.get((x, fl), 0))
                           for x in depts_of[fl])
                pool_left[fl] = left
            return left

        def fits_quota(d, fl, g):
            k = (d, fl)
            u = v.used[k]
            use = u + g
            q = qs.get(k)
            n = nom.get(k, 0)
            if use > n and (q is None or (q.borrowing_limit is not None and use - n > q.borrowing_limit)):
                return False
            gu = guar.get(k, 0)
            return cohort_left(fl) - (max(0, use - gu) - max(0, u - gu)) >= 0

        def changed():
            failed.clear()
            pool_left.clear()

        order = sorted(
            snap.pending,
            key=lambda j: (v.used[(j.department, j.flavor)] + j.total_gpus > nominal(j.department, j.flavor),)
            + priority_key(j),
        )
        for job in order:
            key = (job.department, job.flavor)
            d, fl = key
            borrowing = v.used[key] + job.total_gpus > nominal(d, fl)
            if fits_quota(d, fl, job.total_gpus):
                pl = v.place(fl, job.pods, job.gpus_per_pod)
                if pl is not None:
                    adm.append(v.admission(job, pl, borrowed=borrowing))
                    changed()
                    continue
                if v.soon_free[fl] >= job.total_gpus:
                    v.soon_free[fl] -= job.total_gpus
                    v.used[key] += job.total_gpus
                    changed()
                    continue
            # preemption (only for a workload that then fits its nominal quota): reclaim borrowed capacity of
            # others (any priority) and own lower-priority workloads
            if job.total_gpus > nominal(d, fl):
                continue
            within = v.used[key] + job.total_gpus <= nominal(d, fl)
            p = prio(job)
            shape = (d, fl, p, within, job.pods, job.gpus_per_pod)
            if shape in failed:
                continue
            cands = []
            for rj in snap.running:
                if not rj.preemptible or rj.id in taken or rj.flavor != fl:
                    continue
                other_borrowing = rj.department != d and v.used[(rj.department, fl)] > nominal(rj.department, fl)
                if (within and other_borrowing) or (rj.department == d and prio(rj) < p):
                    cands.append(rj)
            if not cands or sum(x.total_gpus for x in cands) + v.flavor_free[fl] < job.total_gpus:
                failed.add(shape)
                continue
            cands.sort(key=lambda rj: (rj.department == d, prio(rj), -rj.started_at, -rj.id))
            victims = v.victims_for(job, cands)
            own = sum(x.total_gpus for x in victims or () if x.department == d)
            if victims and v.used[key] - own + job.total_gpus <= nominal(d, fl):  # preempt only to fit within nominal
                taken.update(x.id for x in victims)
                for x in victims:
                    v.used[(x.department, fl)] -= x.total_gpus
                v.used[key] += job.total_gpus
                pre.append(preemption(job, victims, "reclaim" if within else "priority"))
                changed()
            else:
                failed.add(shape)
        return result(adm, pre)
