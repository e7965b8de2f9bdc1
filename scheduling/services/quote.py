"""The quote: what a job would cost, whether it would wait for approval, whether it fits its department's
quota, the free GPUs of its flavor, and when the engine would start it if it were submitted now.

Read-only. The start estimate builds the snapshot an admission cycle builds, adds the job as one more
pending job, and runs the pure core on it; the result is read and thrown away (nothing is applied, locked
or written). Bounded: with more jobs in the snapshot than ``QUOTE_ESTIMATE_MAX_JOBS`` the engine is not
run, and the quote says the estimate was skipped instead of stalling the request.
"""

from __future__ import annotations

import time
from dataclasses import replace
from datetime import datetime

from django.conf import settings
from django.utils import timezone

import engine
from billing import money
from engine import reasons, tiers
from engine import types as core_types
from engine.explain import duration_text
from engine.fractions import MILLI, plain
from engine.quota import QuotaBook
from engine.teams import account
from portal.money import format_credits
from portal.tenancy import member
from portal.timestamps import from_epoch
from quotas import budgets
from scheduling import ports
from scheduling.models import Job, JobState
from scheduling.services.snapshot import SnapshotContext, build_snapshot, host_name, label_pairs

# The hypothetical job's id in the snapshot: no stored job has a negative id.
QUOTE_JOB_ID = -1


def job_quote(*, user, data: dict, now: datetime | None = None) -> dict:
    """The quote of ``data`` (validated input, see JobSubmitSerializer) for ``user`` in their department."""
    membership = member(user)
    now = now or timezone.now()
    roles = data.get("roles") or []
    fields = {k: v for k, v in data.items() if k not in ("flavor", "after", "roles")}
    job = Job(owner=user, department=membership.department, user_tier=membership.user_tier,
              flavor=data["flavor"], state=JobState.QUEUED, submitted_at=now, role_count=len(roles) or 1, **fields)
    if roles:  # a job not saved has no role rows to read: its CPU work (what CPU prices charge) from its roles
        work: dict[int, tuple[int, int]] = {}
        for r in roles:
            if r["gpus_per_pod"] == 0:
                c, m = work.get(r["flavor"].pk, (0, 0))
                work[r["flavor"].pk] = (c + r["pods"] * r["cpu_millicores"], m + r["pods"] * r["memory_mib"])
        job._cpu_work = tuple((f, c, m) for f, (c, m) in sorted(work.items()))
    gpus_total = job.gpu_share if job.share_milli else job.total_gpus  # a fraction is quoted at its share
    gpu_seconds = gpus_total * job.max_runtime_s
    terms = budgets.preemption_terms(department_id=membership.department_id, tier=job.tier,
                                     user_tier=job.user_tier, session=job.kind == "session",
                                     asked=job.preemptible, max_runtime_s=job.max_runtime_s, notice_s=job.notice_s)
    job.preemptible, job.price_surcharge_pct, job.notice_s = terms.preemptible, terms.surcharge_pct, terms.notice_s
    base = money.surcharged(budgets.price_for(flavor_id=job.flavor_id, tier=job.tier), terms.surcharge_pct)
    rate = max(base, job.bid or 0)
    cost = budgets.estimated_cost(job=job)
    approval = budgets.needs_approval(
        job=job, inputs=budgets.submission_check_inputs(department_id=membership.department_id, owner_id=user.pk))

    snapshot, ctx = build_snapshot(now=now)
    # right-sizing, from observability above: its recommendation, whose run time (the smoothed run time x1.2)
    # is the job's predicted run time, as the cycle's estimates use it
    recommendation = ports.sizing().recommendation(user=user, name=job.name, image=job.image,
                                                   flavor=job.flavor, tier=job.tier)
    ctx.predicted[QUOTE_JOB_ID] = (recommendation or {}).get("max_runtime_s")
    dept, flavor = membership.department.slug, job.flavor.name
    view = budgets.read_for_cycle()
    credits = snapshot.credits
    available = None if credits is None or dept not in credits else credits[dept]
    quota = _quota_use(snapshot, dept, flavor, gpus_total)
    team = ctx.teams.get(membership.team_id, "")  # (a team with neither a quota split nor a budget share: none)
    share = credits.get(account(dept, team)) if credits is not None and team else None
    if share is not None and available is not None:  # its team's share of the budget binds it too
        available = min(available, share)
    start, clearing_now = _start_estimate(snapshot, job, hold=view.hold_for(job), dept=dept, flavor=flavor, ctx=ctx,
                                          user=user.get_username(), approval=bool(approval), team=team)
    if start.get("borrowed"):  # priced as the engine would clear it now: the base price is the reserve
        clearing = max(base, start["price"] or 0)
        start["cost_at_clearing_price"] = budgets.cost_of(rate=clearing, gpu_seconds=gpu_seconds)
    return {
        "flavor": flavor, "tier": job.tier, "gpus_total": gpus_total,
        "hold_s": job.max_runtime_s, "gpu_hours": gpu_seconds / 3600,
        "base_price": base, "bid": job.bid or 0, "rate": rate,
        "preemptible": tiers.is_preemptible(job.tier, job.preemptible), "surcharge_pct": terms.surcharge_pct,
        "estimated_cost": cost, "estimated_credits": cost / 1000,
        "metered": available is not None, "available": available,
        "affordable": available is None or cost <= available,
        "needs_approval": bool(approval), "approval_reasons": _approval_reasons(approval),
        "free_gpus": _free_gpus(snapshot, flavor),
        "quota": quota,
        "team": _team_use(snapshot, dept, membership.team.slug if membership.team_id else None, team, flavor,
                          gpus_total),
        "start": start,
        "recommendation": recommendation,
        "size_range": _size_range(job, start=start, rate=rate, base=base, clearing=clearing_now, cost=cost),
    }


