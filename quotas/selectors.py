"""Quotas' reads for the apps above it (scheduling's snapshot, statistics, what-if, inventory and quota-use
pages): the quotas in force and their nominal GPUs, who holds quotas on a cluster, pending quota requests, the
per-user limits (the snapshot's GPU limits, the submit path's queued-jobs limit).
One query each, whatever the number of rows; nothing here writes."""

from __future__ import annotations

from django.db.models import F, Q

from portal.models import Team
from portal.tenancy import VIEW, membership_of
from quotas import policy_cache
from quotas.models import PreemptionLimit, Quota, QuotaChangeRequest, TeamQuota, UserLimit


def quotas_in_force() -> list[Quota]:
    """Every quota with its department, flavor and cluster (the global quota of a department and flavor
    before its per-cluster ones): the quotas a cycle, a what-if or a page decides with."""
    return list(Quota.objects.select_related("department", "flavor", "cluster"))


def quotas_by_department_flavor() -> dict[tuple[int, int], Quota]:
    """{(department id, flavor id): quota} with its flavor; the global quota stands for the pair when there is
    one, else its first per-cluster quota."""
    out: dict[tuple[int, int], Quota] = {}
    for q in Quota.objects.select_related("flavor"):  # global rows first (Quota's ordering)
        out.setdefault((q.department_id, q.flavor_id), q)
    return out


def gpu_ceiling(*, department_id: int, flavor_id: int, resource: str = "gpus") -> int | None:
    """The most GPUs of a flavor one job of the department could ever hold (the engine's ``never`` rule):
    nominal + borrowing limit of its global quota; with per-cluster quotas only, the largest of theirs (a job
    runs on one cluster); 0 without any quota of the flavor; None when a borrowing limit is unlimited. One query,
    none while ``policy_cache`` keeps the rows (every submission reads them).
    (``resource``: ``cpu`` in cores or ``memory`` in GiB for a CPU pool's rows.)"""
    rows = policy_cache.cached("quota rows", (department_id, flavor_id, resource), lambda: list(
        Quota.objects.filter(department_id=department_id, flavor_id=flavor_id, resource=resource).order_by()
        .values_list("cluster_id", "nominal", "borrowing_limit")))
    scoped = [r for r in rows if r[0] is None] or rows
    if not scoped:
        return 0
    if any(limit is None for _, _, limit in scoped):
        return None
    return max(nominal + limit for _, nominal, limit in scoped)


def nominal_by_flavor() -> dict[tuple[int, int], int]:
    """{(department id, flavor id): nominal GPUs across clusters} (``QuotaQuerySet.nominal_by_flavor``)."""
    return Quota.objects.nominal_by_flavor()


def quota_holders(*, cluster_id: int) -> list[str]:
    """"department/flavor" of every quota held on one cluster, sorted."""
    return sorted({f"{d}/{f}" for d, f in Quota.objects.filter(cluster_id=cluster_id).values_list(
        "department__slug", "flavor__name")})


def pending_quota_requests(*, cluster_id: int) -> list[int]:
    """Ids of the quota change requests on one cluster still waiting for a decision, sorted."""
    return sorted(QuotaChangeRequest.objects.filter(cluster_id=cluster_id, state=QuotaChangeRequest.State.PENDING)
                  .values_list("pk", flat=True))


def user_limits_in_force() -> list[tuple[str, str | None, int]]:
    """(department slug, username or None for every member, max GPUs) of every per-user limit: what a cycle
    decides with (one query)."""
    return list(UserLimit.objects.order_by("department__slug", F("user__username").asc(nulls_first=True), "id")
                .values_list("department__slug", "user__username", "max_gpus"))


def team_quotas_in_force() -> list[tuple[int, str, str, str, int, int | None, int | None]]:
    """(team id, department slug, team slug, flavor, nominal, borrowing limit, lending limit) of every team's
    quota split of a GPU flavor: what a cycle decides with (one query)."""
    return list(TeamQuota.objects.order_by("team__department__slug", "team__slug", "flavor__name")
                .values_list("team_id", "team__department__slug", "team__slug", "flavor__name", "nominal",
                             "borrowing_limit", "lending_limit"))


def queued_jobs_limit(*, department_id: int, user_id: int) -> int | None:
    """How many jobs the member may have queued at once in the department (their own row, else the
    department's), None for no limit (one query, none while ``policy_cache`` keeps the rows)."""
    rows = policy_cache.cached("queued limits", (department_id, user_id), lambda: dict(
        UserLimit.objects.filter(department_id=department_id).filter(Q(user_id=user_id) | Q(user__isnull=True))
        .order_by().values_list("user_id", "max_queued")))
    return rows[user_id] if user_id in rows else rows.get(None)


def department_gpu_ceiling(*, department_id: int) -> int | None:
    """The most GPUs the department could ever hold: per flavor its global quota's nominal plus borrowing
    limit (else the sum of its per-cluster quotas'), over every flavor; None when some quota borrows without
    limit (one query)."""
    global_rows: dict[int, int | None] = {}
    scoped: dict[int, int | None] = {}
    for flavor, cluster, nominal, borrow in Quota.objects.filter(department_id=department_id).values_list(
            "flavor_id", "cluster_id", "nominal", "borrowing_limit").order_by():
        most = None if borrow is None else nominal + borrow
        if cluster is None:
            global_rows[flavor] = most
        else:
            before = scoped.get(flavor, 0)
            scoped[flavor] = None if before is None or most is None else before + most
    per_flavor = {**scoped, **global_rows}
    if any(v is None for v in per_flavor.values()):
        return None
    return sum(per_flavor.values())


def quota_request_changes(requests) -> dict[int, list[tuple[str, str, str, bool]]]:
    """{request id: [(limit, in force, asked, widens)]}: what approving each request would change of the quota in
    force for its department, flavor and cluster (one query for all of them). ``widens`` marks a limit that
    would let the department hold or lend more than now, above all a lending limit that would become "all":
    an explicit null means no limit, and an approver must see that before approving it."""
    requests = list(requests)
    current = {(q.department_id, q.flavor_id, q.cluster_id): q for q in Quota.objects.filter(
        department_id__in={r.department_id for r in requests}, flavor_id__in={r.flavor_id for r in requests})}
    out: dict[int, list[tuple[str, str, str, bool]]] = {}
    for r in requests:
        q = current.get((r.department_id, r.flavor_id, r.cluster_id))
        rows = []
        for field, label, unlimited in (("nominal", "nominal", ""), ("borrowing_limit", "borrowing", "unlimited"),
                                        ("lending_limit", "lending", "all")):
            before = None if q is None else getattr(q, field)
            after = getattr(r, field)
            widens = q is not None and before is not None and (after is None or after > before)
            rows.append((label, "none" if q is None else (unlimited if before is None else str(before)),
                         unlimited if after is None else str(after), widens and field != "nominal"))
        out[r.pk] = rows
    return out


def preemption_limits() -> list[PreemptionLimit]:
    """Every preemption limit with its department: the lab-wide ones (no department) first, then by department
    and tier (the API's and the policy page's order)."""
    return list(PreemptionLimit.objects.select_related("department").order_by(
        F("department__slug").asc(nulls_first=True), "tier", "id"))


def visible_teams(user):
    """The teams ``user`` sees: every team for platform admins, their department's for its admins, their own
    team for anyone else (a member of no team sees none). Through the tenancy gate first, so another
    department's team is never among them."""
    qs = Team.objects.restrict(user, VIEW).select_related("department")
    m = membership_of(user)
    if m is None or m.is_department_admin:
        return qs
    return qs.filter(pk=m.team_id) if m.team_id else qs.none()
