"""Sweeps: job arrays (submit N tasks at once, cancel them together) and holding a waiting job in the queue.

An array is one submission: every task is a Job with its ``array`` and ``array_index``, made by the same code
as any submission (``jobs.create_jobs``: department, approvals, timeline, pods after commit), with
``{{index}}`` and ``{{count}}`` filled into its command and env (``engine.arrayspec``). The engine
keeps at most the array's throttle of its tasks admitted at once (``engine.sweeps``).

Holding keeps a waiting job's submission time (so its place) but the engine never admits it (reason
``held``); releasing puts it back. Both are compare-and-set updates recorded on the job's timeline.
"""

from __future__ import annotations

from django.db import IntegrityError, transaction
from django.db.models import Count
from django.utils import timezone

from engine import arrayspec, reasons
from portal.db import retry_on_conflict
from portal.errors import Forbidden, IdempotencyKeyReused, InvalidTransition
from portal.tenancy import can_manage_job, member, permits
from quotas import budgets
from scheduling.models import FINAL_STATES, Job, JobArray, JobEvent, JobState
from scheduling.services.jobs import cancel_locked, create_jobs, request_hash

HOLDABLE = (JobState.PENDING_APPROVAL, JobState.QUEUED)


def task_fields(data: dict, *, index: int, count: int) -> dict:
    """One task's submission: the array's, with its placeholders filled for ``index``."""
    item = dict(data)
    item["command"] = [arrayspec.substitute(part, index=index, count=count) for part in data["command"]]
    item["env"] = {k: arrayspec.substitute(v, index=index, count=count) for k, v in (data.get("env") or {}).items()}
    if data.get("roles"):  # every task has the array's roles, each role's own command filled as the job's
        item["roles"] = [{**r, "command": [arrayspec.substitute(part, index=index, count=count) for part in r["command"]]}
                         if r.get("command") else dict(r) for r in data["roles"]]
    return item


def array_submit(*, user, data: dict, spec: arrayspec.ArraySpec, indices: str,
                 idempotency_key: str | None = None) -> tuple[JobArray, bool]:
    """Submit an array of ``spec.count`` tasks for ``user``: all or none, in one transaction. ``data`` is a
    validated job body (its ``after``, if any, applies to every task); ``indices`` the array as written.

    Returns (array, created). With an ``idempotency_key`` a retry of the same request returns the same array;
    the same key with another body raises IdempotencyKeyReused."""
    membership = member(user)
    digest = request_hash({**data, "array": indices})
    try:
        with transaction.atomic():
            array = JobArray.objects.create(
                owner=user, department=membership.department, name=data["name"], indices=indices,
                size=spec.count, throttle=spec.throttle, idempotency_key=idempotency_key or None,
                request_hash=digest)
            items = [{**task_fields(data, index=i, count=spec.count), "array": array, "array_index": i}
                     for i in spec.indices]
            create_jobs(user=user, membership=membership, items=items, keys=[None] * len(items), digest=digest)
    except IntegrityError:
        if not idempotency_key:
            raise
        existing = JobArray.objects.get(owner=user, idempotency_key=idempotency_key)
        if existing.request_hash != digest:
            raise IdempotencyKeyReused(detail={"array_id": existing.pk}) from None
        return existing, False
    return array, True


def array_counts(array_ids: list[int]) -> dict[int, dict[str, int]]:
    """Tasks per state of each array (one query)."""
    out: dict[int, dict[str, int]] = {pk: dict.fromkeys(JobState.values, 0) for pk in array_ids}
    for array_id, state, n in (Job.objects.filter(array_id__in=array_ids).values_list("array_id", "state")
                               .annotate(n=Count("id")).order_by()):
        out[array_id][state] = n
    return out


