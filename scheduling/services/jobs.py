"""Job use cases: submit, cancel, and the compare-and-set transition every state change goes through."""

from __future__ import annotations

import hashlib
import json
import logging
import re
from collections.abc import Iterable
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from engine import reasons
from portal import dispatch
from portal.db import insert_later, retry_on_conflict, update_each
from portal.errors import Forbidden, IdempotencyKeyReused, InvalidTransition, LimitReached, ValidationFailed
from portal.models import Membership
from portal.tenancy import can_manage_job, member
from quotas import budgets, policy_cache
from quotas import selectors as quota_selectors
from quotas.models import Flavor, QuotaResource
from scheduling.backends import creates_pods_at_admission
from scheduling.models import TRANSITIONS, Cluster, FailurePolicy, Job, JobEvent, JobRole, JobState, Node
from scheduling.models.jobs import JobKind
from scheduling.services import dependencies, notify, run_cache
from scheduling.services.approvers import deciders
from workloads.services import secrets as workload_secrets
from workloads.services.requests import validate_job_workload
from workloads.services.resolve import create_checkpoint_dirs

log = logging.getLogger(__name__)


# A pod's deterministic name: job-<id>-a<attempt>-<index>, the index counted role by role.
POD_NAME_RE = re.compile(r"^job-\d+-a\d+-(\d+)$")


def with_pod_role(job: Job, data: dict | None) -> dict | None:
    """``data`` of an event about one pod of a job of several roles, with that pod's ``role`` added (from its
    ``index``, or the index its name ends with, against the roles' pod counts in order), so the timeline says
    which role it concerns and filters by it. Other events, and a job of one role's, are left as they are."""
    if not data or data.get("role") or job.role_count < 2:
        return data
    index = data.get("index")
    if not isinstance(index, int):
        m = POD_NAME_RE.match(str(data.get("pod", "")))
        index = int(m.group(1)) if m else None
    if index is None:
        return data
    at = 0
    for name, pods in job.roles.order_by("index").values_list("name", "pods"):
        if index < at + pods:
            return {**data, "role": name}
        at += pods
    return data


def record_event(*, job: Job, kind: str, **details: Any) -> JobEvent:
    """Append one event to the job's timeline; ``details`` are ``new_event``'s."""
    if details.get("data"):
        details["data"] = with_pod_role(job, details["data"])
    event = new_event(job=job, kind=kind, **details)
    if not insert_later(event):  # inside ``portal.db.inserted_together``: at its end
        event.save(force_insert=True)
    return event


def new_event(
    *,
    job: Job,
    kind: str,
    message: str = "",
    reason_code: str = "",
    from_state: str = "",
    to_state: str = "",
    data: dict | None = None,
    actor=None,
    at: datetime | None = None,
    attempt: int | None = None,
) -> JobEvent:
    """An unsaved JobEvent (``record_event`` saves one; a batch of submissions inserts many at once)."""
    return JobEvent(
        job=job,
        kind=kind,
        message=message[:500],
        reason_code=reason_code,
        from_state=from_state,
        to_state=to_state,
        data=data or {},
        actor=actor,
        at=at or timezone.now(),
        attempt=attempt if attempt is not None else job.attempt,
    )


