"""Notice before preemption (docs/scheduling.md, "Notice before preemption").

A job may declare the notice it needs (``Job.notice_s``, bounded by the lab's ``PreemptionLimit`` of its
department and tier). When the cycle chooses it as a victim, its eviction waits: the pods are told first (a pod
annotation, ``NOTICE_ANNOTATION``, that a downward-API volume shows as the file ``PORTAL_NOTICE_FILE`` names; the
kubelet updates the file in the running container), and the eviction is asked for when the job answers
"checkpoint written" (``POST /api/v1/jobs/{id}/checkpoint-written`` with its attempt's credential), else when
the notice ends. Nothing else changes: the victim's GPUs stay promised to the preemptor meanwhile (it is in
flight, so no second victim is chosen for the same need), the cooldown chose it, and its eviction still goes
through the Eviction API, so a PodDisruptionBudget refuses it exactly as without notice.

Invariants:

* The eviction is asked for once the answer or the notice's end comes, never before, and at most one answer
  counts (the first).
* The credential is the attempt's own: ``attempt_token(job, attempt)``, an HMAC of the installation's secret key
  that is stored nowhere (nothing to leak from the database) and answers for that job and attempt only, never a
  member's token. A request without it, or with another job's or attempt's, answers 404 like a job that does not
  exist.
* The audit record (``PreemptionVictim``) keeps when the notice was sent, when it ends, when the checkpoint was
  written and when the eviction was asked for; lost work counts from the written checkpoint.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import re
from datetime import datetime

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from portal import dispatch
from scheduling.backends import get_backend
from scheduling.backends.base import NOTICE_ANNOTATION
from scheduling.models import Job, PreemptionVictim
from scheduling.services.cluster_binding import cluster_of
from scheduling.services.jobs import namespace_for, record_event

log = logging.getLogger(__name__)

TOKEN_PREFIX = "gpn_"
_TOKEN = re.compile(r"^gpn_([0-9]{1,18})_([0-9]{1,9})_([0-9a-f]{64})$")


def _mac(job_id: int, attempt: int) -> str:
    key = hashlib.sha256(f"preemption-notice:{settings.SECRET_KEY}".encode()).digest()
    return hmac.new(key, f"{job_id}:{attempt}".encode(), hashlib.sha256).hexdigest()


def attempt_token(job_id: int, attempt: int) -> str:
    """The attempt's own credential for answering a notice (its pods get it as ``PORTAL_JOB_TOKEN``)."""
    return f"{TOKEN_PREFIX}{job_id}_{attempt}_{_mac(job_id, attempt)}"


def token_attempt(token: str) -> tuple[int, int] | None:
    """The (job id, attempt) a credential answers for, or None when it is not one the portal issued."""
    m = _TOKEN.match(token or "")
    if m is None:
        return None
    job_id, attempt = int(m.group(1)), int(m.group(2))
    return (job_id, attempt) if hmac.compare_digest(m.group(3), _mac(job_id, attempt)) else None


def attempt_is_current(*, job_id: int, attempt: int) -> bool:
    """Whether ``attempt`` is the job's current one (a past attempt's credential answers for nothing)."""
    return Job.objects.filter(pk=job_id, attempt=attempt).exists()


def notice_text(victim: PreemptionVictim) -> str:
    """What the job's file says: one JSON object, so a job can read the deadline without parsing prose."""
    return json.dumps({"preemption": victim.preemption_id, "reason": victim.preemption.reason,
                       "notice_s": victim.notice_s, "evict_at": victim.notice_ends_at.isoformat(),
                       "answer": "POST $PORTAL_NOTICE_ANSWER_URL with 'Authorization: Bearer $PORTAL_JOB_TOKEN'"},
                      sort_keys=True)


