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

from portal.tenancy import member
from portal.timestamps import from_epoch
from quotas import budgets
from scheduling import core, ports
from scheduling.core import reasons
from scheduling.core import types as core_types
from scheduling.models import Job, JobState
from scheduling.services.snapshot import SnapshotContext, build_snapshot, label_pairs

# The hypothetical job's id in the snapshot: no stored job has a negative id.
QUOTE_JOB_ID = -1


def job_quote(*, user, data: dict, now: datetime | None = None) -> dict:
    """The quote of ``data`` (validated input, see JobSubmitSerializer) for ``user`` in their department."""
    membership = member(user)
    now = now or timezone.now()
    fields = {k: v for k, v in data.items() if k not in ("flavor", "after")}
    job = Job(owner=user, department=membership.department, user_tier=membership.user_tier,
              flavor=data["flavor"], state=JobState.QUEUED, submitted_at=now, **fields)
    gpus_total = job.total_gpus
    gpu_seconds = gpus_total * job.max_runtime_s
    base = budgets.price_for(flavor_id=job.flavor_id, tier=job.tier)
    rate = max(base, job.bid or 0)
    cost = budgets.estimated_cost(job=job)
    approval = budgets.needs_approval(
        job=job, inputs=budgets.submission_check_inputs(department_id=membership.department_id, owner_id=user.pk))

    snapshot, ctx = build_snapshot(now=now)
    # right-sizing, from observability above: its recommendation, whose run time (the smoothed run time x1.2)
    # is the job's predicted run time, as the cycle's estimates use it
    recommendation = ports.sizing().recommendation(user=user, name=job.name, image=job.image)
    ctx.predicted[QUOTE_JOB_ID] = (recommendation or {}).get("max_runtime_s")
    dept, flavor = membership.department.slug, job.flavor.name
    view = budgets.read_for_cycle()
    credits = snapshot.credits
    available = None if credits is None or dept not in credits else credits[dept]
    quota = _quota_use(snapshot, dept, flavor, gpus_total)
    start = _start_estimate(snapshot, job, hold=view.hold_for(job), dept=dept, flavor=flavor, ctx=ctx,
                            user=user.get_username(), approval=bool(approval))
    if start.get("borrowed"):  # priced as the engine would clear it now: the base price is the reserve
        clearing = max(base, start["price"] or 0)
        start["cost_at_clearing_price"] = budgets.cost_of(rate=clearing, gpu_seconds=gpu_seconds)
    return {
        "flavor": flavor, "tier": job.tier, "gpus_total": gpus_total,
        "hold_s": job.max_runtime_s, "gpu_hours": gpu_seconds / 3600,
        "base_price": base, "bid": job.bid or 0, "rate": rate,
        "estimated_cost": cost, "estimated_credits": cost / 1000,
        "metered": available is not None, "available": available,
        "affordable": available is None or cost <= available,
        "needs_approval": bool(approval), "approval_reasons": _approval_reasons(approval),
        "free_gpus": _free_gpus(snapshot, flavor),
        "quota": quota,
        "start": start,
        "recommendation": recommendation,
    }


def _approval_reasons(approval: str | None) -> list[str]:
    if not approval:
        return []
    text = approval.split(": ", 1)[1] if ": " in approval else approval
    return [part.strip() for part in text.split("; ") if part.strip()]


def _free_gpus(snapshot: core.Snapshot, flavor: str) -> int:
    """GPUs of ``flavor`` that a job could start on now: on usable nodes of clusters open to admissions (not
    cordoned or draining) that no running job and nothing outside the portal uses."""
    used: dict[tuple[str, str], int] = {}
    for job in snapshot.running:
        for node in job.placement:
            used[(job.cluster, node)] = used.get((job.cluster, node), 0) + job.gpus_per_pod
    closed = {c.name for c in snapshot.clusters if c.state != "active"}
    return sum(max(0, n.gpus - n.used_by_others - used.get((n.cluster, n.name), 0))
               for n in snapshot.nodes if n.flavor == flavor and n.usable and n.cluster not in closed)


