"""The stored time series the dashboard's charts read: one ``ClusterSample`` per flavor and one
``DepartmentSample`` per department and flavor, every STATS_INTERVAL_S, written by a periodic task.

A sample costs a fixed number of queries whatever the history (nodes, quotas, active jobs, queued jobs,
jobs started since the previous sample, preemptions since then), so charts never recompute history from
every job on a page view. Samples older than STATS_RETENTION_DAYS are deleted by the same task.
"""

from __future__ import annotations

from bisect import bisect_left
from collections import defaultdict
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import Count, Max
from django.utils import timezone

from engine.types import TIERS
from quotas import selectors as quota_selectors
from scheduling.models import (
    ACTIVE_STATES,
    TOTAL_GPUS,
    WAIT_BINS_S,
    ClusterSample,
    DepartmentSample,
    Job,
    JobState,
    Node,
    PreemptionVictim,
)
from scheduling.selectors import lent_shares


def bucket(now: datetime, interval_s: float) -> datetime:
    """``now`` rounded down to the sampling interval (so two runs in one interval write one sample)."""
    step = max(1, int(interval_s))
    return datetime.fromtimestamp(int(now.timestamp()) // step * step, tz=now.tzinfo)


def wait_bin(seconds: float) -> int:
    return bisect_left(WAIT_BINS_S, seconds)


def record_sample(*, now: datetime | None = None) -> datetime:
    """Write the samples of the interval ``now`` falls in (idempotent: rewrites that interval's rows). Starts and
    preemptions are counted from the previous sample on."""
    interval = float(settings.STATS_INTERVAL_S)
    at = bucket(now or timezone.now(), interval)
    # Starts and preemptions since the previous sample (not one interval back: a late or skipped beat must
    # neither lose them nor count them twice), at most a day back.
    previous = ClusterSample.objects.filter(at__lt=at).aggregate(m=Max("at"))["m"]
    since = max(previous, at - timedelta(days=1)) if previous else at - timedelta(seconds=interval)

    nodes = list(Node.objects.values_list("name", "flavor_id", "gpus", "used_by_others", "schedulable"))
    active = list(Job.objects.filter(state__in=ACTIVE_STATES).values_list(
        "department_id", "flavor_id", "gpus_per_pod", TOTAL_GPUS, "placement"))
    used_on: dict[str, int] = defaultdict(int)
    busy: dict[tuple[int, int], int] = defaultdict(int)
    for dept, flavor, gpus_per_pod, total_gpus, placement in active:
        busy[(dept, flavor)] += total_gpus
        for node in placement or ():
            used_on[node] += gpus_per_pod
    total: dict[int, int] = defaultdict(int)
    free: dict[int, int] = defaultdict(int)
    for name, flavor, gpus, others, schedulable in nodes:
        total[flavor] += gpus
        if schedulable:
            free[flavor] += max(0, gpus - others - used_on.get(name, 0))

    queued: dict[int, dict[str, int]] = defaultdict(lambda: dict.fromkeys(TIERS, 0))
    queued_by_dept: dict[tuple[int, int], int] = defaultdict(int)
    for dept, flavor, tier, n in (Job.objects.filter(state=JobState.QUEUED)
                                  .values_list("department_id", "flavor_id", "tier").annotate(n=Count("id"))
                                  .order_by()):
        queued[flavor][tier] = queued[flavor].get(tier, 0) + n
        queued_by_dept[(dept, flavor)] += n

    waits: dict[int, dict[str, list[int]]] = defaultdict(lambda: {t: [0] * (len(WAIT_BINS_S) + 1) for t in TIERS})
    for flavor, tier, queued_at, submitted_at, started_at in Job.objects.filter(
            started_at__gt=since, started_at__lte=at).values_list("flavor_id", "tier", "queued_at",
                                                                  "submitted_at", "started_at"):
        start = queued_at or submitted_at
        hist = waits[flavor].setdefault(tier, [0] * (len(WAIT_BINS_S) + 1))
        hist[wait_bin(max(0.0, (started_at - start).total_seconds()))] += 1

    preempted: dict[int, int] = defaultdict(int)
    for flavor, n in (PreemptionVictim.objects.filter(preemption__decided_at__gt=since,
                                                      preemption__decided_at__lte=at)
                      .values_list("job__flavor_id").annotate(n=Count("id")).order_by()):
        preempted[flavor] += n

    quotas = quota_selectors.nominal_by_flavor()
    keys = set(quotas) | set(busy) | set(queued_by_dept)
    borrowed = {k: max(0, busy.get(k, 0) - quotas.get(k, 0)) for k in keys}
    lent = lent_shares(keys, quotas, busy, borrowed)
    flavors = set(total) | set(queued) | {f for _, f in keys}

    with transaction.atomic():
        ClusterSample.objects.filter(at=at).delete()
        DepartmentSample.objects.filter(at=at).delete()
        ClusterSample.objects.bulk_create([
            ClusterSample(at=at, flavor_id=f, total_gpus=total.get(f, 0),
                          busy_gpus=sum(v for (_, fl), v in busy.items() if fl == f), free_gpus=free.get(f, 0),
                          queued=dict(queued[f]) if f in queued else dict.fromkeys(TIERS, 0),
                          waits=dict(waits[f]) if f in waits else {}, preemptions=preempted.get(f, 0))
            for f in sorted(flavors)
        ])
        DepartmentSample.objects.bulk_create([
            DepartmentSample(at=at, department_id=d, flavor_id=f, nominal=quotas.get((d, f), 0),
                             busy_gpus=busy.get((d, f), 0), borrowed_gpus=borrowed[(d, f)],
                             lent_gpus=lent.get((d, f), 0), queued_jobs=queued_by_dept.get((d, f), 0))
            for d, f in sorted(keys)
        ])
    return at


def cleanup_samples(*, now: datetime | None = None) -> int:
    horizon = (now or timezone.now()) - timedelta(days=settings.STATS_RETENTION_DAYS)
    a, _ = ClusterSample.objects.filter(at__lt=horizon).delete()
    b, _ = DepartmentSample.objects.filter(at__lt=horizon).delete()
    return a + b
