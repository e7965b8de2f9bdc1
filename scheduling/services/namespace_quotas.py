"""Namespace ResourceQuota refusals of an admitted attempt's pods: the start's back-off chain (one per
attempt), and the refusal as the engine's constraint until the quota changes."""

from __future__ import annotations

import logging
from dataclasses import dataclass
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


def quota_chain_pending(job: Job, now: datetime) -> bool:
    """The attempt's quota retry chain has a try due soon (its message is on its way): starting another would
    double the refused creates. A chain whose next try is long overdue (its message was lost) is not pending."""
    return NamespaceQuotaRefusal.objects.filter(job=job, attempt=job.attempt, cleared_at__isnull=True,
                                                next_retry_at__gt=now - ADMIT_RETRY).exists()


# How long a claimed try keeps others off: longer than one start takes (the API client's timeouts and retries).
QUOTA_TRY_CLAIM = timedelta(seconds=60)


@dataclass(frozen=True)
class QuotaTry:
    """The right to make an attempt's next start: ``refusal`` None when no quota refusal is in force; else that
    refusal's step, claimed from ``due`` until ``until``."""

    refusal: int | None = None
    due: datetime | None = None
    until: datetime | None = None


def quota_try(*, job: Job, now: datetime) -> QuotaTry | None:
    """The attempt's next start try, or None when a namespace quota refused it and that try is not due, or another
    worker took the due try first. Taking it is a compare-and-set on ``next_retry_at`` (no lock held across the
    API call): of a duplicate task and a reconciler's message that find the same step due, one creates and the
    other backs off, so each back-off step costs one create."""
    row = (NamespaceQuotaRefusal.objects.filter(job=job, attempt=job.attempt, cleared_at__isnull=True)
           .values_list("pk", "next_retry_at").first())
    if row is None:
        return QuotaTry()
    pk, due = row
    if due > now:
        return None
    until = now + QUOTA_TRY_CLAIM
    if not NamespaceQuotaRefusal.objects.filter(pk=pk, next_retry_at=due).update(next_retry_at=until):
        return None
    return QuotaTry(refusal=pk, due=due, until=until)


def quota_try_unanswered(*, claim: QuotaTry) -> None:
    """The claimed try got no answer from the quota (the API server was unreachable): its step is due again at
    once, for the task's own retry, instead of after the claim runs out."""
    if claim.refusal is not None:
        NamespaceQuotaRefusal.objects.filter(pk=claim.refusal, next_retry_at=claim.until).update(
            next_retry_at=claim.due)


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