def transition(
    *,
    job: Job,
    to: str,
    allowed_from: Iterable[str] | None = None,
    reason_code: str = "",
    message: str = "",
    actor=None,
    data: dict | None = None,
    attempt: int | None = None,
    **fields: Any,
) -> bool:
    """Move ``job`` to state ``to`` with a compare-and-set UPDATE ... WHERE state IN (allowed).

    Returns False (and changes nothing) when the job is no longer in an allowed state, or its attempt moved
    on: the caller lost a race and must not act on the job. On success updates the in-memory object and
    appends a JobEvent.
    """
    sources = [s for s, targets in TRANSITIONS.items() if to in targets]
    if allowed_from is not None:
        sources = [s for s in sources if s in set(allowed_from)]
    filters: dict[str, Any] = {"pk": job.pk, "state__in": sources}
    if attempt is not None:
        filters["attempt"] = attempt
    now = timezone.now()
    values = {"state": to, "updated_at": now, **fields}
    if reason_code or message or "reason_code" not in fields:
        values.setdefault("reason_code", reason_code)
        values.setdefault("reason_message", message[:300])
    # No savepoint of its own: nothing here is worth rolling back alone, and inside the cycle's or a finish's
    # transaction a savepoint per job cost two round trips. An error still aborts the enclosing transaction.
    with transaction.atomic(savepoint=False):
        if len(sources) == 1:  # the compare-and-set itself proves the state it replaced
            previous = sources[0]
        else:  # lock the row so the state recorded as from_state is the one the compare-and-set replaced
            # FOR NO KEY UPDATE: it still serialises writers of the row, but not the inserts of rows that
            # reference the job (events, ledger entries), which only need the key to stay.
            previous = Job.objects.select_for_update(no_key=True).filter(pk=job.pk).values_list("state", flat=True).first()
        if not Job.objects.filter(**filters).update(**values):
            return False
        _transitioned(job, values, previous=previous or "", to=to, reason_code=reason_code, message=message,
                      actor=actor, data=data, at=now)
    return True


def transition_each(moves: list[tuple[Job, dict[str, Any], str, dict]], *, to: str, from_state: str,
                    reason_code: str, **same: Any) -> list[Job]:
    """``transition`` for many jobs at once, from one state: one compare-and-set UPDATE for all of them (each
    row changes only while it is still in ``from_state`` in the attempt it was read in), then each moved job's
    event and notification as ``transition`` records them. ``moves``: (job, its own field values, its message,
    its event's data), every job with the same field names; ``same``: values for every job. Answers the jobs
    moved, in the order given. An UPDATE per job cost a round trip and a compiled query each."""
    if not moves:
        return []
    now = timezone.now()
    same = {"state": to, "updated_at": now, "reason_code": reason_code, **same}
    names = list(moves[0][1])
    rows = [{"pk": job.pk, "attempt": job.attempt, "reason_message": message[:300],
             **dict(_column(name, own[name]) for name in names)} for job, own, message, _data in moves]
    done = set(update_each(Job, rows, fields=["reason_message", *(_column(n, None)[0] for n in names)],
                           same=same, where={"state": from_state}, where_each=("attempt",)))
    moved = []
    for job, own, message, data in moves:
        if job.pk in done:
            _transitioned(job, {**same, "reason_message": message[:300], **own}, previous=from_state, to=to,
                          reason_code=reason_code, message=message, actor=None, data=data, at=now)
            moved.append(job)
    return moved


def _column(name: str, value: Any) -> tuple[str, Any]:
    """A field's column name and value for a row of ``update_each``: a relation by its key."""
    field = Job._meta.get_field(name)
    if field.is_relation:
        return field.attname, getattr(value, "pk", value)
    return name, value


def _transitioned(job: Job, values: dict[str, Any], *, previous: str, to: str, reason_code: str, message: str,
                  actor, data: dict | None, at: datetime) -> None:
    """What a transition that happened leaves: the job in memory as written, its event, its notification."""
    for k, v in values.items():
        setattr(job, k, v)
    record_event(job=job, kind="transition", from_state=previous, to_state=to, reason_code=reason_code,
                 message=message, actor=actor, data=data, at=at)
    notify.job_transitioned(job=job, to=to, reason_code=reason_code, message=message)


def request_hash(data: dict) -> str:
    return hashlib.sha256(json.dumps(_hashed(data), sort_keys=True, default=str).encode()).hexdigest()


