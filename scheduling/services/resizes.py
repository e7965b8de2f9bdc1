"""Resizable jobs in the portal's cycle: the engine's resize decisions (``engine.resize``) recorded, applied at
the job's checkpoint, and the pods added or removed (docs/workloads.md, "Resizable jobs").

A resize goes through three steps, each a compare-and-set on the job row in its attempt:

1. **Decided** (``record_decisions``, inside the cycle's apply): ``Job.resize`` holds the decision (what it
   changes, why, the clearing price of a grow, when the job's next checkpoint is due). From then on the
   snapshot shows the job at the larger of its two sizes, ``resizing``: the engine decides nothing new for it,
   and the GPUs of a grow stay held for it until the checkpoint.
2. **Applying** (``start_due``, after each cycle): the checkpoint came (the next periodic one, or the end of
   the notice a job that checkpoints on demand asked for). The pod worker adds the new pods (gated until all
   of them exist, then ungated, as every gang) or evicts the highest ranks through the Eviction API.
3. **Applied** (``finish``): every pod of the new size runs and every removed one is gone. In one
   transaction, the wallet locked before the job: the job's placement and size, its ledger (a grow held at the
   clearing price, as borrowed capacity; ``quotas.budgets.on_job_resized``) and its timeline.

A resize whose pods cannot be made (the cluster refuses them) is rolled back after ``MAX_TRIES``: the pods
already made for it are deleted (they never ran) and the job stays at its size, with an event. A shrink is
never rolled back half-way: an eviction that a PodDisruptionBudget refuses (429) is asked again, every
``RETRY_S``, never deleted around. The pods of the job's sizes in between are never both counted: the sync
reads only the pods of the size the job is at (``in_size``).
"""

from __future__ import annotations

import logging
import math
from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from engine import types as core
from portal import dispatch
from quotas import budgets
from scheduling.backends import speedup_of
from scheduling.backends.base import PodState
from scheduling.models import Job, JobState
from scheduling.services.cluster_binding import cluster_of
from scheduling.services.jobs import record_event

log = logging.getLogger(__name__)

DECIDED, APPLYING = "decided", "applying"
# An applying resize whose pods are not all there (or gone) yet is asked again after this long.
RETRY_S = 30
# Tries of a grow whose pods the cluster refuses, before it is rolled back.
MAX_TRIES = 5
ACTIVE = (JobState.ADMITTED, JobState.RUNNING)


# ------------------------------------------------------------------ what the snapshot and the sync read

def target(job: Job) -> list[str]:
    """The GPU placement the job's pending resize leads to (its placement when none)."""
    return list((job.resize or {}).get("placement") or job.placement or [])


def held_placement(job: Job) -> tuple[str, ...]:
    """The placement the engine sees: the larger of the job's two sizes while a resize is under way (a grow's
    new GPUs are held for it from the decision; a shrink's stay its own until its pods are gone)."""
    now = tuple(job.placement or ())
    if not job.resize:
        return now
    after = tuple(job.resize.get("placement") or ())
    return after if len(after) > len(now) else now


def pods_expected(job: Job) -> int:
    """The pods the job's attempt is read against: a resizable job's during a shrink being applied are those of
    its new size (the others are leaving), every other job's all of its pods."""
    if job.min_pods is None or job.role_count > 1 or not job.resize or job.resize.get("state") != APPLYING:
        return job.all_pods
    return min(job.size, len(target(job)))


def in_size(job: Job, pods: list[PodState]) -> list[PodState]:
    """The pods of a resizable job that its state is read from: those of its size now, without the new ones of
    a grow under way (gated until all exist) and the leaving ones of a shrink being applied (evicted by the
    portal itself; their end is not the job's)."""
    if job.min_pods is None or job.role_count > 1:
        return pods
    limit = pods_expected(job)
    return [p for p in pods if p.index < limit]


# ------------------------------------------------------------------ 1. decided (inside the cycle's apply)

def next_checkpoint(job: Job, now: datetime) -> datetime:
    """When the job's next checkpoint is due on the wall clock: its periodic one (counted from its start), or
    the end of a notice when it declares one (it writes a checkpoint when asked), whichever comes first."""
    speedup = speedup_of(cluster_of(job))
    start = job.started_at or job.admitted_at or now
    due = now
    if job.checkpoint_interval_s:
        every = job.checkpoint_interval_s / speedup
        k = max(1, math.ceil((now - start).total_seconds() / every))
        due = start + timedelta(seconds=k * every)
    if job.notice_s:
        due = min(due, now + timedelta(seconds=job.notice_s / speedup))
    return due


