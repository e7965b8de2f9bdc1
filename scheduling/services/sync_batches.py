"""The pod sync's writes, many jobs per transaction: each job still moves by its own compare-and-set UPDATE,
and its timeline events and notifications are inserted together with the others' at the transaction's end.

A transaction per job cost its BEGIN and COMMIT and an INSERT per event and per notification: five to nine
round trips for a job that only started running or finished, on the sync's and on PostgreSQL's side. The lock
order stays the portal's one: every wallet a job of the batch may settle against is locked first, in
primary-key order, then the jobs in primary-key order; a job whose pods only run (it starts running, or
nothing happens) settles nothing, so its department's wallet is not held for it. A batch that fails (a bad
pod, a conflict that outlived its retries) is applied again one job per transaction, so one bad job still
stops no other."""

from __future__ import annotations

import copy
import logging
from collections.abc import Callable

from django.db import transaction

from portal.db import inserted_together, retry_on_conflict
from quotas import budgets
from scheduling.backends.base import PodState
from scheduling.models import Job

log = logging.getLogger(__name__)

# Jobs per transaction: enough to amortise its round trips, few enough that the cycle and a cancel wait on
# the batch's rows (and the wallets of the jobs that end) for no more than a few milliseconds.
BATCH = 50

Apply = Callable[[Job, list[PodState]], "str | None"]


def apply_batched(work: list[tuple[Job, list[PodState]]], apply: Apply, *, settles: Callable[[list[PodState]], bool],
                  counts: dict[str, int]) -> None:
    """``apply(job, pods)`` for every job of ``work`` (in primary-key order), ``BATCH`` jobs per transaction.
    ``settles(pods)``: whether those pods may end the attempt (and settle its budget), so that its wallet is
    locked before any job of the batch."""
    for start in range(0, len(work), BATCH):
        batch = work[start:start + BATCH]
        try:
            outcomes = retry_on_conflict(lambda b=batch: _apply_together(b, apply, settles),
                                         what=f"pod sync of {len(batch)} jobs")
        except Exception:  # noqa: BLE001 - each job again on its own, below
            log.warning("pod sync of jobs %s..%s together failed; each is applied on its own", batch[0][0].pk,
                        batch[-1][0].pk, exc_info=True)
            outcomes = [_apply_alone(job, pods, apply, counts) for job, pods in batch]
        for outcome in outcomes:
            if outcome:
                counts[outcome] += 1


def _apply_together(batch: list[tuple[Job, list[PodState]]], apply: Apply, settles) -> list[str | None]:
    jobs = [(copy.copy(job), pods) for job, pods in batch]  # a retry starts from the jobs as read
    with transaction.atomic(), inserted_together():
        budgets.lock_department_wallets([job.department_id for job, pods in jobs if settles(pods)])
        return [apply(job, pods) for job, pods in jobs]


def _apply_alone(job: Job, pods: list[PodState], apply: Apply, counts: dict[str, int]) -> str | None:
    def once():
        snapshot = copy.copy(job)
        with transaction.atomic():
            return apply(snapshot, pods)

    try:
        return retry_on_conflict(once, what=f"pod sync of job {job.pk}")
    except Exception:  # noqa: BLE001 - isolated on purpose: one bad pod or job must not stop the others
        log.exception("pod sync of job %s failed; the other jobs go on", job.pk)
        counts["errors"] += 1
        return None
