"""Read-side queries of scheduling: jobs (always through ``Job.objects.restrict`` for anything a user asks
for), the approvals inbox, and the cluster's capacity."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db.models import Count, Q, QuerySet, Sum
from django.utils import timezone

from portal.tenancy import APPROVE, VIEW
from quotas import selectors as quota_selectors
from scheduling.backends import get_backend
from scheduling.core.types import TIER_RANK, TIERS
from scheduling.models import (
    ACTIVE_STATES,
    TOTAL_GPUS,
    WAIT_BIN_LABELS,
    ClusterSample,
    DepartmentSample,
    Job,
    JobState,
    Node,
)


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
    for placement, gpus in Job.objects.filter(state__in=ACTIVE_STATES).values_list("placement", "gpus_per_pod"):
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


def lent_shares(keys, quotas, busy, borrowed) -> dict[tuple[int, int], int]:
    """What each (department, flavor) lends: the GPUs other departments borrow of a flavor, shared among the
    departments with idle nominal quota of it in proportion to that idle quota (the cohort pools lendable
    capacity, and which lender's GPU a borrower holds is not recorded)."""
    out: dict[tuple[int, int], int] = {}
    for flavor in {f for _, f in keys}:
        mine = [k for k in keys if k[1] == flavor]
        idle = {k: max(0, quotas.get(k, 0) - busy.get(k, 0)) for k in mine}
        pool = sum(idle.values())
        for k in mine:
            others = sum(borrowed.get(o, 0) for o in mine if o != k)
            out[k] = min(idle[k], others * idle[k] // pool) if pool else 0
    return out


def quota_use(*, department_id: int) -> list[dict]:
    """The department's quota of each flavor now: nominal, borrowing limit, GPUs its admitted and running jobs
    hold, how many of those are borrowed, how many of its idle GPUs others borrow, its queued jobs. Three
    queries whatever the number of jobs."""
    quotas = quota_selectors.quotas_by_department_flavor()
    busy: dict[tuple[int, int], int] = {}
    for dept, flavor, gpus in (Job.objects.filter(state__in=ACTIVE_STATES).values_list("department_id", "flavor_id")
                               .annotate(g=Sum(TOTAL_GPUS)).order_by()):
        busy[(dept, flavor)] = gpus or 0
    queued = dict(((d, f), n) for d, f, n in Job.objects.filter(state=JobState.QUEUED, department_id=department_id)
                  .values_list("department_id", "flavor_id").annotate(n=Count("id")).order_by())
    keys = set(quotas) | set(busy)
    nominal = quota_selectors.nominal_by_flavor()
    borrowed = {k: max(0, busy.get(k, 0) - nominal.get(k, 0)) for k in keys}
    lent = lent_shares(keys, nominal, busy, borrowed)
    rows = []
    for k in sorted(k for k in keys | set(queued) if k[0] == department_id):
        q = quotas.get(k)
        rows.append({"flavor_id": k[1], "flavor": q.flavor.name if q else None, "nominal": nominal.get(k, 0),
                     "borrowing_limit": q.borrowing_limit if q else 0, "busy": busy.get(k, 0),
                     "borrowed": borrowed.get(k, 0), "lent": lent.get(k, 0), "queued": queued.get(k, 0)})
    return rows


def cluster_series(*, since: datetime) -> dict:
    """The charts of the whole cluster since ``since``, from the stored samples (one query): utilisation (busy
    of total GPUs, %), idle GPUs and queue depth per tier over time, preemptions per sample, and the
    distribution of waits (queued -> started) per tier over the window."""
    points: dict[datetime, dict] = {}
    waits = {t: [0] * len(WAIT_BIN_LABELS) for t in TIERS}
    for s in ClusterSample.objects.filter(at__gte=since).order_by("at", "flavor_id"):
        p = points.setdefault(s.at, {"busy": 0, "total": 0, "free": 0, "preemptions": 0,
                                     "queued": dict.fromkeys(TIERS, 0)})
        p["busy"] += s.busy_gpus
        p["total"] += s.total_gpus
        p["free"] += s.free_gpus
        p["preemptions"] += s.preemptions
        for tier, n in (s.queued or {}).items():
            p["queued"][tier] = p["queued"].get(tier, 0) + n
        for tier, hist in (s.waits or {}).items():
            row = waits.setdefault(tier, [0] * len(WAIT_BIN_LABELS))
            for i, n in enumerate(hist[:len(row)]):
                row[i] += n
    times = sorted(points)
    return {
        "labels": _time_labels(times), "times": _epoch_ms(times),
        "utilisation": [round(100 * points[t]["busy"] / points[t]["total"], 1) if points[t]["total"] else 0
                        for t in times],
        "free": [points[t]["free"] for t in times],
        "preemptions": [points[t]["preemptions"] for t in times],
        "queued": {tier: [points[t]["queued"].get(tier, 0) for t in times] for tier in TIERS},
        "wait_bins": list(WAIT_BIN_LABELS),
        "waits": waits,
        "samples": len(times),
    }


def _epoch_ms(times: list[datetime]) -> list[int]:
    """Sample times as Unix milliseconds: the charts' x values on a time axis (gaps drawn as gaps)."""
    return [int(t.timestamp() * 1000) for t in times]


def _time_labels(times: list[datetime]) -> list[str]:
    """Sample times as HH:MM, with seconds when samples are closer than a minute (the demo's)."""
    fine = any((b - a).total_seconds() < 60 for a, b in zip(times, times[1:], strict=False))
    return [t.strftime("%H:%M:%S" if fine else "%H:%M") for t in times]


def department_series(*, user, department_id: int, since: datetime) -> dict:
    """The department's use over time, per flavor (one query, through the tenancy gate): GPUs held, of which
    borrowed, lent to others, and its nominal quota. GPU types are never added together: a line per flavor."""
    points: dict[datetime, dict[str, list[int]]] = {}
    flavors: set[str] = set()
    for s in (DepartmentSample.objects.restrict(user, VIEW).filter(department_id=department_id, at__gte=since)
              .select_related("flavor").order_by("at", "flavor_id")):
        p = points.setdefault(s.at, {}).setdefault(s.flavor.name, [0, 0, 0, 0])
        flavors.add(s.flavor.name)
        p[0] += s.busy_gpus
        p[1] += s.borrowed_gpus
        p[2] += s.lent_gpus
        p[3] += s.nominal
    times = sorted(points)
    by_flavor = {f: {key: [points[t].get(f, [None] * 4)[i] for t in times]
                     for i, key in enumerate(("busy", "borrowed", "lent", "nominal"))} for f in sorted(flavors)}
    return {"labels": _time_labels(times), "times": _epoch_ms(times), "by_flavor": by_flavor, "samples": len(times)}


def cluster_grid(user) -> list[dict]:
    """Every node as a row of GPU cells: which department's job holds each GPU, what pods outside the portal
    use, what is free. A job's name and link only for jobs ``user`` may see (``restrict``); for the others,
    only the department. Three queries whatever the size."""
    visible = set(Job.objects.restrict(user, VIEW).filter(state__in=ACTIVE_STATES).values_list("id", flat=True))
    on_node: dict[str, list[tuple]] = defaultdict(list)
    for pk, name, dept, owner, gpus, placement, state in (
            Job.objects.filter(state__in=ACTIVE_STATES).order_by("id")
            .values_list("id", "name", "department__slug", "owner__username", "gpus_per_pod", "placement",
                         "state")):
        for node in placement or ():
            on_node[node].append((pk, name, dept, owner, gpus, state))
    rows = []
    for n in Node.objects.select_related("flavor", "cluster").order_by("cluster__name", "flavor__name", "name"):
        cells: list[dict] = [{"kind": "other"} for _ in range(min(n.used_by_others, n.gpus))]
        for pk, name, dept, owner, gpus, state in on_node.get(n.name, ()):
            job = {"id": pk, "name": name, "owner": owner, "state": state} if pk in visible else None
            cells += [{"kind": "job", "department": dept, "job": job} for _ in range(gpus)]
        cells = cells[:n.gpus]
        free_kind = "free" if n.schedulable else "cordoned"
        cells += [{"kind": free_kind} for _ in range(n.gpus - len(cells))]
        rows.append({"cluster": n.cluster.name, "name": n.name, "flavor": n.flavor.name, "gpus": n.gpus,
                     "schedulable": n.schedulable, "cells": cells,
                     "free": sum(1 for c in cells if c["kind"] == "free")})
    return rows


def wall_eta(estimated_start: datetime | None, *, cluster: str = "default",
             now: datetime | None = None) -> datetime | None:
    """An estimated start on the wall clock: the engine estimates in runtime seconds (running jobs use their
    max runtime), which a cluster with a speed-up (the simulated one in the demo) goes through faster."""
    if estimated_start is None:
        return None
    speedup = getattr(get_backend(cluster), "speedup", 1.0) or 1.0
    now = now or timezone.now()
    if speedup == 1.0 or estimated_start <= now:
        return estimated_start
    return now + (estimated_start - now) / speedup


def with_eta(jobs):
    """Set ``job.eta`` (the wall-clock estimate) on each job; returns them."""
    now = timezone.now()
    for job in jobs:
        job.eta = wall_eta(job.estimated_start, now=now)
    return jobs


def live_states(user, ids: list[int]) -> list[dict]:
    """What a page that shows these jobs needs to stay current (state, reason, wall-clock ETA, timeline
    length), for the ones ``user`` may see: one query."""
    rows = list(Job.objects.restrict(user, VIEW).filter(pk__in=ids).annotate(n_events=Count("events"))
                .values("id", "state", "reason_code", "reason_message", "estimated_start", "n_events")
                .order_by("id"))
    now = timezone.now()
    for r in rows:
        eta = wall_eta(r.pop("estimated_start"), now=now)
        r["eta"] = eta.isoformat() if eta else None
    return rows