def _hashed(data: dict) -> dict:
    """``data`` as the stored hashes read it: the per-pod count under its first key, ``gpus``, so a retry of a
    request made before the code named it ``gpus_per_pod`` still matches its job."""
    if isinstance(data.get("jobs"), list):
        return {**data, "jobs": [_hashed(item) for item in data["jobs"]]}
    if "gpus_per_pod" not in data:
        return data
    out = {k: v for k, v in data.items() if k != "gpus_per_pod"}
    out["gpus"] = data["gpus_per_pod"]
    return out


def budget_admitted(job: Job, *, speedup: float = 1.0) -> None:
    """Place the admitted job's hold (budgets decide how much) and put what happened on its timeline. Inside
    the admitting transaction. ``speedup``: the job's cluster's seconds of job time per wall second, so the
    attempt is settled by the time the job ran (the simulated cluster's in the demo), not the wall's."""
    _record_budget_note(job, budgets.on_job_admitted(job=job, speedup=speedup))


def budget_attempt_ended(*, job: Job, attempt: int, outcome: str, preempted_by_portal: bool = False) -> None:
    """Settle the hold of an attempt that ended (budgets decide the charge and refund) and put what happened
    on the job's timeline. Inside the transaction that ends the attempt. ``preempted_by_portal``: the attempt
    is a victim of one of the portal's own preemptions (budgets refund by it and never read a victim)."""
    _record_budget_note(job, budgets.on_attempt_ended(job=job, attempt=attempt, outcome=outcome,
                                                      preempted_by_portal=preempted_by_portal))


def _record_budget_note(job: Job, note: budgets.BudgetNote | None) -> None:
    if note is not None:
        record_event(job=job, kind="budget", reason_code=note.reason_code, message=note.message,
                     data=note.data, attempt=note.attempt)


def job_submit(*, user, data: dict, idempotency_key: str | None = None) -> tuple[Job, bool]:
    """Create a job for ``user`` in their department. ``data`` is validated input (see JobSubmitSerializer).

    Returns (job, created). With an ``idempotency_key`` a retry of the same request returns the same job;
    the same key with a different body raises IdempotencyKeyReused. Pods are created after commit.
    """
    membership = member(user)
    digest = request_hash(data)
    # No look-up of the idempotency key first: the unique (owner, idempotency_key) constraint decides, and a
    # retry (rare) pays for the rolled-back insert instead of every first submission paying for a SELECT.
    try:
        with policy_cache.pinned(), transaction.atomic():
            [job] = create_jobs(user=user, membership=membership, items=[data],
                                 keys=[idempotency_key or None], digest=digest)
    except IntegrityError:
        # Two identical requests raced on the unique (owner, idempotency_key): the loser replays the winner.
        if not idempotency_key:
            raise
        existing = Job.objects.get(owner=user, idempotency_key=idempotency_key)
        return _replay(existing, digest), False
    except LimitReached:  # a retry of a submission that was accepted is a replay, whatever the limit says now
        existing = Job.objects.filter(owner=user, idempotency_key=idempotency_key).first() if idempotency_key \
            else None
        if existing is None:
            raise
        return _replay(existing, digest), False
    return job, True