def _size_range(job: Job, *, start: dict, rate: int, base: int, clearing: int | None, cost: int) -> dict | None:
    """What a resizable job costs across its range (None for any other job): at the size it would start at now
    (the estimate's admission; its minimum when it would wait, the size it waits at) and at its largest size, its
    grown GPUs borrowed, preemptible capacity at the flavor's clearing price of the cycle that grows it (today's
    from the estimate's cycle, at least the base price). Each for its whole max runtime. The hold it needs to be
    admitted stays the worst case: every GPU of its largest size at its own rate (``estimated_cost``)."""
    if job.min_pods is None or not job.gpus_per_pod:
        return None
    g, runtime = job.gpus_per_pod, job.max_runtime_s
    start_pods = len(start["nodes"]) if start.get("starts_now") and start.get("nodes") else job.min_pods
    grow_rate, grow_basis = money.admission_rate(base, borrowed=True, price=clearing)
    start_gpus, max_gpus = start_pods * g, job.pods * g
    at_start = budgets.cost_of(rate=rate, gpu_seconds=start_gpus * runtime)
    at_largest = at_start + budgets.cost_of(rate=grow_rate, gpu_seconds=(max_gpus - start_gpus) * runtime)
    if start.get("starts_now"):
        when = "It would start at"
    elif start.get("skipped"):  # (no estimate: the size it would start at is not known, its minimum is quoted)
        when = "Quoted at its minimum,"
    else:
        when = "It waits at its minimum and would start at"
    message = (f"{when} {start_pods} of its {job.min_pods}..{job.pods} pods: {format_credits(at_start)} for "
               f"{start_gpus} GPU(s) for up to {runtime / 3600:g} h.")
    if max_gpus > start_gpus:
        now = "the clearing price" if grow_basis == "clearing" else "the base price"
        message += (f" Grown to {job.pods} pods: {format_credits(at_largest)}; the {max_gpus - start_gpus} grown "
                    f"GPU(s) are borrowed, preemptible capacity at the clearing price of the cycle that grows it "
                    f"({format_credits(grow_rate)}/GPU-h now, {now}); the portal refunds nothing of them when it "
                    "preempts the job.")
    message += f" The hold is the worst case: {format_credits(cost)}."
    return {"min_pods": job.min_pods, "max_pods": job.pods, "start_pods": start_pods, "start_gpus": start_gpus,
            "max_gpus": max_gpus, "cost_at_start": at_start, "cost_at_largest": at_largest, "hold": cost,
            "grow_rate": grow_rate, "grow_basis": grow_basis, "grown_borrowed": True, "message": message}


