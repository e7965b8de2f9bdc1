"""One admission cycle: lock -> snapshot -> decide (pure core) -> apply in one transaction -> side effects
after commit. Safe to run from any number of processes: only the lock holder decides; the rest return.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Mapping
from contextlib import suppress
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from typing import Any, NamedTuple

from django.core.cache import cache
from django.db import connection, transaction
from django.utils import timezone

import engine
from engine import reasons
from engine.domains import level_name
from engine.ordering import fair_standing
from portal import dispatch, metrics
from portal.db import inserted_together, retry_on_conflict, update_each
from portal.money import format_credits
from portal.timestamps import from_epoch
from quotas import budgets
from scheduling.models import Cluster, Job, JobEvent, JobState, Preemption, PreemptionVictim
from scheduling.services import notice, notify, resizes
from scheduling.services.job_rows import VERSION, JobRows
from scheduling.services.jobs import (
    budget_admitted,
    end_unsatisfiable,
    namespace_for,
    record_event,
    transition_each,
)
from scheduling.services.locks import exclusive
from scheduling.services.queue_ranks import reranked
from scheduling.services.snapshot import SnapshotContext, build_snapshot, host_name

log = logging.getLogger(__name__)

# Admitted jobs per pod-worker message: few broker round trips per cycle, still spread over the workers.
ADMIT_BATCH = 8
# An estimated start that moved less than this is not rewritten (avoids a write per job per cycle).
ESTIMATE_SLACK = timedelta(seconds=30)
# A waiting job's explanation whose code and estimate did not change, only the figures in its words (its
# department's GPUs in use move with every admission and every end: every waiting job of that department),
# is rewritten at most this often (``Job.explained_at``, whichever cycle worker wrote it); past the first
# RANK_HEAD jobs of the engine's order, at most every REASON_SLACK_DEEP.
REASON_SLACK = timedelta(seconds=30)
REASON_SLACK_DEEP = timedelta(minutes=5)
# The whole queue's ranks are written at most this often (by whichever cycle worker: ``RANKED_KEY``); in
# between, only the first RANK_HEAD jobs of the engine's order are ranked again.
RANK_SLACK = timedelta(seconds=30)
RANK_HEAD = 256
# When a cycle worker last ranked the whole queue, shared through the cache: with each worker's own time, two
# workers taking turns ranked the whole queue twice as often (thousands of rows each time in a long queue).
RANKED_KEY = "scheduling:cycle:ranked-at"


@dataclass(frozen=True)
class CycleOutcome:
    admitted: int
    preempted: int
    pending: int
    reasons_changed: int
    decide_ms: float
    total_ms: float
    policy_version: int


class Applied(NamedTuple):
    """What applying a decision changed."""

    admitted: int
    preempted: int
    reasons_changed: int
    # the jobs it may have written or changed in memory (a kept row of them is stale)
    touched: frozenset[int] = frozenset()
    # the jobs whose reason, estimate or rank alone it wrote, on the rows the decision read, and the version
    # (transaction id) it wrote them in: the rows in memory are those rows now
    rewritten: frozenset[int] = frozenset()
    version: int | None = None
    # whether it ranked the whole queue (``JobRows.ranked_at``)
    ranked_all: bool = False


@dataclass(frozen=True)
class Decided:
    """One snapshot, its decision and what applying it changed, with the ``time.perf_counter`` readings
    around each step."""

    ctx: SnapshotContext
    result: engine.CycleResult
    applied: Applied
    fair: dict[str, tuple[float, float]]  # department -> (use ratio, fair factor) the decision scored with
    started: float
    snapshot_taken: float
    decided: float
    finished: float


# This process's job rows, kept from one cycle to the next (``job_rows``: only what changed is read again).
ROWS = JobRows()


def decide_and_apply(*, now: datetime | None) -> Decided:
    t0 = time.perf_counter()
    snapshot, ctx = build_snapshot(now=now or timezone.now(), rows=ROWS)
    t1 = time.perf_counter()
    result = engine.schedule(snapshot)
    t2 = time.perf_counter()
    try:
        applied = apply_result(result=result, ctx=ctx, slack=ROWS.usable(), ranked_at=_ranked_at())
    except BaseException:
        ROWS.clear()  # rolled back: rows may have been changed in memory and not in the database
        raise
    ROWS.forget(applied.touched)  # changed in memory by the apply: read again next cycle
    ROWS.renew(applied.rewritten, applied.version)
    if applied.ranked_all:
        ROWS.ranked_at = ctx.now
        if ROWS.usable():
            with suppress(Exception):  # an unreachable cache: each worker goes by its own time
                cache.set(RANKED_KEY, ctx.now, timeout=int(RANK_SLACK.total_seconds()) * 4)
    return Decided(ctx, result, applied, fair_standing(snapshot), t0, t1, t2, time.perf_counter())


def _ranked_at() -> datetime | None:
    """When a cycle worker last ranked the whole queue: the latest of this process's time and the shared one
    (None where rows are not kept, as in a test's transaction: the whole queue is ranked every cycle)."""
    if ROWS.ranked_at is None:
        return None
    try:
        shared = cache.get(RANKED_KEY)
    except Exception:  # noqa: BLE001 - an unreachable cache: this process's own time
        shared = None
    return max(ROWS.ranked_at, shared) if isinstance(shared, datetime) else ROWS.ranked_at


def run_cycle(*, now: datetime | None = None) -> CycleOutcome | None:
    """Run one admission cycle; None when another process holds the cycle lock."""
    with exclusive("admission-cycle") as acquired:
        if not acquired:
            return None
        # A lost lock race rolls the whole apply back; deciding again on a fresh snapshot is then safe.
        d = retry_on_conflict(lambda: decide_and_apply(now=now), what="admission cycle")
    outcome = CycleOutcome(
        admitted=d.applied.admitted,
        preempted=d.applied.preempted,
        pending=len(d.result.pending),
        reasons_changed=d.applied.reasons_changed,
        decide_ms=(d.decided - d.snapshot_taken) * 1000,
        total_ms=(d.finished - d.started) * 1000,
        policy_version=d.ctx.policy_version,
    )
    metrics.observe_cycle(outcome, result=d.result, at=time.time(), fair=d.fair)
    # Victims whose notice of preemption ended unanswered: their eviction is due now (every cycle, so it waits
    # at most one cycle past the notice).
    notice.evict_at_notice_end(now=now)
    # Resizes whose checkpoint has come, and those whose pods are not all there (or gone) yet.
    resizes.start_due(now=now)
    return outcome


def apply_result(*, result: engine.CycleResult, ctx: SnapshotContext,
                 slack: bool = False, ranked_at: datetime | None = None) -> Applied:
    """Apply a decision in one transaction. Every state change is compare-and-set against the state the
    decision saw, so a job cancelled meanwhile is simply skipped. Pod side effects leave after commit.
    ``slack``: a waiting job's message whose figures alone moved waits for ``REASON_SLACK`` (else every
    explanation that changed is written, as where rows are not kept: tests, SQLite). ``ranked_at``: when a
    cycle worker last ranked the whole queue (``_ranked_at``, ``_rank_changes``; none: the whole queue is
    ranked)."""
    preempted = changed = 0
    clusters = {c.name: c for c in Cluster.objects.all()}
    # Jobs whose dependency can never be met are ended, not explained (their reason is on the timeline).
    unsatisfiable = [pr for pr in result.pending if pr.code == reasons.DEPENDENCY_NEVER_SATISFIED
                     and pr.job_id in ctx.jobs and ctx.jobs[pr.job_id].state == JobState.QUEUED]
    shrinking = _shrinking_for(ctx)
    kept = [_resize_in_flight(pr, shrinking) for pr in result.pending
            if pr.code != reasons.DEPENDENCY_NEVER_SATISFIED]
    pending = _pending_changes(kept, ctx, slack=slack)
    ranks, ranked_all = _rank_changes(kept, ctx, ranked_at)
    with transaction.atomic():
        metered, locked = _lock_in_order(result, ctx, set(pending) | set(ranks),
                                         [ctx.jobs[pr.job_id] for pr in unsatisfiable])
        # Held since the snapshot was read (the rows are locked now): not admitted, the next cycle says why.
        held = set(Job.objects.filter(pk__in=[a.job_id for a in result.admissions], held_at__isnull=False)
                   .values_list("pk", flat=True)) if result.admissions else set()
        admitted_jobs = _admit(result, ctx, clusters, held, metered)
        admitted = len(admitted_jobs)
        to_ungate = [[job.pk, job.attempt] for job in admitted_jobs]
        waits = [({"tier": job.tier, "department": job.department.slug, "flavor": job.flavor.name},
                  _queue_wait(job, ctx.now)) for job in admitted_jobs]
        metrics.observe_admissions(waits)  # in this transaction: an apply rolled back counts nothing
        for i in range(0, len(to_ungate), ADMIT_BATCH):  # a few messages per cycle, not one per admission
            chunk = to_ungate[i:i + ADMIT_BATCH]
            dispatch.after_commit("scheduling.pods.admit_many", chunk)

        explained: set[int] = set()  # preemptors whose reason _record_preemption wrote from what it recorded
        for pre in result.preemptions:
            preempted += _record_preemption(pre, ctx, explained)
        # Running resizable jobs that grow or shrink at their next checkpoint (``resizes``)
        resized = resizes.record_decisions(result.resizes, ctx.jobs, now=ctx.now, policy_version=ctx.policy_version)

        changed, written = _apply_pending(
            {pk: w for pk, w in pending.items() if pk not in explained}, ctx, ranks)
        for pr in unsatisfiable:
            changed += end_unsatisfiable(job=ctx.jobs[pr.job_id], message=pr.message, detail=_jsonable(pr.detail))
        # Rows the reasons and ranks alone wrote, still at the version the decision read when they were locked
        # (no one else wrote them in between, no one can until the commit): what they hold now is the kept row
        # with the values written, as in memory.
        others = {a.job_id for a in result.admissions} | {pr.job_id for pr in unsatisfiable} | resized
        for pre in result.preemptions:
            others |= {pre.preemptor_id, *pre.victim_ids}
        rewritten = {pk for pk in written - others if locked.get(pk) is not None
                     and getattr(ctx.jobs[pk], "v", None) == locked[pk]}
        version = _transaction_version() if rewritten else None
    touched = others | set(pending) | set(ranks)
    return Applied(admitted, preempted, changed, frozenset(touched - rewritten), frozenset(rewritten), version,
                   ranked_all)


def _shrinking_for(ctx: SnapshotContext) -> dict[int, list[int]]:
    """Per waiting job, the resizable jobs whose decided shrink gives GPUs back to it (in id order)."""
    out: dict[int, list[int]] = {}
    for job in ctx.jobs.values():
        if job.resize and job.resize.get("for_job") is not None and job.state in resizes.ACTIVE:
            out.setdefault(job.resize["for_job"], []).append(job.pk)
    return {k: sorted(v) for k, v in out.items()}


def _resize_in_flight(pr: engine.PendingReason, shrinking: dict[int, list[int]]) -> engine.PendingReason:
    """A job that resizable jobs shrink for waits for their checkpoints: once the shrink is decided the engine
    holds those jobs whole (``resizing``) and, deciding nothing new for them, would give the job another
    reason (a cooldown, no capacity) although its GPUs are on their way."""
    ids = shrinking.get(pr.job_id)
    if not ids or pr.code == reasons.WAITING_FOR_RESIZE:
        return pr
    names = ", ".join(map(str, ids))
    message = (f"resizable jobs {names} give back GPUs at their next checkpoints" if len(ids) > 1
               else f"resizable job {names} gives back GPUs at its next checkpoint")
    return replace(pr, code=reasons.WAITING_FOR_RESIZE, message=message, detail={"resizing": ids},
                   estimated_start=None)


def _transaction_version() -> int:
    """The id of this transaction as the rows it writes carry it (``xmin``: 32 bits of the 64-bit id)."""
    with connection.cursor() as cur:
        cur.execute("SELECT mod(txid_current(), 4294967296)")
        return int(cur.fetchone()[0])


def _queue_wait(job: Job, now: datetime) -> float:
    """Seconds since the job was last queued (a requeued attempt waits from its requeue, not its submission)."""
    return max(0.0, (now - (job.queued_at or job.submitted_at)).total_seconds())


def _lock_in_order(result: engine.CycleResult, ctx: SnapshotContext, pending: set[int],
                   ended: list[Job]) -> tuple[set[int], dict[int, int | None]]:
    """Take every row lock the apply needs up front, in the portal's one order: the wallets of the admitted
    jobs' departments (holds are placed on them) in primary-key order, then every job the apply writes in
    primary-key order. Without this the apply locked job, wallet, job, wallet... in decision order, and a
    cancel or a pod sync locking the same rows the other way round deadlocked with it. Answers the
    departments that have a wallet (locked now: none of them can go away before the commit) and, on
    PostgreSQL, the version (``xmin``) of each job row as locked."""
    admitted = [ctx.jobs[a.job_id] for a in result.admissions if a.job_id in ctx.jobs]
    metered = set(budgets.lock_department_wallets([j.department_id for j in admitted + ended]))
    ids = {j.pk for j in admitted + ended} | set(pending)
    ids |= {p.preemptor_id for p in result.preemptions if p.preemptor_id in ctx.jobs}
    ids |= {r.job_id for r in result.resizes if r.job_id in ctx.jobs}
    if not ids:
        return metered, {}
    rows = Job.objects.select_for_update(no_key=True).filter(pk__in=sorted(ids)).order_by("pk")
    if connection.vendor != "postgresql":
        return metered, dict.fromkeys(rows.values_list("pk", flat=True))
    return metered, dict(rows.annotate(v=VERSION).values_list("pk", "v"))


def _admit(result: engine.CycleResult, ctx: SnapshotContext, clusters: dict[str, Cluster], held: set[int],
           metered: set[int]) -> list[Job]:
    """Admit the decided jobs that are still queued in the attempt the decision saw (their rows are locked),
    all in one compare-and-set UPDATE (``transition_each``), then place each one's hold in a department with a
    wallet (read when its wallets were locked; a department without one is not asked again per job). Answers
    the jobs admitted, in decision order."""
    moves = []
    for adm in result.admissions:
        job = ctx.jobs.get(adm.job_id)
        if job is None or job.pk in held:
            continue
        placement = [host_name(n) for n in adm.placement]  # (a GPU node's CPU twin is that node)
        own = {"placement": placement, "cluster": clusters.get(adm.cluster), "borrowed": adm.borrowed,
               "price": adm.price, "gpu_devices": list(adm.devices),
               # a resizable job starts at the size the engine chose (its hold and its pods follow it)
               "current_pods": len(adm.placement) if job.min_pods is not None and job.role_count == 1 else None}
        data = {"placement": placement, "borrowed": adm.borrowed, "price": adm.price,
                "cluster": adm.cluster, "policy_version": ctx.policy_version}
        if adm.devices:
            data["gpu_devices"] = list(adm.devices)
        message = _admission_message(adm)
        if own["current_pods"] is not None:
            data["size"] = {"pods": own["current_pods"], "min_pods": job.min_pods, "max_pods": job.pods}
            message += f" at {own['current_pods']} pods (its size range: {job.min_pods}..{job.pods})"
        moves.append((job, own, message, data))
    with inserted_together():  # two rows per admitted job: inserted together, not one by one
        admitted = transition_each(moves, to=JobState.ADMITTED, from_state=JobState.QUEUED, reason_code="admitted",
                                   admitted_at=ctx.now, estimated_start=None, reason_detail={}, queue_rank=None)
        for job in admitted:
            if job.department_id in metered:
                cluster = job.cluster.name if job.cluster_id else None
                speedup = 1.0 if job.has_route else ctx.speedup.get(cluster, ctx.default_speedup)
                budget_admitted(job, speedup=speedup)
    return admitted


def _pending_changes(pending, ctx: SnapshotContext, *, slack: bool = False
                     ) -> dict[int, tuple[Job, Any, datetime | None, bool]]:
    """The queued jobs whose reason or estimated start the decision changes (read only; nothing locked).

    With ``slack``, a job whose code and estimate stand, whose words alone moved (the figures in them), is
    left as stored when a cycle wrote its explanation less than ``REASON_SLACK`` ago (``Job.explained_at``;
    ``REASON_SLACK_DEEP`` past the first ``RANK_HEAD`` jobs of the engine's order), unless its deadline is
    newly at risk (its owner is told now). Otherwise a long queue had every waiting job of each department
    whose GPUs in use moved rewritten every cycle: hundreds of rows, each read back, per cycle. The time of
    the write is the row's, not the cycle worker's: with two workers taking turns, each had rewritten every
    message the other wrote, and so read every such row again in full, every cycle."""
    wanted: dict[int, tuple[Job, Any, datetime | None, bool]] = {}
    recent, deep = ctx.now - REASON_SLACK, ctx.now - REASON_SLACK_DEEP
    jobs = ctx.jobs
    for place, pr in enumerate(pending):
        job = jobs.get(pr.job_id)
        if job is None or job.state != JobState.QUEUED:
            continue
        pr = _in_credits(_unreachable_reason(pr, job, ctx))
        est = from_epoch(pr.estimated_start)
        code_changed = job.reason_code != pr.code
        est_changed = (est is None) != (job.estimated_start is None) or (
            est is not None and abs(est - job.estimated_start) > ESTIMATE_SLACK
        )
        if code_changed or est_changed:
            wanted[job.id] = (job, pr, est, code_changed)
        elif job.reason_message != pr.message:
            written = job.explained_at
            if not slack or written is None or written <= (recent if place < RANK_HEAD else deep) or (
                    "deadline_miss" in pr.detail and DEADLINE_NOTE not in job.reason_message):
                wanted[job.id] = (job, pr, est, code_changed)
    return wanted


def _rank_changes(pending, ctx: SnapshotContext, ranked_at: datetime | None) -> tuple[dict[int, int], bool]:
    """The queued jobs whose place in the engine's order (``queue_rank``) must be written: only those out of
    order (``queue_ranks.reranked``; read only, nothing locked), and whether that was the whole queue.

    Fair share moves with every admission and every end, and with it the interleaving of the departments'
    jobs: a long queue had thousands of ranks out of order every cycle, more the longer it was. The whole
    queue is ranked at most every ``RANK_SLACK`` when this process did it last (``ranked_at``); in between,
    the first ``RANK_HEAD`` jobs only, among themselves (a deeper job's position is then up to
    ``RANK_SLACK`` old)."""
    jobs = ctx.jobs
    order = [pr.job_id for pr in pending if pr.job_id in jobs and jobs[pr.job_id].state == JobState.QUEUED]
    whole = ranked_at is None or ctx.now - ranked_at >= RANK_SLACK or len(order) <= RANK_HEAD
    if not whole:
        order = order[:RANK_HEAD]
    return reranked(order, {pk: jobs[pk].queue_rank for pk in order}), whole


def _apply_pending(wanted: dict[int, tuple[Job, Any, datetime | None, bool]], ctx: SnapshotContext,
                   ranks: dict[int, int]) -> tuple[int, set[int]]:
    """Store the reasons, estimated starts and queue ranks that changed, in a constant number of statements.

    The estimates of a long queue move every cycle, so this can be most of the queue: one UPDATE per job made
    the cycle's cost grow with the backlog. Compare-and-set as before: only the rows still queued in the
    attempt the decision saw (locked by ``_lock_in_order``) are written. A changed reason code is recorded on
    the job's timeline. Answers how many codes changed and the jobs written."""
    if not wanted and not ranks:
        return 0, set()
    current = dict(Job.objects.filter(pk__in=list(set(wanted) | set(ranks)), state=JobState.QUEUED)
                   .values_list("pk", "attempt"))
    rows, events = [], []
    for pk, (job, pr, est, code_changed) in wanted.items():
        if current.get(pk) != job.attempt:
            continue  # cancelled, admitted or requeued meanwhile: the decision no longer applies
        detail = _jsonable(pr.detail)
        if "deadline_miss" in detail and DEADLINE_NOTE not in job.reason_message:
            # newly at risk (its stored message did not say so yet): its owner is told, once per job (the
            # notification's key), in this transaction
            notify.deadline_at_risk(job=job, miss=detail["deadline_miss"], message=pr.message)
        job.reason_code, job.reason_message = pr.code, pr.message[:300]
        job.reason_detail, job.estimated_start, job.explained_at = detail, est, ctx.now
        rows.append(job)
        if code_changed:
            events.append(JobEvent(
                job=job, kind="reason", reason_code=pr.code, message=pr.message[:500], attempt=job.attempt,
                at=timezone.now(),
                data={"detail": detail, "estimated_start": est.isoformat() if est else None},
            ))
    fields = ["reason_code", "reason_message", "reason_detail", "estimated_start", "explained_at"]
    written = set(update_each(Job, [{"pk": job.pk, **{f: getattr(job, f) for f in fields}} for job in rows],
                              fields=fields, where={"state": JobState.QUEUED}))
    JobEvent.objects.bulk_create(events, batch_size=500)
    # The ranks on their own rows, only them: a preemptor's reason written by _record_preemption stays.
    ranked = []
    for pk, rank in ranks.items():
        job = ctx.jobs[pk]
        if current.get(pk) == job.attempt:
            job.queue_rank = rank
            ranked.append({"pk": pk, "queue_rank": rank})
    written |= set(update_each(Job, ranked, fields=["queue_rank"], where={"state": JobState.QUEUED}))
    return len(events), written


# What the engine's feasibility check adds to a waiting job's message when it would miss its deadline.
DEADLINE_NOTE = "after its deadline"


# Reasons about the job or its department, true whatever the cluster's state: kept during an outage.
_NOT_ABOUT_THE_CLUSTER = {reasons.BUDGET_INSUFFICIENT, reasons.QUOTA_EXHAUSTED, reasons.BORROW_LIMIT,
                          reasons.AWAITING_APPROVAL, reasons.INVALID_REQUEST, reasons.QUOTA_LENT_OUT,
                          reasons.NO_MATCHING_CLUSTER, reasons.CLUSTERS_UNAVAILABLE}


def _unreachable_reason(pr: engine.PendingReason, job: Job, ctx: SnapshotContext) -> engine.PendingReason:
    """While every cluster the job may run on (its selector's) that offers its GPU type is unreachable (or not
    read yet), the engine sees no schedulable node and would say "no capacity"; the truth is that the cluster
    cannot be reached."""
    if not ctx.unavailable_clusters or pr.code in _NOT_ABOUT_THE_CLUSTER:
        return pr
    selector = job.cluster_selector or {}
    allowed = [c for c, labels in ctx.cluster_labels.items() if all(labels.get(k) == v for k, v in selector.items())]
    if any((c, job.flavor.name) in ctx.available_pairs for c in allowed):
        return pr
    down = sorted(c for c in ctx.unavailable_clusters if c in allowed) or sorted(ctx.unavailable_clusters)
    why = "; ".join(ctx.unavailable_clusters[c] for c in down)
    return replace(pr, code=reasons.CLUSTER_UNREACHABLE,
                   message=f"{reasons.CODES[reasons.CLUSTER_UNREACHABLE]} ({why})"[:300],
                   detail={"clusters": down}, estimated_start=None)


def _in_credits(pr: engine.PendingReason) -> engine.PendingReason:
    """The engine counts money in mcr, and its detail keeps them (as the API does); the stored reason is what
    pages show, so its words say credits."""
    if pr.code != reasons.BUDGET_INSUFFICIENT or not {"hold", "available", "missing"} <= pr.detail.keys():
        return pr
    d = pr.detail
    whose = f"team {d['team']}'s share of the budget: " if d.get("team") else ""
    return replace(pr, message=f"{whose}needs {format_credits(d['hold'])}, has {format_credits(d['available'])}, "
                               f"missing {format_credits(d['missing'])}")


def _admission_message(adm: engine.Admission) -> str:
    where = ", ".join(host_name(n) for n in adm.placement)
    # The rate actually held (the clearing price or the base price under it) is on the budget event.
    if adm.borrowed and adm.price:
        extra = f" on borrowed capacity (contested, clearing price {format_credits(adm.price)}/GPU-h)"
    else:
        extra = " on borrowed capacity (uncontested)" if adm.borrowed else ""
    if adm.spread:  # a gang that no domain of a topology level held whole
        name = level_name(adm.spread)
        extra += f"; its pods span several {name}s (no {name} had room for all of them)"
    return f"admitted to {where}{extra}"


def _record_preemption(pre: engine.Preemption, ctx: SnapshotContext, explained: set[int]) -> int:
    preemptor = ctx.jobs.get(pre.preemptor_id)
    in_flight = sorted(j for j, p in ctx.evicting_for.items() if p == pre.preemptor_id)
    if in_flight:
        # Its earlier victims' pods are still terminating: their GPUs are already promised to it, so it waits
        # for them rather than evicting more (whatever the engine proposes); once they are gone it is admitted,
        # or the next cycle chooses again.
        if preemptor is not None:
            msg = f"preempting job(s) {', '.join(map(str, in_flight))} ({pre.reason}): waiting for their pods to go"
            detail = {"victims": in_flight, "reason": pre.reason}
            Job.objects.filter(pk=preemptor.pk, state=JobState.QUEUED).update(
                reason_code=reasons.PREEMPTION_IN_PROGRESS, reason_message=msg[:300], reason_detail=detail,
                estimated_start=None)
            explained.add(preemptor.pk)
        return 0
    victims = [ctx.jobs[v] for v in pre.victim_ids if v in ctx.jobs and v not in ctx.evicting]
    victims = [v for v in victims if v.state in (JobState.ADMITTED, JobState.RUNNING)]
    if not victims:
        return 0
    record = Preemption.objects.create(
        preemptor=preemptor, reason=pre.reason, message=pre.message[:500], policy_version=ctx.policy_version,
        decided_at=ctx.now,
    )
    for v in victims:
        started = v.started_at or v.admitted_at or ctx.now
        lost = int(max(0.0, (ctx.now - started).total_seconds()) * v.total_gpus)
        told = int(v.notice_s or 0)
        PreemptionVictim.objects.create(preemption=record, job=v, attempt=v.attempt, gpu_seconds_lost=lost,
                                        notice_s=told,
                                        notice_ends_at=ctx.now + timedelta(seconds=told) if told else None)
        record_event(
            job=v,
            kind="preemption",
            reason_code=f"preempted_{pre.reason}",
            message=f"preemption decided for job {pre.preemptor_id} ({pre.reason}): {pre.message}"[:500],
            data={"preemption_id": record.pk, "preemptor": pre.preemptor_id},
        )
        ns = namespace_for(v.department.slug, v.cluster)
        # A job that asked for notice is told first; its eviction waits for its answer or the notice's end
        # (scheduling.services.notice), in flight all the while, so its GPUs stay promised to the preemptor.
        dispatch.after_commit("scheduling.pods.notify" if told else "scheduling.pods.evict", v.pk, v.attempt, ns,
                              record.pk)
    if preemptor is not None:
        # The message and the detail name the same victims: the ones recorded here (the engine's list may
        # include jobs whose eviction was already under way).
        ids = [v.pk for v in victims]
        msg = f"preempting job(s) {', '.join(map(str, ids))} ({pre.reason})"
        detail = {"victims": ids, "reason": pre.reason, "preemption_id": record.pk}
        Job.objects.filter(pk=preemptor.pk, state=JobState.QUEUED).update(
            reason_code=reasons.PREEMPTION_IN_PROGRESS, reason_message=msg[:300], reason_detail=detail,
            estimated_start=None,
        )
        preemptor.reason_code, preemptor.reason_message = reasons.PREEMPTION_IN_PROGRESS, msg[:300]
        preemptor.reason_detail = detail
        explained.add(preemptor.pk)
        record_event(job=preemptor, kind="preemption", reason_code=reasons.PREEMPTION_IN_PROGRESS, message=msg,
                     data={"preemption_id": record.pk, "victims": [v.pk for v in victims]})
    return len(victims)


def _jsonable(value):
    """Engine details are Mappings/tuples of plain values; make them JSON for the database."""
    if isinstance(value, Mapping):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_jsonable(v) for v in value]
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    return str(value)