def job_submit_batch(*, user, items: list[dict], idempotency_key: str | None = None) -> tuple[list[Job], bool]:
    """Create several jobs for ``user`` at once: all or none, in one transaction, in the order given.

    Every job follows ``job_submit``'s rules (department and user tier from the membership, approval rules,
    the submission event, pod creation after commit); only the inserts are batched. ``items`` are validated
    inputs (see JobBatchSubmitSerializer). Returns (jobs, created). With an ``idempotency_key`` a retry of
    the same batch returns the same jobs; the same key with a different batch raises IdempotencyKeyReused.
    The key is the batch's own: a single submission with the same key is another request.
    """
    membership = member(user)
    if not items:
        return [], True
    digest = request_hash({"jobs": items})  # every job of the batch stores the whole batch's hash
    keys = [batch_item_key(idempotency_key, i) for i in range(len(items))] if idempotency_key else [None] * len(
        items)
    try:
        with policy_cache.pinned(), transaction.atomic():
            jobs = create_jobs(user=user, membership=membership, items=items, keys=keys, digest=digest, batch=True)
    except (IntegrityError, LimitReached):  # a race on the keys, or a retry refused by a limit: a replay?
        if not idempotency_key:
            raise
        found = {j.idempotency_key: j for j in Job.objects.filter(owner=user, idempotency_key__in=keys)}
        if not found:
            raise
        if len(found) != len(keys) or any(j.request_hash != digest for j in found.values()):
            raise IdempotencyKeyReused(
                "This Idempotency-Key was already used with a different batch.",
                detail={"job_ids": sorted(j.pk for j in found.values())})
        return [found[k] for k in keys], False
    return jobs, True


def batch_item_key(idempotency_key: str, index: int) -> str:
    """The stored key of a batch's ``index``-th job: fits the column whatever the key's length, and never
    equals a key a client would send to the single-job endpoint."""
    return f"batch:{hashlib.sha256(idempotency_key.encode()).hexdigest()[:40]}:{index}"


def _workload(department_id: int, fields: dict, index: int | None) -> dict:
    """The job's mounts, checkpoint and /dev/shm as checked against its department's data sources; errors
    of a batch's item are keyed by its position (``jobs.3.mounts``), as the serializer keys its own."""
    try:
        return validate_job_workload(department_id=department_id, mounts=fields.get("mounts") or [],
                                     checkpoint=fields.get("checkpoint"), shm_mb=fields.get("shm_mb"),
                                     memory_mib=fields.get("memory_mib", 16384))
    except ValidationFailed as exc:
        if index is not None:
            exc.fields = {f"jobs.{index}.{name}": errs for name, errs in exc.fields.items()}
        raise


def _preemptibility(job: Job, index: int | None, seen: dict) -> None:
    """The job's own preemptibility and its price surcharge, as its department's limits allow (a field error on
    ``preemptible``, keyed by a batch item's position like the serializer's, when they refuse it)."""
    try:
        terms = budgets.preemption_terms(department_id=job.department_id, tier=job.tier, user_tier=job.user_tier,
                                         session=job.kind == JobKind.SESSION, asked=job.preemptible,
                                         max_runtime_s=job.max_runtime_s, notice_s=job.notice_s, seen=seen)
    except ValidationFailed as exc:
        if index is not None:
            exc.fields = {f"jobs.{index}.{name}": errs for name, errs in exc.fields.items()}
        raise
    job.preemptible, job.price_surcharge_pct, job.notice_s = terms.preemptible, terms.surcharge_pct, terms.notice_s


