"""Read side: a job's GPU use and hints (page and API), an owner's recommendation, the prediction errors."""

from __future__ import annotations

from dataclasses import dataclass

from observability.models import AttemptUsage, PredictionOutcome, UsageHistory
from observability.services import hints as hint_rules
from observability.services import idle
from observability.services.rightsizing import (
    HEADROOM,
    Recommendation,
    key_tuple,
    keys_for,
    recommendation_from,
)
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


class RightSizing:
    """Scheduling's ``ports.Sizing``: the recommendation the quote shows, and the predicted run times its
    start estimates use (registered in ``ObservabilityConfig.ready``)."""

    def recommendation(self, *, user, name: str, image: str) -> dict | None:
        rec = recommendation_for(user=user, name=name, image=image)
        if rec is None:
            return None
        return {"key": rec.key, "runs": rec.runs, "busy_gpus": rec.busy_gpus, "gpus": rec.gpus,
                "memory_gib": rec.memory_gib, "max_runtime_s": rec.max_runtime_s, "text": rec.text}

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


def prediction_outcomes(*, user, limit: int = 200) -> list[PredictionOutcome]:
    return list(PredictionOutcome.objects.restrict(user, ADMIN).select_related("owner", "job")[:limit])