def _team_use(snapshot: engine.Snapshot, dept: str, name: str | None, team: str, flavor: str, gpus: int) -> dict | None:
    """The submitter's team and its split of ``flavor`` before and after the job (None: in no team)."""
    if name is None:
        return None
    split = next((q for q in snapshot.team_quotas if q.department == dept and q.team == team and q.flavor == flavor),
                 None)
    used = sum(j.total_gpus for j in snapshot.running if j.department == dept and j.team == team and team
               and j.flavor == flavor)
    if split is None:
        return {"team": name, "nominal": None, "used": used, "after": used + gpus,
                "message": f"team {name} has no quota of {flavor} of its own: it draws on {dept}'s unassigned share"}
    after = used + gpus
    within = after <= split.nominal
    return {"team": name, "nominal": split.nominal, "borrowing_limit": split.borrowing_limit,
            "lending_limit": split.lending_limit, "used": used, "after": after, "fits": within,
            "message": (f"team {name}: {after} of its {split.nominal} GPUs in use after it" if within else
                        f"team {name} would borrow {after - split.nominal} GPUs beyond its {split.nominal} from "
                        "its sibling teams or the cohort")}


def _approval_reasons(approval: str | None) -> list[str]:
    if not approval:
        return []
    text = approval.split(": ", 1)[1] if ": " in approval else approval
    return [part.strip() for part in text.split("; ") if part.strip()]


def _free_gpus(snapshot: engine.Snapshot, flavor: str) -> int:
    """GPUs of ``flavor`` that a job could start on now: on usable nodes of clusters open to admissions (not
    cordoned or draining) that no running job and nothing outside the portal uses."""
    used: dict[tuple[str, str], int] = {}
    shared = set()  # a GPU holding fractions is used once, however many it holds
    for job in snapshot.running:
        if job.share is not None:
            shared.update((job.cluster, node, d) for node, d in zip(job.placement, job.devices, strict=False))
            continue
        for node in job.placement:
            used[(job.cluster, node)] = used.get((job.cluster, node), 0) + job.gpus_per_pod
    for cluster, node, _ in shared:
        used[(cluster, node)] = used.get((cluster, node), 0) + 1
    closed = {c.name for c in snapshot.clusters if c.state != "active"}
    return sum(max(0, n.gpus - n.used_by_others - used.get((n.cluster, n.name), 0))
               for n in snapshot.nodes if n.flavor == flavor and n.usable and n.cluster not in closed)


def _quota_use(snapshot: engine.Snapshot, dept: str, flavor: str, gpus: int) -> dict:
    """The department's quota of ``flavor`` and what its running jobs use of it, and whether ``gpus`` more
    fit inside nominal (``fits``), need borrowed capacity (``must_borrow``), or pass the borrowing limit."""
    q = next((q for q in snapshot.quotas if q.department == dept and q.flavor == flavor), None)
    used = plain(sum(j.total_gpus for j in snapshot.running
                     if j.department == dept and j.flavor == flavor))
    nominal = q.nominal if q else 0
    limit = q.borrowing_limit if q else 0
    after = used + gpus
    borrow = max(0, after - nominal)
    over_limit = limit is not None and borrow > limit
    # Whether the cohort has the idle GPUs to lend it now, by the engine's own book: "must borrow 3" above
    # the estimate's "cannot borrow enough" told two stories
    # (the book counts milli-GPUs; a fraction's GPUs come here as pods x milli / 1000, which rounds back exactly)
    code, detail = QuotaBook(snapshot.quotas, snapshot.running).check(dept, flavor, round(gpus * MILLI))
    short = borrow > 0 and not over_limit and code == reasons.QUOTA_EXHAUSTED
    if after <= nominal:
        verdict = f"fits: {after} of {nominal} guaranteed GPUs in use after it"
    elif over_limit:
        verdict = (f"over the borrowing limit: it would borrow {borrow} GPUs, the limit is {limit}; it waits "
                   "until the department's own jobs finish")
    elif short:
        verdict = (f"would have to borrow {borrow} GPUs beyond the {nominal} guaranteed, but the cohort has "
                   f"{detail.get('cohort_idle', 0)} idle to lend now; it waits until other departments' jobs "
                   "or its own finish")
    else:
        verdict = f"must borrow {borrow} GPUs beyond the {nominal} guaranteed (idle capacity, preemptible)"
    return {"nominal": nominal, "borrowing_limit": limit, "used": used, "after": after,
            "fits": after <= nominal, "must_borrow": borrow > 0 and not over_limit, "borrow": borrow,
            "over_borrowing_limit": over_limit, "cohort_short": short, "message": verdict}