def create_jobs(*, user, membership: Membership, items: list[dict], keys: list[str | None],
                 digest: str, batch: bool = False) -> list[Job]:
    """The one place a submission becomes rows: jobs, their first event, pod creation after commit.

    Must run inside a transaction. The approval inputs are read once for all ``items`` (one submitter); each
    job is checked on its own, so a job of a batch is treated exactly as if it were submitted alone.
    """
    if membership.department.archived_at is not None:  # kept for its history, closed to new work
        raise Forbidden(f"Department {membership.department.slug} is archived: it takes no new jobs.")
    _check_secrets(membership=membership, items=items, batch=batch)
    _check_waiting_limit(user=user, membership=membership, adding=len(items))
    _check_ceiling(membership=membership, items=items, batch=batch)
    # What each job waits for, resolved in the submitter's department (one read for all items).
    after = dependencies.resolve_after(department_id=membership.department_id, items=items, batch=batch)
    inputs = budgets.submission_check_inputs(department_id=membership.department_id, owner_id=user.pk)
    now = timezone.now()
    jobs: list[Job] = []
    events: list[JobEvent] = []
    who: tuple[str, list[int]] | None = None
    limits_seen: dict = {}  # the preemption limits, read once per (department, tier) for the whole submission
    for index, (data, key) in enumerate(zip(items, keys, strict=True)):
        fields = {k: v for k, v in data.items() if k not in ("flavor", "after", "roles")}
        if data.get("roles"):
            fields["role_count"] = len(data["roles"])
        fields.update(_workload(membership.department_id, fields, index if batch else None))
        job = Job(
            owner=user,
            department=membership.department,
            team_id=membership.team_id,  # its team as submitted: it keeps it if its owner changes team
            user_tier=membership.user_tier,
            flavor=data["flavor"],
            idempotency_key=key,
            request_hash=digest,
            state=JobState.QUEUED,
            reason_code=reasons.QUEUED,
            reason_message=reasons.CODES[reasons.QUEUED],
            submitted_at=now,
            **fields,
        )
        _preemptibility(job, index if batch else None, limits_seen)
        approval = budgets.needs_approval(job=job, inputs=inputs)
        if approval:
            if who is None:  # one submitter and department: the same deciders for every job of a batch
                who = deciders(job=job)
            approval = f"{approval} (decided by {who[0]})"
            job.state = JobState.PENDING_APPROVAL
            job.reason_code = reasons.AWAITING_APPROVAL
            job.reason_message = approval[:300]
        else:
            job.queued_at = job.submitted_at
        jobs.append(job)
        events.append(new_event(
            job=job,
            kind="transition",
            to_state=job.state,
            reason_code=job.reason_code,
            message="submitted" + (f": {approval}" if approval else ""),
            actor=user,
            at=now,
        ))
    Job.objects.bulk_create(jobs)  # ids come back (RETURNING on PostgreSQL and SQLite), in order
    JobEvent.objects.bulk_create(events)
    made = {job.pk: job_roles(job, data.get("roles")) for job, data in zip(jobs, items, strict=True)}
    JobRole.objects.bulk_create([role for roles in made.values() for role in roles])
    for job in jobs:
        job.new_roles = made[job.pk]  # a new job's roles: the API renders them without a re-read
    dependencies.store_dependencies(jobs=jobs, after=after)
    create_checkpoint_dirs(jobs)
    for job, event in zip(jobs, events, strict=True):
        if job.state == JobState.QUEUED:
            enqueue_pod_creation(job)
        job.submission_event = event  # a new job's whole timeline: the API renders it without a re-read
    waiting = [job for job in jobs if job.state == JobState.PENDING_APPROVAL]
    if waiting:
        notify.approval_requested(jobs=waiting, reason_of=lambda j: j.reason_message, deciders=who[1])
    return jobs


def job_roles(job: Job, roles: list[dict] | None) -> list[JobRole]:
    """The role rows of a new job: those it was submitted with, in order, or the one role ``main`` that a job
    without roles is (its own pods and size; image and command stay the job's)."""
    if not roles:
        return [JobRole(job=job, index=0, name="main", pods=job.pods, gpus_per_pod=job.gpus_per_pod,
                        cpu_millicores=job.cpu_millicores, memory_mib=job.memory_mib, shm_mb=job.shm_mb or 0,
                        flavor=job.flavor if job.gpus_per_pod == 0 else None)]
    return [JobRole(job=job, index=i, name=r["name"], pods=r["pods"], image=r.get("image") or "",
                    command=r.get("command"), gpus_per_pod=r["gpus_per_pod"], cpu_millicores=r["cpu_millicores"],
                    memory_mib=r["memory_mib"], shm_mb=r.get("shm_mb") or 0, flavor=r.get("flavor"),
                    failure_policy=r.get("failure_policy") or FailurePolicy.RESTART_ATTEMPT)
            for i, r in enumerate(roles)]


# The jobs a member's queued-jobs limit counts: every job of theirs still waiting to start.
WAITING_STATES = (JobState.QUEUED, JobState.PENDING_APPROVAL)


