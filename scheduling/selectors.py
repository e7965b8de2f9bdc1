"""Read-side queries of scheduling: jobs (always through ``Job.objects.restrict`` for anything a user asks
for), the approvals inbox, and the cluster's capacity."""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Q, QuerySet

from portal.tenancy import APPROVE, VIEW
from scheduling.core.types import TIER_RANK
from scheduling.models import ACTIVE_STATES, Job, JobState, Node


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
    """The jobs ``user`` may see, filtered by the list's query parameters, newest first."""
    qs = Job.objects.restrict(user, VIEW).select_related("owner", "department", "flavor", "cluster")
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


def pending_approvals(user) -> QuerySet[Job]:
    """The approvals inbox: jobs waiting for approval that ``user`` may approve (their department's, for its
    admins; every department's, for platform admins), oldest first."""
    return (Job.objects.restrict(user, APPROVE).filter(state=JobState.PENDING_APPROVAL)
            .select_related("owner", "department", "flavor").order_by("submitted_at", "id"))


def cluster_summary() -> dict:
    """GPUs per flavor: total, used by portal jobs, used by others, free, and fragmentation (free GPUs that
    are not on a completely free node, as a share of free GPUs)."""
    used_on: dict[tuple[str, str], int] = defaultdict(int)
    for placement, gpus in Job.objects.filter(state__in=ACTIVE_STATES).values_list("placement", "gpus"):
        for node in placement or ():
            used_on[node] = used_on.get(node, 0) + gpus
    flavors: dict[str, dict] = {}
    nodes = []
    for n in Node.objects.select_related("flavor", "cluster").order_by("cluster__name", "name"):
        portal_used = used_on.get(n.name, 0)
        free = max(0, n.gpus - n.used_by_others - portal_used) if n.schedulable else 0
        f = flavors.setdefault(n.flavor.name, {"flavor": n.flavor.name, "total": 0, "used_portal": 0,
                                               "used_others": 0, "free": 0, "free_whole_nodes": 0,
                                               "largest_free_block": 0})
        f["total"] += n.gpus
        f["used_portal"] += portal_used
        f["used_others"] += n.used_by_others
        f["free"] += free
        f["largest_free_block"] = max(f["largest_free_block"], free)
        if free == n.gpus:
            f["free_whole_nodes"] += 1
        nodes.append({"cluster": n.cluster.name, "name": n.name, "flavor": n.flavor.name, "gpus": n.gpus,
                      "used_portal": portal_used, "used_others": n.used_by_others, "free": free,
                      "schedulable": n.schedulable, "labels": n.labels})
    for f in flavors.values():
        whole = sum(x["gpus"] for x in nodes if x["flavor"] == f["flavor"] and x["free"] == x["gpus"])
        f["fragmentation"] = round(1 - whole / f["free"], 3) if f["free"] else 0.0
    return {"flavors": sorted(flavors.values(), key=lambda x: x["flavor"]), "nodes": nodes}
