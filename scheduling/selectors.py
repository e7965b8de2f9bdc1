"""Read-side queries of scheduling: jobs (always through ``Job.objects.restrict`` for anything a user asks
for), the approvals inbox, and the cluster's capacity."""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db.models import Count, F, Max, OuterRef, Q, QuerySet, Subquery, Sum, Window
from django.db.models.functions import RowNumber
from django.utils import timezone
from django.utils.dateparse import parse_date, parse_datetime

from engine.types import TIERS
from portal.errors import Forbidden, ValidationFailed
from portal.tenancy import APPROVE, VIEW, membership_of
from quotas import selectors as quota_selectors
from scheduling.models import (
    ACTIVE_STATES,
    TOTAL_GPUS,
    WAIT_BIN_LABELS,
    Booking,
    Cluster,
    ClusterSample,
    ClusterState,
    DepartmentSample,
    Job,
    JobState,
    MaintenanceWindow,
    Node,
    SessionGrant,
)

# The queue of a flavor in the engine's order, as the last cycle recorded it (``queue_rank``, written by the
# cycle from its result's pending order: scheduling/services/queue_ranks.py), then the jobs no cycle has looked
# at yet, by submission. A total order: it ends in the id.
QUEUE_ORDER = (F("queue_rank").asc(nulls_last=True), "submitted_at", "id")


def queue_position(*, job: Job) -> int | None:
    """The job's position in its flavor's queue (``QUEUE_ORDER``): 1 + the queued jobs of the flavor before it,
    the same position the whole queue (``whole_queue``) shows; None unless the job is queued. One query."""
    if job.state != JobState.QUEUED:
        return None
    if job.queue_rank is None:  # behind every job a cycle ordered, then by submission
        before = (Q(queue_rank__isnull=False) | Q(queue_rank__isnull=True, submitted_at__lt=job.submitted_at)
                  | Q(queue_rank__isnull=True, submitted_at=job.submitted_at, id__lt=job.pk))
    else:
        before = (Q(queue_rank__lt=job.queue_rank) | Q(queue_rank=job.queue_rank, submitted_at__lt=job.submitted_at)
                  | Q(queue_rank=job.queue_rank, submitted_at=job.submitted_at, id__lt=job.pk))
    return Job.objects.filter(state=JobState.QUEUED, flavor_id=job.flavor_id).filter(before).count() + 1


# What the whole queue reads of a job: its place and size for everyone, its name and owner for its own
# department. Nothing else is loaded (no image, command or environment), so nothing else can be shown.
QUEUE_FIELDS = ("id", "department__slug", "team__slug", "flavor__name", "owner__username", "name", "tier", "gpus_per_pod", "pods",
                "current_pods",  # (``total_gpus`` counts a resizable job at its size)
                "submitted_at", "estimated_start", "reason_code", "reason_message", "queue_rank", "state")


def whole_queue(*, flavor: str | None = None) -> QuerySet[Job]:
    """Every queued job of every department (or of one flavor), each flavor's in the engine's order
    (``QUEUE_ORDER``), with ``position`` in its flavor's queue. Readable by every member: what of a row may be
    shown to whom is the caller's to decide (``scheduling.api.queue``). One query (plus the page's count)."""
    qs = Job.objects.filter(state=JobState.QUEUED)
    if flavor:
        qs = qs.filter(flavor__name=flavor)
    return (qs.select_related("department", "team", "flavor", "owner").only(*QUEUE_FIELDS)
            .annotate(position=Window(RowNumber(), partition_by=[F("flavor_id")], order_by=list(QUEUE_ORDER)))
            .order_by("flavor__name", *QUEUE_ORDER))


def jobs_for(user, params) -> QuerySet[Job]:
    """The jobs ``user`` may see, filtered by the list's query parameters, newest first."""
    qs = (Job.objects.restrict(user, VIEW).select_related("owner", "department", "team", "flavor", "cluster")
          .prefetch_related("dependencies"))
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
    if team := params.get("team"):
        qs = qs.filter(team__slug=team)
    if q := params.get("q"):
        qs = qs.filter(name__icontains=q)
    if (array := params.get("array")) and str(array).isdigit() and int(array) < 2**63:
        qs = qs.filter(array_id=int(array))
        return qs.order_by("array_index", "id")  # an array's tasks in index order
    return qs.order_by("-submitted_at", "-id")


