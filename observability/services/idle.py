"""Idle-GPU detection: a running job whose GPUs all stay under a threshold for N minutes (both per tier) is
flagged on its timeline, on its page, API and metrics, and its owner is notified (``job.idle``, through the
notifications outbox in the same transaction); flagged again only after it worked in between. An optional per-tier policy stops a flagged job after
a further grace period, audited.
"""

from __future__ import annotations

import logging
from datetime import datetime

from django.conf import settings

from engine.types import TIERS
from notifications.services.outbox import emit
from observability.models import AttemptUsage
from portal import metrics
from portal.audit import audit
from scheduling.models import Job, JobState
from scheduling.services.jobs import job_stop, record_event

log = logging.getLogger(__name__)

FLAGGED = "portal_idle_jobs_flagged_total"
STOPPED = "portal_idle_jobs_stopped_total"
DEFAULT_THRESHOLD_PCT = 5.0
DEFAULT_MINUTES = 30.0


def per_tier(values: dict[str, float], tier: str, default: float | None) -> float | None:
    """A per-tier setting's value for ``tier``: its own, else the "*" value for every tier not named."""
    return values.get(tier, values.get("*", default))


def unknown_tiers(values: dict[str, float]) -> list[str]:
    return sorted(set(values) - set(TIERS) - {"*"})


def threshold_pct(tier: str) -> float:
    return per_tier(settings.IDLE_GPU_THRESHOLD_PCT, tier, DEFAULT_THRESHOLD_PCT)


def minutes(tier: str) -> float:
    return per_tier(settings.IDLE_GPU_MINUTES, tier, DEFAULT_MINUTES)


def stop_grace(tier: str) -> float | None:
    """Further idle minutes after the flag before the job is stopped; None: this tier's jobs are never stopped."""
    return per_tier(settings.IDLE_STOP_GRACE_MINUTES, tier, None)


def check(*, usage: AttemptUsage, job: Job, now: datetime) -> str:
    """Flag, clear or stop; returns what happened ("flagged", "cleared", "stopped" or "")."""
    limit, streak = minutes(job.tier), usage.idle_streak_minutes
    if usage.samples == 0:
        return ""
    if streak >= limit and usage.idle_flagged_at is None:
        if not AttemptUsage.objects.filter(pk=usage.pk, idle_flagged_at__isnull=True).update(idle_flagged_at=now):
            return ""
        usage.idle_flagged_at = now
        record_event(job=job, kind="idle", reason_code="gpu_idle",
                     message=f"all {usage.gpus} GPU(s) under {threshold_pct(job.tier):g}% for "
                             f"{streak:.0f} minutes: release them if the work is done",
                     data={"idle_minutes": streak, "threshold_pct": threshold_pct(job.tier)})
        emit(kind="job.idle", department_id=job.department_id, users=[job.owner_id],
             data={"job_id": job.pk, "job_name": job.name, "gpus": usage.gpus,
                   "threshold_pct": f"{threshold_pct(job.tier):g}", "idle_minutes": f"{streak:.0f}"},
             dedupe_key=f"job.idle:{job.pk}:{usage.pk}:{now.isoformat()}")
        metrics.add(FLAGGED, 1, tier=job.tier)
        return "flagged"
    if streak < limit and usage.idle_flagged_at is not None:
        AttemptUsage.objects.filter(pk=usage.pk).update(idle_flagged_at=None)
        usage.idle_flagged_at = None
        record_event(job=job, kind="idle", reason_code="gpu_busy_again", message="the GPUs are working again")
        return "cleared"
    grace = stop_grace(job.tier)
    if (grace is not None and usage.idle_flagged_at is not None and usage.idle_stopped_at is None
            and streak >= limit + grace and job.state == JobState.RUNNING):
        if not AttemptUsage.objects.filter(pk=usage.pk, idle_stopped_at__isnull=True).update(idle_stopped_at=now):
            return ""
        comment = (f"stopped by the idle-GPU policy of the {job.tier} tier: GPUs idle for {streak:.0f} minutes "
                   f"({limit:g} + {grace:g} minutes of grace)")
        job_stop(job=job, comment=comment)
        audit(actor=None, action="job.stop_idle", obj=job, department=job.department,
              old={"state": JobState.RUNNING}, new={"state": job.state}, comment=comment)
        metrics.add(STOPPED, 1, tier=job.tier)
        log.info("job %s stopped: %s", job.pk, comment)
        return "stopped"
    return ""