def _check_waiting_limit(*, user, membership: Membership, adding: int) -> None:
    """The member's queued-jobs limit (``quotas.UserLimit.max_queued``: their own, else their department's):
    a submission that would leave more of their jobs waiting (queued or awaiting approval) is refused whole
    (429 ``limit_reached``). Submissions of one member are serialised on their membership row while it is
    counted, so two at once cannot both slip under the limit."""
    limit = quota_selectors.queued_jobs_limit(department_id=membership.department_id, user_id=user.pk)
    if limit is None:
        return
    list(Membership.objects.select_for_update().filter(pk=membership.pk).values_list("pk", flat=True))
    waiting = Job.objects.filter(owner=user, department_id=membership.department_id,
                                 state__in=WAITING_STATES).count()
    if waiting + adding > limit:
        asked = f"{adding} more" if adding > 1 else "one more"
        raise LimitReached(
            f"You have {waiting} job(s) waiting to start; {membership.department.slug} allows {limit} per member "
            f"at once, so {asked} cannot be queued. Cancel one, or submit again once some have started.",
            detail={"limit": limit, "waiting": waiting, "submitting": adding})


def _check_secrets(*, membership: Membership, items: list[dict], batch: bool) -> None:
    """The department's side of each job's ``secrets`` (the serializer checked their shape): each names a
    secret of the submitter's department and one of its keys. A 400 on ``secrets`` (``jobs.<i>.secrets``)."""
    fields = {}
    for i, data in enumerate(items):
        problems = workload_secrets.check_job_uses(department_id=membership.department_id,
                                                   uses=data.get("secrets") or [], env=data.get("env") or {})
        if problems:
            fields[f"jobs.{i}.secrets" if batch else "secrets"] = [
                {"code": "invalid_secret", "message": p} for p in problems]
    if fields:
        raise ValidationFailed(fields=fields)


def _check_ceiling(*, membership: Membership, items: list[dict], batch: bool) -> None:
    """Each job's whole gang against the most its department could ever hold of the flavor (nominal +
    borrowing limit, ``quota_selectors.gpu_ceiling``): a job above it would wait for ever (the engine's
    ``never``), so it is refused now with a 400 on ``pods`` (``jobs.<i>.pods``)."""
    fields = {}
    ceilings: dict[int, int | None] = {}
    for i, data in enumerate(items):
        flavor = data["flavor"]
        if flavor.pk not in ceilings:
            ceilings[flavor.pk] = quota_selectors.gpu_ceiling(department_id=membership.department_id,
                                                              flavor_id=flavor.pk)
        ceiling = ceilings[flavor.pk]
        milli = data.get("share_milli") or 0  # a fraction counts its share of a GPU per pod
        total = data.get("pods", 1) * (milli / 1000 if milli else data["gpus_per_pod"])
        cores = cpu_over_ceiling(membership, data)
        if cores:
            fields[f"jobs.{i}.roles" if batch and data.get("roles") else f"jobs.{i}.cpu" if batch
                   else "roles" if data.get("roles") else "cpu"] = [{"code": "exceeds_quota_ceiling", "message": cores}]
        if ceiling is not None and total > ceiling:
            fields[f"jobs.{i}.pods" if batch else "pods"] = [{"code": "exceeds_quota_ceiling", "message": (
                f"{total:g} GPUs of {flavor.name!r} exceed what department {membership.department.slug} could ever "
                f"hold: {ceiling} (its nominal quota plus its borrowing limit). Ask a department admin for a "
                "quota change, or submit a smaller job.")}]
    if fields:
        raise ValidationFailed(fields=fields)