def approving_team(user) -> int | None:
    """The team whose jobs ``user`` approves as its team admin (docs/teams.md), None for anyone else (department
    and platform admins approve through the tenancy rule; researchers approve nothing)."""
    m = membership_of(user)
    return m.team_id if m is not None and m.team_admin and not m.is_department_admin else None


def approvable(user):
    """The jobs ``user`` may approve or reject: their department's for its admins, every one for platform admins,
    their team's for a team admin (through the tenancy gate: never another department's)."""
    team = approving_team(user)
    if team is not None:
        return Job.objects.restrict(user, VIEW).filter(team_id=team)
    return Job.objects.restrict(user, APPROVE)


def approvable_job(user, pk, *, message: str) -> Job:
    """The job the URL names, for a decision: a 404 unless ``user`` sees it, a 403 unless they may decide it."""
    job = Job.objects.select_related("department", "owner").get_or_404(user, VIEW, pk=pk)
    if not approvable(user).filter(pk=job.pk).exists():
        raise Forbidden(message)
    return job


def pending_approvals(user) -> QuerySet[Job]:
    """The approvals inbox: jobs waiting for approval that ``user`` may approve (their department's, for its
    admins; every department's, for platform admins; their team's, for a team admin), oldest first."""
    return (approvable(user).filter(state=JobState.PENDING_APPROVAL)
            .select_related("owner", "department", "team", "flavor").order_by("submitted_at", "id"))


def cluster_summary() -> dict:
    """GPUs per flavor: total, used by portal jobs, used by others, free, and fragmentation (free GPUs that
    are not on a completely free node, as a share of free GPUs). Free GPUs are those a job could be admitted
    to: on schedulable nodes of active clusters (a cordoned or draining cluster admits nothing new; its idle
    GPUs are counted in ``closed``)."""
    used_on: dict[tuple[str, str], int] = defaultdict(int)
    for placement, gpus in Job.objects.filter(state__in=ACTIVE_STATES).values_list("placement", "gpus_per_pod"):
        for node in placement or ():
            used_on[node] = used_on.get(node, 0) + gpus
    flavors: dict[str, dict] = {}
    nodes = []
    for n in Node.objects.select_related("flavor", "cluster").order_by("cluster__name", "name"):
        portal_used = used_on.get(n.name, 0)
        idle = max(0, n.gpus - n.used_by_others - portal_used) if n.schedulable else 0
        open_ = n.cluster.state == ClusterState.ACTIVE
        free = idle if open_ else 0
        f = flavors.setdefault(n.flavor.name, {"flavor": n.flavor.name, "total": 0, "used_portal": 0,
                                               "used_others": 0, "free": 0, "closed": 0, "free_whole_nodes": 0,
                                               "largest_free_block": 0})
        f["total"] += n.gpus
        f["used_portal"] += portal_used
        f["used_others"] += n.used_by_others
        f["free"] += free
        f["closed"] += 0 if open_ else idle
        f["largest_free_block"] = max(f["largest_free_block"], free)
        if free == n.gpus:
            f["free_whole_nodes"] += 1
        nodes.append({"cluster": n.cluster.name, "name": n.name, "flavor": n.flavor.name, "gpus": n.gpus,
                      "used_portal": portal_used, "used_others": n.used_by_others, "free": free,
                      "schedulable": n.schedulable, "cluster_state": n.cluster.state, "labels": n.labels})
    for f in flavors.values():
        whole = sum(x["gpus"] for x in nodes if x["flavor"] == f["flavor"] and x["free"] == x["gpus"])
        f["fragmentation"] = round(1 - whole / f["free"], 3) if f["free"] else 0.0
    return {"flavors": sorted(flavors.values(), key=lambda x: x["flavor"]), "nodes": nodes}


