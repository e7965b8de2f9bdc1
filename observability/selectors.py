"""Read side: a job's GPU use and hints (page and API), an owner's recommendation, the prediction errors."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.utils import timezone

from observability.models import AttemptUsage, PredictionOutcome, UsageHistory
from observability.services import efficiency, idle
from observability.services import hints as hint_rules
from observability.services.rightsizing import (
    HEADROOM,
    Recommendation,
    fraction_advice,
    fraction_fit,
    key_tuple,
    keys_for,
    recommendation_from,
)
from portal.tenancy import ADMIN, VIEW
from scheduling.models import Job, JobEvent, PreemptionVictim

# The tier a recommendation is priced at when the caller names none: a job's default tier.
DEFAULT_TIER = Job._meta.get_field("tier").default


@dataclass
class JobObservability:
    attempts: list  # AttemptUsage, oldest first
    current: AttemptUsage | None  # the job's current attempt, when measured
    hints: list
    idle_threshold_pct: float
    idle_minutes: float

    @property
    def shown(self) -> AttemptUsage | None:
        """The attempt the page shows: the current one, else the last one measured."""
        return self.current or (self.attempts[-1] if self.attempts else None)

    @property
    def has_data(self) -> bool:
        return any(u.samples for u in self.attempts)


def job_observability(*, user, job) -> JobObservability:
    """``job`` was read through the tenancy gate; its usage rows are read through it too."""
    attempts = list(AttemptUsage.objects.restrict(user, VIEW).filter(job=job).order_by("attempt"))
    events = list(JobEvent.objects.restrict(user, VIEW).filter(job=job).order_by("at", "id"))
    victims = list(PreemptionVictim.objects.filter(job=job).order_by("attempt"))
    facts = hint_rules.Facts(job=job, events=events, usages=attempts, victims=victims)
    current = next((u for u in attempts if u.attempt == job.attempt), None)
    return JobObservability(attempts=attempts, current=current, hints=hint_rules.hints(facts),
                            idle_threshold_pct=idle.threshold_pct(job.tier), idle_minutes=idle.minutes(job.tier))


def recommendation_for(*, user, name: str = "", image: str = "") -> Recommendation | None:
    """The caller's own history for this job name's family, else for this image."""
    keys = keys_for(name=name, image=image)
    found = {h.key: h for h in UsageHistory.objects.restrict(user, VIEW).filter(owner=user, key__in=keys,
                                                                                  runs__gt=0)}
    for key in keys:
        if key in found:
            return recommendation_from(found[key])
    return None


class RightSizing:
    """Scheduling's ``ports.Sizing``: the recommendation the quote shows, and the predicted run times its
    start estimates use (registered in ``ObservabilityConfig.ready``)."""

    def recommendation(self, *, user, name: str, image: str, flavor=None, tier: str = "") -> dict | None:
        rec = recommendation_for(user=user, name=name, image=image)
        if rec is None:
            return None
        return {"key": rec.key, "runs": rec.runs, "busy_gpus": rec.busy_gpus, "gpus": rec.gpus,
                "memory_gib": rec.memory_gib, "max_runtime_s": rec.max_runtime_s, "text": rec.text,
                "fraction": recommended_fraction(rec, flavor=flavor, tier=tier)}

    def predicted_runtimes(self, jobs) -> dict[int, float]:
        """{job id: its owner's smoothed run time of similar jobs x 1.2} for (job id, owner id, name, image),
        the family's history before the image's (as the recommendation); jobs without a run time are left
        out. One query."""
        wanted = [(pk, owner, key_tuple(name, image)) for pk, owner, name, image in jobs]
        if not wanted:
            return {}
        rows = UsageHistory.objects.filter(owner_id__in={owner for _, owner, _ in wanted},
                                           key__in={k for _, _, keys in wanted for k in keys},
                                           runtime_s__isnull=False).values_list("owner_id", "key", "runtime_s")
        found = {(owner, key): runtime for owner, key, runtime in rows}
        out = {}
        for pk, owner, keys in wanted:
            runtime = next((found[(owner, k)] for k in keys if (owner, k) in found), None)
            if runtime is not None:
                out[pk] = runtime * HEADROOM
        return out


def recommended_fraction(rec: Recommendation, *, flavor, tier: str, what: str = "") -> dict | None:
    """``fraction_advice`` for an owner's history on ``flavor`` (None: no fraction fits, or no shareable flavor)."""
    fit = fraction_fit(peak_memory_mib=rec.peak_memory_mib, busy_gpus=rec.busy_gpus,
                       gpus_held=rec.gpus_requested, flavor=flavor)
    if fit is None:
        return None
    return fraction_advice(fit, flavor=flavor, tier=tier or DEFAULT_TIER,
                           whole_gpus=max(1, round(rec.gpus_requested or 1)), what=what or rec.label,
                           source=rec.memory_source or "dcgm")


def prediction_outcomes(*, user, limit: int = 200) -> list[PredictionOutcome]:
    return list(PredictionOutcome.objects.restrict(user, ADMIN).select_related("owner", "job")[:limit])


def efficiency_rows(*, user, group_by: str = "user", weeks: int = 8, department: str | None = None,
                    now: datetime | None = None) -> list[dict]:
    """The efficiency report (``services.efficiency``) of the last ``weeks`` ISO weeks, of the attempts ``user``
    may see: their department's members' (a platform admin's: every department's)."""
    now = now or timezone.now()
    monday = datetime.fromisoformat(efficiency.week_of(now)).replace(tzinfo=UTC)
    return efficiency.efficiency_report(usages=AttemptUsage.objects.restrict(user, VIEW), group_by=group_by,
                                        since=monday - timedelta(weeks=weeks - 1), department=department)


class MeasuredUse:
    """quotas' ``MeasuredUse`` port: (held, used) GPU-hours of measured attempts, as the efficiency report
    counts them (``efficiency.attempt_figures``). One query."""

    def held_and_used(self, attempts) -> dict[tuple[int, int], tuple[float, float]]:
        wanted = set(attempts)
        if not wanted:
            return {}
        out = {}
        for job_id, attempt, gpus, samples, step_s, busy, idle_min in AttemptUsage.objects.filter(
                job_id__in={j for j, _ in wanted}, samples__gt=0).order_by().values_list(
                "job_id", "attempt", "gpus", "samples", "step_s", "busy_gpus", "idle_minutes"):
            if (job_id, attempt) in wanted:
                f = efficiency.attempt_figures(gpus=gpus, samples=samples, step_s=step_s, busy_gpus=busy,
                                               idle_minutes=idle_min)
                out[(job_id, attempt)] = (f["held"], f["used"])
        return out
