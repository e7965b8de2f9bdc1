"""Namespace ResourceQuota refusals of an admitted attempt's pods: the start's back-off chain (one per
attempt), and the refusal as the engine's constraint until the quota changes."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from scheduling.models import Cluster, Job, NamespaceQuotaRefusal
from scheduling.services.jobs import namespace_for

log = logging.getLogger(__name__)

# A namespace quota refusal: the start's back-off (2 s, 4 s, ... capped) and how long it keeps jobs of that size
# off the cluster when no change of the quota is seen (a bound, in case the change is never observed).
QUOTA_BACKOFF_S = (2, 300)

QUOTA_REFUSAL_TTL = timedelta(minutes=30)

# Backends that create pods at admission: an admitted job still without all its pods this long after its
# admission has its start asked for again (the task was lost or is backing off) ...
ADMIT_RETRY = timedelta(seconds=30)


def _quota_chain_pending(job: Job, now: datetime) -> bool:
    """The attempt's quota retry chain has a try due soon (its message is on its way): starting another would
    double the refused creates. A chain whose next try is long overdue (its message was lost) is not pending."""
    return NamespaceQuotaRefusal.objects.filter(job=job, attempt=job.attempt, cleared_at__isnull=True,
                                                next_retry_at__gt=now - ADMIT_RETRY).exists()


def quota_backing_off(*, job: Job, now: datetime) -> bool:
    """The attempt's start was refused by a namespace quota and its next try is not due yet."""
    return NamespaceQuotaRefusal.objects.filter(job=job, attempt=job.attempt, cleared_at__isnull=True,
                                                next_retry_at__gt=now).exists()


def quota_refused(*, job: Job, cluster: Cluster, exc, now: datetime) -> float:
    """Record a namespace quota refusal of the attempt's pods (one row per attempt, its back-off step moved on)
    and return the seconds until the chain's next try. The row also tells the engine to keep jobs of this size
    of the department off that cluster until the quota changes."""
    low, high = QUOTA_BACKOFF_S
    with transaction.atomic():
        row = NamespaceQuotaRefusal.objects.select_for_update().filter(job=job, attempt=job.attempt).first()
        step = 1 if row is None else row.step + 1
        delay = float(min(high, low * 2 ** (step - 1)))
        values = {"cluster": cluster, "namespace": getattr(exc, "namespace", "") or namespace_for(
            job.department.slug, cluster), "total_gpus": job.total_gpus,
            "request": {"pods": job.pods, "gpus_per_pod": job.gpus_per_pod, "cpu_millicores": job.cpu_millicores,
                        "memory_mib": job.memory_mib, "resource": job.flavor.resource_name},
            "quota_version": getattr(exc, "quota_version", "")[:500], "quotas": getattr(exc, "quotas", {}),
            "message": str(exc)[:2000], "refused_at": now, "step": step,
            "next_retry_at": now + timedelta(seconds=delay), "expires_at": now + QUOTA_REFUSAL_TTL,
            "cleared_at": None}
        if row is None:
            NamespaceQuotaRefusal.objects.create(job=job, attempt=job.attempt, **values)
        else:
            NamespaceQuotaRefusal.objects.filter(pk=row.pk).update(**values)
    return delay


def quota_admitted(*, job: Job) -> None:
    """The attempt's pods were let in after all: its refusal no longer holds."""
    NamespaceQuotaRefusal.objects.filter(job=job, attempt=job.attempt, cleared_at__isnull=True).update(
        cleared_at=timezone.now())


def recheck_quota_refusals(*, cluster: Cluster, backend) -> int:
    """Re-read the ResourceQuotas of the namespaces with a refusal in force on ``cluster`` (one list each) and
    clear the refusals whose quotas changed since (a raised ceiling, or room freed): their jobs may be admitted
    there again. Returns how many were cleared."""
    now = timezone.now()
    rows = list(NamespaceQuotaRefusal.objects.filter(cluster=cluster, cleared_at__isnull=True, expires_at__gt=now))
    cleared = 0
    for namespace in sorted({r.namespace for r in rows}):
        try:
            version = backend.namespace_quota_version(namespace)
        except Exception as exc:  # noqa: BLE001 - one namespace's read must not stop the sync
            log.warning("cluster %s: quotas of %s not re-read (%s)", cluster.name, namespace, exc)
            continue
        stale = [r.pk for r in rows if r.namespace == namespace and r.quota_version != version]
        if stale:
            cleared += NamespaceQuotaRefusal.objects.filter(pk__in=stale).update(cleared_at=now)
    return cleared