def topology_overview(summary: dict) -> list[dict]:
    """The network domains of every cluster that declares topology levels, from ``cluster_summary``'s nodes: per
    level (hosts left out: the node table shows them), per flavor and domain, its GPUs, the free ones, its
    whole free nodes and the largest gang of whole nodes it could take now (what a job that requires one
    such domain waits for). Ordered by cluster, level (outermost first), flavor and domain."""
    levels = dict(Cluster.objects.exclude(topology_levels=[]).values_list("name", "topology_levels"))
    rows: dict[tuple, dict] = {}
    for n in summary["nodes"]:
        for depth, level in enumerate(levels.get(n["cluster"]) or []):
            if level == "kubernetes.io/hostname" or level not in (n["labels"] or {}):
                continue
            key = (n["cluster"], depth, n["flavor"], n["labels"][level])
            row = rows.setdefault(key, {"cluster": n["cluster"], "level": level, "name": level.rsplit("/", 1)[-1],
                                        "flavor": n["flavor"], "domain": n["labels"][level], "nodes": 0, "gpus": 0,
                                        "free": 0, "whole_nodes": 0})
            row["nodes"] += 1
            row["gpus"] += n["gpus"]
            row["free"] += n["free"]
            row["whole_nodes"] += int(n["free"] == n["gpus"])
    return [rows[k] for k in sorted(rows)]


def flavor_pools(*, flavor_id: int) -> list[tuple[str, dict, list[int]]]:
    """Each cluster's nodes of a flavor, as (cluster name, cluster labels, every node's GPUs), by cluster name:
    what a job of the flavor could ever occupy there (nodes cordoned for now included: they come back). Nodes
    are counted per cluster and size in the database: every submission reads this, and a row per node (with
    its cluster's labels to decode) cost more than the rest of the submission's checks."""
    pools: dict[str, tuple[str, dict, list[int]]] = {}
    for name, labels, gpus, count in (Node.objects.filter(flavor_id=flavor_id)
                                      .values_list("cluster__name", "cluster__labels", "gpus")
                                      .annotate(count=Count("id")).order_by("cluster__name", "gpus")):
        pools.setdefault(name, (name, labels or {}, []))[2].extend([gpus] * count)
    return list(pools.values())


def topology_domains(*, flavor_id: int, clusters: list[str]) -> dict[str, dict[str, dict[str, list[int]]]]:
    """Per cluster (of ``clusters``), per topology level it declares, per domain (the level's label value) the
    GPUs of each of its nodes of a flavor: how large a gang that requires one domain of a level can ever be.
    A node is its own host (``kubernetes.io/hostname``) even where nothing labels it so (as the engine sees it)."""
    levels = dict(Cluster.objects.filter(name__in=clusters).values_list("name", "topology_levels"))
    out: dict[str, dict[str, dict[str, list[int]]]] = {c: {k: {} for k in (levels.get(c) or [])} for c in clusters}
    rows = Node.objects.filter(flavor_id=flavor_id, cluster__name__in=[c for c in clusters if levels.get(c)])
    for cluster, name, labels, gpus in rows.values_list("cluster__name", "name", "labels", "gpus"):
        labels = labels or {}
        for level, domains in out[cluster].items():
            value = labels.get(level, name if level == "kubernetes.io/hostname" else None)
            if value is not None:
                domains.setdefault(value, []).append(gpus)
    return out


def cpu_pool_nodes(*, flavor_id: int) -> list[tuple[int, int]]:
    """The (millicores, MiB) of every node size of a CPU pool, across clusters (one query): a CPU role whose
    pod is larger than every node could never start."""
    own = list(Node.objects.filter(flavor_id=flavor_id).values_list("cpu_millicores", "memory_mib").distinct())
    return own + lent_gpu_nodes(flavor_id=flavor_id)


