"""Read side: a job's GPU use and hints (page and API), an owner's recommendation, the prediction errors."""

from __future__ import annotations

from dataclasses import dataclass

from observability.models import AttemptUsage, PredictionOutcome, UsageHistory
from observability.services import hints as hint_rules
from observability.services import idle
from observability.services.rightsizing import Recommendation, keys_for, recommendation_from
from portal.tenancy import ADMIN, VIEW
from scheduling.models import JobEvent, PreemptionVictim


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


def prediction_outcomes(*, user, limit: int = 200) -> list[PredictionOutcome]:
    return list(PredictionOutcome.objects.restrict(user, ADMIN).select_related("owner", "job")[:limit])