def array_cancel(*, user, array: JobArray, waiting_only: bool = False, comment: str = "") -> int:
    """Cancel the array's tasks that have not ended (``waiting_only``: only those not started yet), in one
    transaction; returns how many were cancelled. The array's owner or a department admin."""
    if not permits(user, array, "change"):
        raise Forbidden("Only the array's owner or a department admin can cancel it.")
    states = (JobState.PENDING_APPROVAL, JobState.QUEUED, JobState.PREEMPTED) if waiting_only else [
        s for s in JobState.values if s not in FINAL_STATES]
    note = comment or f"array {array.pk} cancelled by {user.get_username()}"

    def run() -> int:
        with transaction.atomic():
            budgets.lock_department_wallets([array.department_id])  # the wallet before the jobs: the lock order
            tasks = list(Job.objects.select_for_update(no_key=True, of=("self",)).filter(array=array, state__in=states)
                         .select_related("department", "cluster", "owner").order_by("pk"))
            for job in tasks:
                cancel_locked(user=user, job=job, comment=note, attempt=job.attempt,
                              had_pods=job.state != JobState.PENDING_APPROVAL)
            return len(tasks)

    return retry_on_conflict(run, what=f"cancel of array {array.pk}")


def job_hold(*, user, job: Job) -> Job:
    """Hold a waiting job: it keeps its place (submission time) but is not admitted until released.
    Idempotent; a job that started or ended refuses."""
    if not can_manage_job(user, job):
        raise Forbidden("Only the job's owner or a department admin can hold it.")
    now = timezone.now()
    with transaction.atomic():
        done = Job.objects.filter(pk=job.pk, state__in=HOLDABLE, held_at__isnull=True).update(held_at=now)
        job.refresh_from_db()
        if not done:
            if job.held_at is not None and job.state in HOLDABLE:
                return job
            raise InvalidTransition(f"The job is {job.state}: only a waiting job can be held.")
        if job.state == JobState.QUEUED:  # the engine says so from the next cycle on; the page says it now
            Job.objects.filter(pk=job.pk).update(reason_code=reasons.HELD, reason_message=reasons.CODES[reasons.HELD],
                                                 reason_detail={}, estimated_start=None)
        _event(job, user, "hold", reasons.HELD, f"held by {user.get_username()}", now)
    job.refresh_from_db()
    return job


def job_release(*, user, job: Job) -> Job:
    """Release a held job: the next cycle considers it again, in its old place. Idempotent."""
    if not can_manage_job(user, job):
        raise Forbidden("Only the job's owner or a department admin can release it.")
    now = timezone.now()
    with transaction.atomic():
        done = Job.objects.filter(pk=job.pk, held_at__isnull=False).update(held_at=None)
        if done:
            Job.objects.filter(pk=job.pk, state=JobState.QUEUED, reason_code=reasons.HELD).update(
                reason_code=reasons.QUEUED, reason_message=reasons.CODES[reasons.QUEUED])
            _event(job, user, "release", "released", f"released by {user.get_username()}", now)
    job.refresh_from_db()
    return job


def array_hold(*, user, array: JobArray, release: bool = False) -> int:
    """Hold (or release) every waiting task of the array; returns how many changed."""
    if not permits(user, array, "change"):
        raise Forbidden("Only the array's owner or a department admin can hold or release it.")
    now = timezone.now()
    with transaction.atomic():
        if release:
            tasks = list(Job.objects.filter(array=array, held_at__isnull=False).order_by("pk"))
            Job.objects.filter(pk__in=[t.pk for t in tasks]).update(held_at=None)
            Job.objects.filter(pk__in=[t.pk for t in tasks], state=JobState.QUEUED, reason_code=reasons.HELD).update(
                reason_code=reasons.QUEUED, reason_message=reasons.CODES[reasons.QUEUED])
        else:
            tasks = list(Job.objects.filter(array=array, state__in=HOLDABLE, held_at__isnull=True).order_by("pk"))
            Job.objects.filter(pk__in=[t.pk for t in tasks]).update(held_at=now)
            Job.objects.filter(pk__in=[t.pk for t in tasks], state=JobState.QUEUED).update(
                reason_code=reasons.HELD, reason_message=reasons.CODES[reasons.HELD], reason_detail={},
                estimated_start=None)
        kind, code = ("release", "released") if release else ("hold", reasons.HELD)
        JobEvent.objects.bulk_create([
            JobEvent(job=t, kind=kind, reason_code=code, attempt=t.attempt, actor=user, at=now,
                     message=f"{'released' if release else 'held'} with array {array.pk} by {user.get_username()}")
            for t in tasks])
    return len(tasks)


def _event(job: Job, user, kind: str, code: str, message: str, at) -> None:
    JobEvent.objects.create(job=job, kind=kind, reason_code=code, message=message, attempt=job.attempt, actor=user,
                            at=at)