def cpu_over_ceiling(membership: Membership, data: dict) -> str | None:
    """Why a job's CPU work (its roles without GPUs, their cores added up per CPU pool) exceeds what its
    department could ever hold there (nominal + borrowing limit in cores), or None."""
    roles = data.get("roles") or ([{"pods": data.get("pods", 1), "cpu_millicores": data.get("cpu_millicores", 4000),
                                    "flavor": data["flavor"], "gpus_per_pod": 0}]
                                  if data["flavor"].is_cpu else [])
    asked: dict = {}
    for r in roles:
        if r["gpus_per_pod"] == 0 and r.get("flavor") is not None:
            asked[r["flavor"]] = asked.get(r["flavor"], 0) + r["pods"] * r["cpu_millicores"]
    for flavor, milli in sorted(asked.items(), key=lambda kv: kv[0].name):
        ceiling = quota_selectors.gpu_ceiling(department_id=membership.department_id, flavor_id=flavor.pk,
                                              resource=QuotaResource.CPU)
        if ceiling is not None and milli > ceiling * 1000:
            return (f"{milli / 1000:g} cores of {flavor.name!r} exceed what department {membership.department.slug} "
                    f"could ever hold: {ceiling} cores (its nominal quota plus its borrowing limit).")
    return None


def _replay(existing: Job, digest: str) -> Job:
    if existing.request_hash != digest:
        raise IdempotencyKeyReused(detail={"job_id": existing.pk})
    return existing


def pods_at_submission() -> bool:
    """Whether a queued job's gated pods are made before its admission: only with a single cluster whose
    backend does so (the simulated one). The Kubernetes backend creates them at admission (a gated pod counts
    against its namespace's ResourceQuota), and with several clusters a queued job is bound to none yet: its
    pods are made on the cluster its admission chooses, never anywhere before."""
    rows = run_cache.cached("first_two_clusters", lambda: list(Cluster.objects.order_by("pk")[:2]))
    if len(rows) > 1:
        return False
    return not creates_pods_at_admission(rows[0] if rows else "default")


def enqueue_pod_creation(job: Job) -> None:
    """Queue the creation of the job's gated pods where they are made while it is queued. The task itself
    checks ``pods_at_submission()`` (a submission reads no cluster row); with the Kubernetes default cluster
    of ``SCHEDULING_BACKEND`` no message is sent at all."""
    if settings.SCHEDULING_BACKEND == "kubernetes":
        return
    job_id, attempt = job.pk, job.attempt
    # The job is committed and accepted whatever the broker does (``send`` logs an unreachable broker), and
    # the reconciler creates the pods of every queued job that has none. One message per transaction: a batch
    # of fifty jobs publishes once, not fifty times, and the worker handles them in one run.
    dispatch.after_commit_batched("scheduling.pods.create_many", [job_id, attempt])


def job_cancel(*, user, job: Job, comment: str = "", by_platform: bool = False) -> Job:
    """Cancel a job; idempotent (cancelling a cancelled job returns it unchanged). Finished jobs refuse.

    ``by_platform``: the platform itself cancels (archiving a department from a lab file, with no user
    behind it): no permission check, and the timeline records no actor."""
    if not by_platform and not can_manage_job(user, job):
        raise Forbidden("Only the job's owner or a department admin can cancel it.")
    if job.state == JobState.CANCELLED:
        return job
    if job.state in (JobState.SUCCEEDED, JobState.FAILED):
        raise InvalidTransition(f"The job already {job.state}; there is nothing to cancel.")
    attempt, had_pods = job.attempt, job.state != JobState.PENDING_APPROVAL

    def run() -> Job:
        with transaction.atomic():  # the state change and the hold's release commit together
            # The wallet before the job: the one lock order (see lock_department_wallets).
            budgets.lock_department_wallets([job.department_id])
            return cancel_locked(user=user, job=job, comment=comment, attempt=attempt, had_pods=had_pods)

    return retry_on_conflict(run, what=f"cancel of job {job.pk}")