def count_from_start(*, job: Job, started_at: datetime) -> dict | None:
    """The job's pods run from ``started_at``: a resize decided before they ran waited for a checkpoint counted
    from admission, which the job never wrote (its training loop had not begun); it is due at the first
    checkpoint counted from the pods' start instead (or the end of a notice from then). The decision as it
    stands, or None when none waits."""
    with transaction.atomic():
        row = Job.objects.select_for_update(no_key=True).filter(pk=job.pk, attempt=job.attempt).first()
        rz = row.resize if row is not None else None
        if not rz or rz.get("state") != DECIDED or rz.get("answered_at"):
            return None
        job.started_at = started_at
        due = next_checkpoint(job, max(started_at, datetime.fromisoformat(rz["decided_at"])))
        rz = {**rz, "due_at": due.isoformat()}
        Job.objects.filter(pk=job.pk, attempt=job.attempt).update(resize=rz)
        job.resize = rz
        record_event(job=job, kind="resize", reason_code="resize_due", attempt=job.attempt,
                     message=f"pods running: the resize to {rz['to']} pods waits for the checkpoint due "
                             f"{due:%H:%M:%S} UTC, counted from their start", data=_event_data(rz))
    return rz


def record_decisions(resizes: tuple[core.Resize, ...], jobs: dict[int, Job], *, now: datetime,
                     policy_version: int) -> set[int]:
    """Record each resize the engine decided on its job (locked by the cycle's apply), with an event on the
    job's timeline. Skipped, as every decision of a cycle, when the job moved on since the snapshot (ended,
    requeued, another resize under way). Answers the jobs written."""
    written: set[int] = set()
    for rz in resizes:
        job = jobs.get(rz.job_id)
        if job is None or job.state not in ACTIVE or job.resize or job.min_pods is None:
            continue
        before = len(job.placement or ())
        if not job.min_pods <= rz.pods <= job.pods or rz.pods == before:
            continue
        due = next_checkpoint(job, now)
        decision = {"placement": list(rz.placement), "from": before, "to": rz.pods, "direction": rz.direction,
                    "reason": rz.reason, "for_job": rz.for_job, "price": rz.price, "decided_at": now.isoformat(),
                    "due_at": due.isoformat(), "state": DECIDED, "tries": 0, "policy_version": policy_version}
        event = record_event(job=job, kind="resize", reason_code="resize_decided", at=now,
                             message=_decided_message(job, rz, before, due), data=_event_data(decision))
        decision["id"] = event.pk
        if not Job.objects.filter(pk=job.pk, attempt=job.attempt, state__in=ACTIVE, resize__isnull=True).update(
                resize=decision, updated_at=now):
            event.delete()  # (in the cycle's transaction: the decision did not apply)
            continue
        job.resize = decision
        written.add(job.pk)
        if job.notice_s:  # it writes a checkpoint when asked: it is asked now (its size file), and may answer
            dispatch.after_commit("scheduling.pods.tell_resize", job.pk, job.attempt, event.pk)
    return written


def _decided_message(job: Job, rz: core.Resize, before: int, due: datetime) -> str:
    why = ("into GPUs no waiting job can use" if rz.reason == "idle"
           else f"to give GPUs back to job {rz.for_job}" if rz.for_job else "to give GPUs back")
    verb = "grows" if rz.pods > before else "shrinks"
    return f"{verb} from {before} to {rz.pods} pods {why}, at its checkpoint due {due:%H:%M:%S} UTC"


def _event_data(decision: dict) -> dict:
    return {k: decision[k] for k in ("from", "to", "direction", "reason", "for_job", "price", "due_at")}


def checkpoint_written(*, job_id: int, attempt: int, now: datetime | None = None) -> dict | None:
    """The job answers "checkpoint written" while a resize decided for it waits for its checkpoint: the resize
    is due now (the next cycle starts it). The decision as it stands, or None when none waits (a second answer
    finds it started already and changes nothing)."""
    now = now or timezone.now()
    with transaction.atomic():
        job = Job.objects.select_for_update(no_key=True).filter(pk=job_id, attempt=attempt,
                                                                state__in=ACTIVE).first()
        if job is None or not job.resize or job.resize.get("state") != DECIDED:
            return None
        rz = {**job.resize, "due_at": min(datetime.fromisoformat(job.resize["due_at"]), now).isoformat(),
              "answered_at": now.isoformat()}
        Job.objects.filter(pk=job_id, attempt=attempt).update(resize=rz)
        job.resize = rz
        record_event(job=job, kind="resize", reason_code="checkpoint_written", attempt=attempt, at=now,
                     message=f"answered: checkpoint written; the resize to {rz['to']} pods starts at the next cycle",
                     data=_event_data(rz))
    return rz


# ------------------------------------------------------------------ 2. applying (after each cycle)