def send_notice(*, job_id: int, attempt: int, namespace: str, preemption_id: int) -> str:
    """Tell the victim's pods (the annotation, hence the file); the first success is recorded. Nothing once
    the eviction is asked for (answered, the notice ended) or the attempt moved on."""
    victim = PreemptionVictim.objects.select_related("preemption").filter(
        preemption_id=preemption_id, job_id=job_id, attempt=attempt).first()
    if victim is None or victim.status != PreemptionVictim.Status.DECIDED or victim.notice_ends_at is None:
        return "done"
    job = Job.objects.select_related("cluster").filter(pk=job_id).first()
    if job is None or job.attempt != attempt:
        return "stale"
    pods = get_backend(cluster_of(job)).notify(job_id=job_id, attempt=attempt, namespace=namespace,
                                               annotations={NOTICE_ANNOTATION: notice_text(victim)})
    now = timezone.now()
    if PreemptionVictim.objects.filter(pk=victim.pk, notice_sent_at__isnull=True).update(notice_sent_at=now):
        record_event(job=job, kind="preemption", attempt=attempt, reason_code="preemption_notice",
                     message=f"told of its preemption: evicted at {victim.notice_ends_at:%H:%M:%S} UTC, or as soon "
                             f"as it answers 'checkpoint written' ({', '.join(pods) or 'no pod yet'})"[:500],
                     data={"preemption_id": preemption_id, "evict_at": victim.notice_ends_at.isoformat()})
    return "sent"


def _ask_eviction(victim: PreemptionVictim, job: Job) -> None:
    dispatch.after_commit("scheduling.pods.evict", job.pk, victim.attempt,
                          namespace_for(job.department.slug, job.cluster), victim.preemption_id)


class NoNotice(Exception):
    """The attempt has no notice in force to answer (none was sent, or its eviction is already asked for)."""


def checkpoint_written(*, job_id: int, attempt: int, now: datetime | None = None) -> PreemptionVictim:
    """The job answers its notice: its checkpoint is written, so its eviction is asked for at once (after
    commit). Raises NoNotice when there is nothing to answer; a second answer is the first one's result."""
    now = now or timezone.now()
    with transaction.atomic():
        victim = (PreemptionVictim.objects.select_for_update().select_related("preemption")
                  .filter(job_id=job_id, attempt=attempt, notice_ends_at__isnull=False)
                  .order_by("-preemption_id").first())
        if victim is None:
            raise NoNotice("No notice of preemption is in force for this attempt.")
        if victim.checkpoint_at is not None:
            return victim
        if victim.status != PreemptionVictim.Status.DECIDED:
            raise NoNotice("The notice has ended: the eviction is already under way.")
        victim.checkpoint_at = now
        victim.save(update_fields=["checkpoint_at"])
        job = Job.objects.select_related("department", "cluster").get(pk=job_id)
        record_event(job=job, kind="preemption", attempt=attempt, reason_code="checkpoint_written",
                     message=f"answered its notice: checkpoint written {int((victim.notice_ends_at - now).total_seconds())}"
                             " s before the notice's end; evicted now",
                     data={"preemption_id": victim.preemption_id})
        _ask_eviction(victim, job)
    return victim


def evict_at_notice_end(*, now: datetime | None = None) -> int:
    """Ask for the eviction of every victim whose notice ended without an answer (the cycle calls this each
    run, so an eviction waits at most one cycle past the notice). The task it sends is idempotent."""
    now = now or timezone.now()
    ids = list(PreemptionVictim.objects.filter(status=PreemptionVictim.Status.DECIDED, notice_ends_at__lte=now,
                                               checkpoint_at__isnull=True).values_list("pk", flat=True))
    if not ids:  # the usual cycle: no job row is read (the cycle keeps its rows between runs)
        return 0
    due = list(PreemptionVictim.objects.filter(pk__in=ids).select_related("job__department", "job__cluster")
               .order_by("preemption_id", "job_id"))
    for victim in due:
        _ask_eviction(victim, victim.job)
    return len(due)