def lent_gpu_nodes(*, flavor_id: int) -> list[tuple[int, int]]:
    """The (millicores, MiB) a CPU pool's pod could ever have on each GPU node of a cluster that lends its GPU
    nodes to the pool (the node's cores and memory less the reserve of all its GPUs); one query."""
    rows = (Node.objects.filter(cluster__cpu_on_gpu_nodes_id=flavor_id).exclude(flavor__kind="cpu")
            .values_list("cpu_millicores", "memory_mib", "gpus", "cluster__gpu_reserve_cores",
                         "cluster__gpu_reserve_memory_gib"))
    sizes = {(c - g * rc * 1000, m - g * rm * 1024) for c, m, g, rc, rm in rows}
    return sorted((c, m) for c, m in sizes if c > 0 and m > 0)


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
    use, what is free, and each GPU shared by fractions (docs/fractions.md) as one ``shared`` cell with what it
    holds (each fraction's department, job and share) and how much of it is used. A job's name and link only
    for jobs ``user`` may see (``restrict``); for the others, only the department. Three queries whatever the
    size."""
    visible = set(Job.objects.restrict(user, VIEW).filter(state__in=ACTIVE_STATES).values_list("id", flat=True))
    on_node: dict[str, list[tuple]] = defaultdict(list)
    shared: dict[str, dict[int, list[dict]]] = defaultdict(lambda: defaultdict(list))  # node -> device -> holders
    for pk, name, dept, owner, gpus, placement, state, milli, devices in (
            Job.objects.filter(state__in=ACTIVE_STATES).order_by("id")
            .values_list("id", "name", "department__slug", "owner__username", "gpus_per_pod", "placement",
                         "state", "share_milli", "gpu_devices")):
        job = {"id": pk, "name": name, "owner": owner, "state": state} if pk in visible else None
        if milli:
            for node, device in zip(placement or (), devices or (), strict=False):
                shared[node][device].append({"department": dept, "job": job, "share": milli / 1000})
            continue
        for node in placement or ():
            on_node[node].append((pk, name, dept, owner, gpus, state))
    rows = []
    for n in Node.objects.select_related("flavor", "cluster").order_by("cluster__name", "flavor__name", "name"):
        cells: list[dict] = [{"kind": "other"} for _ in range(min(n.used_by_others, n.gpus))]
        for pk, name, dept, owner, gpus, state in on_node.get(n.name, ()):
            job = {"id": pk, "name": name, "owner": owner, "state": state} if pk in visible else None
            cells += [{"kind": "job", "department": dept, "job": job} for _ in range(gpus)]
        for device, holders in sorted(shared.get(n.name, {}).items()):
            used = round(sum(h["share"] for h in holders), 3)
            cells.append({"kind": "shared", "device": device, "holders": holders, "used": used,
                          "quarters": min(4, round(used * 4))})  # the cell's fill (no inline style: the CSP)
        cells = cells[:n.gpus]
        free_kind = "free" if n.schedulable and n.cluster.state == ClusterState.ACTIVE else "cordoned"
        cells += [{"kind": free_kind} for _ in range(n.gpus - len(cells))]
        rows.append({"cluster": n.cluster.name, "name": n.name, "flavor": n.flavor.name, "gpus": n.gpus,
                     "schedulable": n.schedulable, "cells": cells,
                     "free": sum(1 for c in cells if c["kind"] == "free"),
                     "shared": sum(1 for c in cells if c["kind"] == "shared")})
    return rows


def live_states(user, ids: list[int]) -> list[dict]:
    """What a page that shows these jobs needs to stay current (state, reason, estimated start as ``eta``,
    timeline length), for the ones ``user`` may see: one query. The estimate is on the wall clock already
    (the snapshot gives the engine wall-clock runtimes: services/snapshot.py)."""
    rows = list(Job.objects.restrict(user, VIEW).filter(pk__in=ids).annotate(n_events=Count("events"))
                .values("id", "state", "reason_code", "reason_message", "estimated_start", "n_events")
                .order_by("id"))
    for r in rows:
        eta = r.pop("estimated_start")
        r["eta"] = eta.isoformat() if eta else None
    return rows


def sessions_overview() -> list[Job]:
    """Platform admins' view of the sessions and services that run or wait (the cluster page): owner,
    department, state, readiness, the GPU idle streak the idle detection measured for the current attempt
    (observability's rows, read through the job's reverse relation, not imported) and the last client."""
    idle = Subquery(Job.gpu_usage.rel.related_model.objects.filter(job=OuterRef("pk"), attempt=OuterRef("attempt"))
                    .values("idle_streak_minutes")[:1])
    seen = Subquery(SessionGrant.objects.filter(job=OuterRef("pk")).values("job").annotate(m=Max("last_seen_at"))
                    .values("m")[:1])
    rows = (Job.objects.filter(kind__in=("session", "service"), state__in=("queued", "admitted", "running"))
            .select_related("owner", "department").annotate(gpu_idle_minutes=idle, client_seen_at=seen)
            .order_by("submitted_at", "id"))
    return list(rows)


# ------------------------------------------------------------------------------------------- the calendar


def calendar_entries(user, start: datetime, end: datetime) -> dict:
    """The bookings and maintenance windows overlapping [start, end), as everyone may read them: a booking of
    the reader's department (any, for platform admins) with its purpose and owners, anyone else's as capacity
    booked by "another department" (its size and window only); every maintenance window."""
    m = membership_of(user)
    everything = m is not None and m.is_platform_admin
    own = None if m is None else m.department_id
    bookings = []
    for b in (Booking.objects.overlapping(start, end).select_related("department", "team", "cluster", "flavor")
              .prefetch_related("users")):
        row = {"kind": "booking", "id": b.pk, "cluster": b.cluster.name, "flavor": b.flavor.name, "gpus": b.gpus,
               "start": b.start, "end": b.end}
        if everything or b.department_id == own:
            row.update(own=True, department=b.department.slug, team=b.team.slug if b.team_id else None,
                       purpose=b.purpose, users=sorted(u.username for u in b.users.all()))
        else:
            row.update(own=False, department="another department", team=None, purpose="booked by another department",
                       users=[])
        bookings.append(row)
    windows = [{"kind": "maintenance", "id": w.pk, "cluster": w.cluster.name, "nodes": list(w.nodes or []),
                "selector": dict(w.selector or {}), "start": w.start, "end": w.end, "reason": w.reason}
               for w in MaintenanceWindow.objects.overlapping(start, end).select_related("cluster")]
    return {"start": start, "end": end, "bookings": bookings, "maintenance": windows}


def job_events(*, job: Job, role: str | None = None) -> QuerySet:
    """A job's timeline, or with ``role`` only the events of that role of a job of several roles (its pods',
    and the engine's reasons naming it; ``JobEvent.role``). A role the job has not: 400 on ``role``."""
    qs = job.events.select_related("actor")
    if not role:
        return qs
    names = list(job.roles.order_by("index").values_list("name", flat=True)) if job.role_count > 1 else []
    if role not in names:
        raise ValidationFailed(f"role: job {job.pk} has no role {role!r}.", fields={"role": [{
            "code": "invalid", "message": (f"This job's roles are {', '.join(names)}." if names
                                           else "This job is one role: its events are all the job's.")}]})
    return qs.filter(Q(data__role=role) | Q(data__detail__role=role))


def pods_by_role(*, job: Job) -> list[dict]:
    """A job of several roles' pods, role by role (its pods are numbered role by role): per role its name,
    shape, failure policy and pods, each with its index, rank in the role, name in the current attempt, node
    and how many times it was replaced alone in this attempt (``pod_restarted`` events). Empty for a job of
    one role (its pods are the job's)."""
    if job.role_count < 2:
        return []
    restarts: dict[int, int] = defaultdict(int)
    for data in job.events.filter(attempt=job.attempt, reason_code="pod_restarted").values_list("data", flat=True):
        restarts[int((data or {}).get("index", -1))] += 1
    placement = list(job.placement or ())
    base = f"job-{job.pk}-a{job.attempt}"
    out, at = [], 0
    for role in job.roles.order_by("index"):
        pods = [{"index": at + rank, "rank": rank, "name": f"{base}-{at + rank}",
                 "node": placement[at + rank] if at + rank < len(placement) else "",
                 "restarts": restarts.get(at + rank, 0)} for rank in range(role.pods)]
        size = (f"{role.gpus_per_pod} GPU(s), " if role.gpus_per_pod else "") + \
            f"{role.cpu_millicores / 1000:g} cores, {role.memory_mib / 1024:g} GiB"
        out.append({"name": role.name, "size": size, "failure_policy": role.failure_policy, "pods": pods})
        at += role.pods
    return out


def calendar_window(params) -> tuple:
    """The calendar's window from ``start`` (a date or a time; default today's 00:00 UTC) and ``days`` (1-31)."""
    raw = params.get("start")
    days_raw = params.get("days", "7")
    if not str(days_raw).isdigit() or not 1 <= int(days_raw) <= 31:
        raise ValidationFailed("days is a whole number from 1 to 31.",
                               fields={"days": [{"code": "invalid", "message": "A whole number from 1 to 31."}]})
    now = timezone.now()
    if raw:
        when = parse_datetime(raw)
        if when is None:
            d = parse_date(raw)
            if d is None:
                raise ValidationFailed("start is an ISO date or time.",
                                       fields={"start": [{"code": "invalid", "message": "An ISO date or time."}]})
            when = now.replace(year=d.year, month=d.month, day=d.day, hour=0, minute=0, second=0, microsecond=0)
        elif timezone.is_naive(when):
            when = timezone.make_aware(when, timezone.get_fixed_timezone(0))
    else:
        when = now.replace(hour=0, minute=0, second=0, microsecond=0)
    return when, int(days_raw)