def start_due(*, now: datetime | None = None) -> int:
    """Send the pod worker the resizes whose checkpoint has come, and again those applying whose pods were not
    all there (or gone) when last asked. One query when no resize is under way."""
    now = now or timezone.now()
    rows = list(Job.objects.filter(state__in=ACTIVE, resize__isnull=False).values_list("pk", "attempt", "resize",
                                                                                          "state"))
    sent = 0
    for pk, attempt, rz, state in rows:
        due = datetime.fromisoformat(rz["due_at"])
        tried = datetime.fromisoformat(rz["tried_at"]) if rz.get("tried_at") else None
        # (a job whose pods do not run yet has written no checkpoint: its is counted once they start)
        if rz.get("state") == DECIDED and (due > now or state == JobState.ADMITTED):
            continue
        if rz.get("state") == APPLYING and tried is not None and (now - tried).total_seconds() < RETRY_S:
            continue
        changed = {**rz, "state": APPLYING, "tried_at": now.isoformat()}
        changed.setdefault("applied_at", due.isoformat())  # its workers restart from that checkpoint
        with transaction.atomic():
            if not Job.objects.filter(pk=pk, attempt=attempt, state__in=ACTIVE, resize=rz).update(resize=changed):
                continue
            if rz.get("state") == DECIDED:
                job = Job.objects.get(pk=pk)
                record_event(job=job, kind="resize", reason_code="resize_started", at=now,
                             message=f"checkpoint reached: {'adding' if rz['to'] > rz['from'] else 'removing'} "
                                     f"pods for size {rz['to']}", data=_event_data(rz))
            dispatch.after_commit("scheduling.pods.resize", pk, attempt, rz["id"])
        sent += 1
    return sent


# ------------------------------------------------------------------ 3. applied, or rolled back

def current(job_id: int, attempt: int, resize_id: int) -> Job | None:
    """The job when this resize of this attempt is still the one applying, else None (a stale message)."""
    job = Job.objects.select_related("department", "flavor", "owner", "cluster").filter(
        pk=job_id, attempt=attempt, state__in=ACTIVE).first()
    if job is None or not job.resize or job.resize.get("id") != resize_id or job.resize.get("state") != APPLYING:
        return None
    return job


def finish(*, job_id: int, attempt: int, resize_id: int) -> bool:
    """Every pod of the new size runs and every removed one is gone: the job is at its new size, in its row,
    its ledger and its timeline, in one transaction (its department's wallet locked before the job, the
    portal's one lock order). False when the resize is no longer the one applying."""
    with transaction.atomic():
        job = Job.objects.filter(pk=job_id).values_list("department_id", flat=True).first()
        if job is None:
            return False
        budgets.lock_department_wallets([job])
        Job.objects.select_for_update(no_key=True).filter(pk=job_id).first()
        job = current(job_id, attempt, resize_id)
        if job is None:
            return False
        rz = job.resize
        at = datetime.fromisoformat(rz["applied_at"])
        before, after = len(job.placement or ()), len(rz["placement"])
        grown = after > before
        Job.objects.filter(pk=job.pk, attempt=attempt).update(
            placement=rz["placement"], current_pods=after, resize=None, updated_at=timezone.now(),
            **({"borrowed": True} if grown else {}))
        note = budgets.on_job_resized(job=job, attempt=attempt, resize_id=resize_id, pods_before=before,
                                      pods_after=after, price=rz.get("price") if grown else None, at=at)
        job.placement, job.current_pods, job.resize = rz["placement"], after, None
        why = "grown into idle GPUs" if rz["reason"] == "idle" else f"shrunk for job {rz.get('for_job')}"
        record_event(job=job, kind="resize", reason_code="resized", attempt=attempt,
                     message=f"resized from {before} to {after} pods at its checkpoint ({why})",
                     data={**_event_data(rz), "from": before, "to": after, "applied_at": rz["applied_at"]})
        if note is not None:
            record_event(job=job, kind="budget", reason_code=note.reason_code, message=note.message, data=note.data,
                         attempt=attempt)
    return True


def failed_try(*, job_id: int, attempt: int, resize_id: int, error: str) -> str:
    """The pods of the resize could not be made (or removed) this time: counted; a grow refused ``MAX_TRIES``
    times is rolled back (``roll_back``), anything else is asked again after ``RETRY_S``."""
    with transaction.atomic():
        Job.objects.select_for_update(no_key=True).filter(pk=job_id).first()
        job = current(job_id, attempt, resize_id)
        if job is None:
            return "stale"
        rz = {**job.resize, "tries": int(job.resize.get("tries") or 0) + 1, "error": error[:300]}
        Job.objects.filter(pk=job_id, attempt=attempt).update(resize=rz)
        job.resize = rz
        if rz["tries"] >= MAX_TRIES and rz["to"] > rz["from"]:
            return "roll_back"
    return "retry"


def roll_back(*, job_id: int, attempt: int, resize_id: int) -> bool:
    """Give up a grow whose pods the cluster refused: the job stays at its size (its new pods, gated or never
    made, are deleted by the caller first), and its timeline says why."""
    with transaction.atomic():
        Job.objects.select_for_update(no_key=True).filter(pk=job_id).first()
        job = current(job_id, attempt, resize_id)
        if job is None:
            return False
        rz = job.resize
        Job.objects.filter(pk=job_id, attempt=attempt).update(resize=None, updated_at=timezone.now())
        job.resize = None
        record_event(job=job, kind="resize", reason_code="resize_rolled_back", attempt=attempt,
                     message=f"the resize from {rz['from']} to {rz['to']} pods was rolled back after "
                             f"{rz['tries']} refused tries: {rz.get('error', '')}"[:500],
                     data={**_event_data(rz), "tries": rz["tries"], "error": rz.get("error", "")})
    return True