def _quota_use(snapshot: core.Snapshot, dept: str, flavor: str, gpus: int) -> dict:
    """The department's quota of ``flavor`` and what its running jobs use of it, and whether ``gpus`` more
    fit inside nominal (``fits``), need borrowed capacity (``must_borrow``), or pass the borrowing limit."""
    q = next((q for q in snapshot.quotas if q.department == dept and q.flavor == flavor), None)
    used = sum(j.total_gpus for j in snapshot.running
               if j.department == dept and j.flavor == flavor)
    nominal = q.nominal if q else 0
    limit = q.borrowing_limit if q else 0
    after = used + gpus
    borrow = max(0, after - nominal)
    over_limit = limit is not None and borrow > limit
    if after <= nominal:
        verdict = f"fits: {after} of {nominal} guaranteed GPUs in use after it"
    elif over_limit:
        verdict = (f"over the borrowing limit: it would borrow {borrow} GPUs, the limit is {limit}; it waits "
                   "until the department's own jobs finish")
    else:
        verdict = f"must borrow {borrow} GPUs beyond the {nominal} guaranteed (idle capacity, preemptible)"
    return {"nominal": nominal, "borrowing_limit": limit, "used": used, "after": after,
            "fits": after <= nominal, "must_borrow": borrow > 0 and not over_limit, "borrow": borrow,
            "over_borrowing_limit": over_limit, "message": verdict}


def _start_estimate(snapshot: core.Snapshot, job: Job, *, hold: int, dept: str, flavor: str, user: str,
                    approval: bool, ctx: SnapshotContext) -> dict:
    jobs = len(snapshot.running) + len(snapshot.pending)
    if jobs >= settings.QUOTE_ESTIMATE_MAX_JOBS:
        return {"estimated_start": None, "starts_now": False, "code": "", "skipped": True,
                "message": f"Not estimated: {jobs} jobs are active or waiting, more than the quote replays "
                           f"(QUOTE_ESTIMATE_MAX_JOBS={settings.QUOTE_ESTIMATE_MAX_JOBS}).",
                "borrowed": False, "price": None, "elapsed_ms": 0}
    pending = core_types.PendingJob(
        id=QUOTE_JOB_ID, department=dept, flavor=flavor, tier=job.tier, pods=job.pods, gpus_per_pod=job.gpus_per_pod,
        urgency=job.urgency, user_tier=job.user_tier, user=user, submitted_at=snapshot.now,
        deadline=job.deadline.timestamp() if job.deadline else None, max_runtime_s=ctx.wall_seconds(job.max_runtime_s),
        bid=job.bid or 0, hold=hold, predicted_runtime_s=ctx.predicted_wall(QUOTE_JOB_ID),
        cluster_selector=label_pairs(job.cluster_selector), cluster_preference=label_pairs(job.cluster_preference),
    )
    started = time.perf_counter()
    result = core.schedule(replace(snapshot, pending=(*snapshot.pending, pending)))
    elapsed_ms = round((time.perf_counter() - started) * 1000, 1)
    admission = next((a for a in result.admissions if a.job_id == QUOTE_JOB_ID), None)
    after = " once a department admin approves it" if approval else ""
    if admission is not None:
        return {"estimated_start": from_epoch(snapshot.now), "starts_now": True, "code": "admitted",
                "message": "It would start at the next admission cycle" + after + ".",
                "borrowed": admission.borrowed, "price": admission.price, "nodes": list(admission.placement),
                "skipped": False, "elapsed_ms": elapsed_ms}
    why = next((r for r in result.pending if r.job_id == QUOTE_JOB_ID), None)
    code = why.code if why else reasons.QUEUED
    estimate = from_epoch(why.estimated_start) if why and why.estimated_start is not None else None
    return {"estimated_start": estimate, "starts_now": False, "code": code,
            "message": (why.message if why else reasons.CODES[code]) + (f" (and{after})" if after else ""),
            "borrowed": False, "price": None, "skipped": False, "elapsed_ms": elapsed_ms}
