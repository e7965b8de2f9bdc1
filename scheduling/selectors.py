"""Read-side queries of jobs (always through Job.objects.for_user for anything a user asks for)."""

from __future__ import annotations

from django.db.models import Q, QuerySet

from scheduling.core.types import TIER_RANK
from scheduling.models import Job, JobState


def queue_position(*, job: Job) -> int | None:
    """1 + the number of queued jobs of the same flavor ahead of this one by tier, then submission.

    An approximation of the engine's order (which also weighs urgency, aging, deadline, bids and fair share),
    shown with that caveat; None unless the job is queued."""
    if job.state != JobState.QUEUED:
        return None
    better_tiers = [t for t, r in TIER_RANK.items() if r < TIER_RANK.get(job.tier, 9)]
    ahead = Job.objects.filter(state=JobState.QUEUED, flavor_id=job.flavor_id).filter(
        Q(tier__in=better_tiers)
        | Q(tier=job.tier, submitted_at__lt=job.submitted_at)
        | Q(tier=job.tier, submitted_at=job.submitted_at, id__lt=job.pk)
    )
    return ahead.count() + 1


def jobs_for(user, params) -> QuerySet[Job]:
    qs = Job.objects.for_user(user).select_related("owner", "department", "flavor", "cluster")
    if state := params.get("state"):
        qs = qs.filter(state__in=state.split(","))
    if tier := params.get("tier"):
        qs = qs.filter(tier__in=tier.split(","))
    if flavor := params.get("flavor"):
        qs = qs.filter(flavor__name=flavor)
    if params.get("mine") in ("1", "true", "yes"):
        qs = qs.filter(owner=user)
    if dept := params.get("department"):
        qs = qs.filter(department__slug=dept)
    if q := params.get("q"):
        qs = qs.filter(name__icontains=q)
    return qs.order_by("-submitted_at", "-id")