def _start_estimate(snapshot: engine.Snapshot, job: Job, *, hold: int, dept: str, flavor: str, user: str,
                    approval: bool, ctx: SnapshotContext, team: str = "") -> tuple[dict, int | None]:
    """The engine's answer for the job added to the queue now, and the flavor's clearing price in that cycle (what a
    grow would be charged now; None when no bid decided anything, or when the estimate is skipped)."""
    jobs = len(snapshot.running) + len(snapshot.pending)
    if jobs >= settings.QUOTE_ESTIMATE_MAX_JOBS:
        return {"estimated_start": None, "starts_now": False, "code": "", "skipped": True,
                "message": f"Not estimated: {jobs} jobs are active or waiting, more than the quote replays "
                           f"(QUOTE_ESTIMATE_MAX_JOBS={settings.QUOTE_ESTIMATE_MAX_JOBS}).",
                "borrowed": False, "price": None, "elapsed_ms": 0}, None
    pending = core_types.PendingJob(
        id=QUOTE_JOB_ID, department=dept, flavor=flavor, tier=job.tier, pods=job.pods, gpus_per_pod=job.gpus_per_pod,
        urgency=job.urgency, user_tier=job.user_tier, user=user, submitted_at=snapshot.now,
        deadline=job.deadline.timestamp() if job.deadline else None, max_runtime_s=ctx.wall_seconds(job.max_runtime_s, routed=job.has_route),
        bid=job.bid or 0, hold=hold, predicted_runtime_s=ctx.predicted_wall(QUOTE_JOB_ID, routed=job.has_route),
        cluster_selector=label_pairs(job.cluster_selector), cluster_preference=label_pairs(job.cluster_preference),
        own_preemptible=job.preemptible, team=team,
        topology_level=job.topology_level or "", topology_required=bool(job.topology_required),
        # a resizable job is judged as the cycle judges it: at the largest size of its range that fits now
        min_pods=job.min_pods if job.min_pods is not None and job.gpus_per_pod else None,
    )
    started = time.perf_counter()
    result = engine.schedule(replace(snapshot, pending=(*snapshot.pending, pending)))
    elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
    admission = next((a for a in result.admissions if a.job_id == QUOTE_JOB_ID), None)
    clearing = result.clearing_prices.get(flavor)
    after = " once a department admin approves it" if approval else ""
    if admission is not None:
        size = ""
        if job.min_pods is not None:  # (its costs across its range: ``size_range``)
            size = f" at {len(admission.placement)} of its {job.min_pods}..{job.pods} pods"
        return {"estimated_start": from_epoch(snapshot.now), "starts_now": True, "code": "admitted",
                "message": "It would start at the next admission cycle" + size + after + ".",
                "borrowed": admission.borrowed, "price": admission.price,
                "nodes": [host_name(n) for n in admission.placement],
                "skipped": False, "elapsed_ms": elapsed_ms}, clearing
    why = next((r for r in result.pending if r.job_id == QUOTE_JOB_ID), None)
    code = why.code if why else reasons.QUEUED
    estimate = from_epoch(why.estimated_start) if why and why.estimated_start is not None else None
    out = {"estimated_start": estimate, "starts_now": False, "code": code,
           "message": (why.message if why else reasons.CODES[code]) + (f" (and{after})" if after else ""),
           "borrowed": False, "price": None, "skipped": False, "elapsed_ms": elapsed_ms}
    if code in (reasons.BOOKED, reasons.MAINTENANCE):
        out["calendar"] = _calendar_warning(why.detail, snapshot.now)
        out["message"] += " " + out["calendar"]["hint"]
    return out, clearing


def _calendar_warning(detail, now: float) -> dict:
    """What the quote says of a job a booking or a maintenance window keeps out: which window, from when, and
    the time limit under which it would start before the window (backfill), if the window has not begun."""
    begins = detail.get("window_start", now)
    limit = int(begins - now) if begins > now else None
    hint = (f"With a time limit under {duration_text(limit)} it could start before the window."
            if limit and limit >= 60 else "It starts once the window ends.")
    return {"booking": detail.get("booking"), "maintenance": detail.get("maintenance"),
            "window_start": from_epoch(begins), "window_end": from_epoch(detail.get("window_end", now)),
            "max_runtime_s_to_start_before": limit, "hint": hint}
