"""Submission checks: whether a submission must wait for a department admin before it is queued.

One of three things called "approval" in the portal, each named for what it is: this module checks a submission
against its department's ``ApprovalRule`` and its owner's allowance; deciding on a job that waits is scheduling's
(``scheduling.services.job_approvals``); deciding on a quota change request is ``quotas.services.quota_requests``.

Invariants:

* A job waits when its department's ``ApprovalRule`` says so (realtime, more GPUs, or a quote above a
  threshold) or when its quote would take its owner past their allowance.
* A batch of jobs by one submitter reads the rule and the allowance once (``submission_check_inputs``); every job the
  check lets through is added to what the allowance has committed, so the next job of the batch counts it,
  exactly as if the jobs had been submitted one by one.
* Deciding on a waiting job (approve, reject) is a transition of the job: it lives in scheduling's services
  (``job_approvals``), which ask this module nothing more.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import Subquery
from django.utils import timezone

from engine import tiers
from notifications.services import emit
from portal.models import Department
from portal.money import format_credits
from quotas import policy_cache
from quotas.models import Allowance, ApprovalRule
from quotas.services.allowances import allowance_used, period_start
from quotas.services.pricing import estimated_cost


@dataclass
class SubmissionCheckInputs:
    """What ``needs_approval`` reads about a submitter: the department's rule, the user's allowance and
    what that allowance already has committed. A batch of jobs by one user reads them once; every job the
    check lets through directly is added to ``used``, so the next job of the batch counts it too."""

    rule: ApprovalRule | None
    allowance: Allowance | None
    used: int = 0


def submission_check_inputs(*, department_id, owner_id) -> SubmissionCheckInputs:
    rule, allowance = policy_cache.cached("rule and allowance", (department_id, owner_id),
                                          lambda: _rule_and_allowance(department_id=department_id, owner_id=owner_id))
    used = allowance_used(allowance=allowance) if allowance is not None else 0
    return SubmissionCheckInputs(rule=rule, allowance=allowance, used=used)


def _rule_and_allowance(*, department_id, owner_id) -> tuple[ApprovalRule | None, Allowance | None]:
    """The department's approval rule and whether the owner has an allowance in one query (every submission
    reads both): the rule joined to its department, the allowance's id as a subquery. The allowance itself is
    read only when there is one (its user's submission then reads what it has committed too). Each subquery
    costs about as much CPU to build as a query of its own, so there is one, not one per column."""
    mine = Allowance.objects.filter(user_id=owner_id or 0).order_by().values("pk")[:1]
    dept = (Department.objects.filter(pk=department_id).select_related("approval_rule")
            .annotate(allowance_pk=Subquery(mine)).first())
    if dept is None:
        return None, None
    rule = getattr(dept, "approval_rule", None)  # a missing reverse one-to-one raises an AttributeError
    allowance = None
    if owner_id and dept.allowance_pk is not None:
        allowance = Allowance.objects.filter(pk=dept.allowance_pk).first()
    return rule, allowance


def needs_approval(*, job, inputs: SubmissionCheckInputs | None = None) -> str | None:
    """Why ``job`` must wait for a department admin's approval, or None to queue it directly (then the job's
    estimated cost counts against the owner's allowance in ``inputs`` from now on).

    ``inputs`` is ``submission_check_inputs(...)`` for the job's department and owner, read here when not given."""
    if inputs is None:
        inputs = submission_check_inputs(department_id=job.department_id, owner_id=job.owner_id)
    rule, allowance = inputs.rule, inputs.allowance
    if rule is None and allowance is None:
        return None
    why: list[str] = []
    gpus = job.total_gpus
    cost = None
    if rule is not None:
        if rule.realtime and tiers.is_realtime(job.tier):
            why.append("realtime jobs need approval")
        if rule.gpus_above is not None and gpus > rule.gpus_above:
            why.append(f"{gpus} GPUs > {rule.gpus_above}")
        if rule.cost_above is not None:
            cost = estimated_cost(job=job)
            if cost > rule.cost_above:
                why.append(f"estimated cost {format_credits(cost)} > {format_credits(rule.cost_above)}")
    if allowance is not None:
        cost = estimated_cost(job=job) if cost is None else cost
        if inputs.used + cost > allowance.limit:
            why.append(f"exceeds {job.owner.get_username()}'s {allowance.period} allowance "
                       f"({format_credits(inputs.used)} + {format_credits(cost)} > {format_credits(allowance.limit)})")
            _allowance_exhausted(job=job, allowance=allowance, used=inputs.used, cost=cost)
        elif not why:
            inputs.used += cost
    return ("Needs a department admin's approval: " + "; ".join(why)) if why else None


def _allowance_exhausted(*, job, allowance: Allowance, used: int, cost: int) -> None:
    """Tell the user and their department's admins, once per allowance period, that the allowance no longer
    covers their jobs (inside the submission's transaction: a refused submission tells nobody)."""
    start = period_start(period=allowance.period, at=timezone.now())
    emit(kind="allowance.exhausted", department_id=job.department_id, users=[job.owner_id], admins=True,
         data={"user": job.owner.get_username(), "used": used, "cost": cost, "limit": allowance.limit,
               "period": allowance.period, "job_name": job.name},
         dedupe_key=f"allowance.exhausted:{allowance.user_id}:{start.date().isoformat()}")