def job_stop(*, job: Job, comment: str) -> Job:
    """Cancel a job on the platform's behalf (a policy, not a person: no actor, no permission check), e.g. the
    idle-GPU policy. The caller audits why."""
    if job.state in (JobState.CANCELLED, JobState.SUCCEEDED, JobState.FAILED):
        return job
    attempt, had_pods = job.attempt, job.state != JobState.PENDING_APPROVAL

    def run() -> Job:
        with transaction.atomic():
            budgets.lock_department_wallets([job.department_id])
            return cancel_locked(user=None, job=job, comment=comment, attempt=attempt, had_pods=had_pods)

    return retry_on_conflict(run, what=f"stop of job {job.pk}")


def end_unsatisfiable(*, job: Job, message: str, detail: dict) -> int:
    """End a queued job whose dependency can never be met (the engine said so): cancelled, with the reason on
    its timeline and a notification to its owner. Inside the cycle's transaction, its wallet and row locked.
    Returns 1 when it ended, 0 when it had moved meanwhile."""
    if not Job.objects.filter(pk=job.pk, state=JobState.QUEUED, attempt=job.attempt).exists():
        return 0
    cancel_locked(user=None, job=job, comment=message, attempt=job.attempt, had_pods=True,
                  reason_code=reasons.DEPENDENCY_NEVER_SATISFIED, data={"detail": detail})
    notify.dependency_never_satisfied(job=job, message=message, detail=detail)
    return 1


def cancel_locked(*, user, job: Job, comment: str, attempt: int, had_pods: bool, reason_code: str = "cancelled",
                  data: dict | None = None) -> Job:
    """Cancel ``job`` (its ``attempt``) inside the caller's transaction, its department's wallet locked first
    (the one lock order): the transition, its pods deleted after commit when it ``had_pods``, the attempt's
    budget settled. Cancelling a job already cancelled returns it; any other state refuses."""
    ok = transition(
        job=job,
        to=JobState.CANCELLED,
        reason_code=reason_code,
        data=data,
        message=comment or f"cancelled by {user.get_username() if user else 'the platform'}",
        actor=user,
        finished_at=timezone.now(),
    )
    if not ok:
        job.refresh_from_db()
        if job.state == JobState.CANCELLED:
            return job
        raise InvalidTransition(f"The job is {job.state} and can no longer be cancelled.")
    if had_pods:  # on the cluster the attempt is bound to (None: a queued job's pods, on the default cluster)
        cluster = job.cluster if job.cluster_id else None
        dispatch.after_commit("scheduling.pods.delete", job.pk, attempt, namespace_for(job.department.slug, cluster),
                              cluster.name if cluster else None)
    budget_attempt_ended(job=job, attempt=attempt, outcome="cancelled")
    return job


def attempt_cluster(job: Job, attempt: int) -> Cluster | None:
    """The cluster one attempt of the job was bound to: the job's own while that attempt is current, else the
    one its admission recorded on the timeline (None: never admitted, or admitted before clusters were
    recorded: the default cluster)."""
    if job.attempt == attempt and job.cluster_id:
        return job.cluster
    data = (JobEvent.objects.filter(job=job, attempt=attempt, kind="transition", to_state=JobState.ADMITTED)
            .order_by("-at", "-id").values_list("data", flat=True).first()) or {}
    name = data.get("cluster")
    return Cluster.objects.filter(name=name).first() if name else None


def namespace_for(department_slug: str, cluster: Cluster | None = None) -> str:
    """The department's namespace on ``cluster``: the cluster's own template, else KUBE_NAMESPACE_TEMPLATE."""
    template = (cluster.namespace_template if cluster is not None else "") or settings.KUBE_NAMESPACE_TEMPLATE
    return template.format(department=department_slug)


def largest_node_gpus(*, flavor: Flavor) -> int | None:
    """GPUs of the largest node offering ``flavor`` (None when no node offers it)."""
    return Node.objects.filter(flavor=flavor).aggregate(m=Max("gpus"))["m"]
