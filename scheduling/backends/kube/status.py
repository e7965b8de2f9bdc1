"""Map a Kubernetes pod (a plain dict as the API returns it) to the portal's ``PodState``.

What the job lifecycle needs from a pod, in order of precedence for ``reason``:

1. disruption: pod ``status.reason`` ``Evicted`` (kubelet node pressure) or a ``DisruptionTarget`` condition
   (Eviction API, scheduler preemption, taint manager, kubelet shutdown) -> ``Evicted`` / ``Preempted`` /
   ``NodeLost`` / ``NodeShutdown``; the job is requeued, not failed;
2. other pod-level reasons: ``DeadlineExceeded`` (activeDeadlineSeconds, i.e. max runtime), ``NodeLost``,
   ``UnexpectedAdmissionError``, ...;
3. the main container's terminated state: exit code and reason (``OOMKilled``, ``Error``, ``Completed``,
   ``ContainerCannotRun``);
4. the main container's waiting reason when it is an error (``ErrImagePull``, ``ImagePullBackOff``,
   ``CrashLoopBackOff``, ``CreateContainerConfigError``, ``InvalidImageName``, ...);
5. ``PodScheduled=False`` on an ungated pod, whatever the scheduler's reason: ``Unschedulable`` (the placement
   does not fit, e.g. a terminating pod still holds the GPUs) or ``SchedulerError`` (e.g. ``nodeinfo not
   found``: the pinned node vanished); ``since`` carries the condition's lastTransitionTime so the portal can
   wait a bounded time before it gives up on the placement.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from typing import Any

from scheduling.backends.base import PodState

from .podspec import (
    ADMISSION_GATE,
    LABEL_ATTEMPT,
    LABEL_JOB_ID,
    LABEL_POD_INDEX,
    MAIN_CONTAINER,
    is_ours,
)

WAITING_ERRORS = frozenset(
    {
        "ErrImagePull",
        "ImagePullBackOff",
        "InvalidImageName",
        "ErrImageNeverPull",
        "CrashLoopBackOff",
        "CreateContainerConfigError",
        "CreateContainerError",
        "RunContainerError",
        "PreCreateHookError",
    }
)

# What kube-scheduler may say on PodScheduled=False besides Unschedulable; any reason it does not list here is
# reported as SchedulerError too, so that no scheduling failure goes unnoticed.
SCHEDULER_REASONS = frozenset({"Unschedulable", "SchedulerError"})
GATED_REASON = "SchedulingGated"

# DisruptionTarget condition reasons -> the reason the portal records.
DISRUPTION_REASONS = {
    "EvictionByEvictionAPI": "Evicted",
    "PreemptionByScheduler": "Preempted",
    "DeletionByTaintManager": "NodeLost",
    "DeletionByPodGC": "NodeLost",
    "TerminationByKubelet": "Evicted",
}


def parse_time(value: str | None) -> float | None:
    if not value:
        return None
    try:
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def _condition(status: Mapping[str, Any], kind: str) -> Mapping[str, Any] | None:
    for cond in status.get("conditions") or []:
        if cond.get("type") == kind:
            return cond
    return None


def _main_container(status: Mapping[str, Any]) -> Mapping[str, Any] | None:
    statuses = status.get("containerStatuses") or []
    for cs in statuses:
        if cs.get("name") == MAIN_CONTAINER:
            return cs
    return statuses[0] if statuses else None


def pod_identity(pod: Mapping[str, Any], *, installation: str | None = None) -> tuple[int, int, int] | None:
    """(job id, attempt, pod index) of one of the portal's pods (``installation``: of that installation's alone),
    None for anything else."""
    if not is_ours(pod, installation=installation):
        return None
    labels = pod["metadata"].get("labels") or {}
    try:
        return int(labels[LABEL_JOB_ID]), int(labels[LABEL_ATTEMPT]), int(labels.get(LABEL_POD_INDEX, 0))
    except (KeyError, ValueError):
        return None


def pod_state(pod: Mapping[str, Any], *, gate: str = ADMISSION_GATE, installation: str | None = None
              ) -> PodState | None:
    """The pod as the portal reads it; None when it is not the portal's (``installation``: not that
    installation's: the backend always passes its own)."""
    identity = pod_identity(pod, installation=installation)
    if identity is None:
        return None
    job_id, attempt, index = identity
    meta = pod.get("metadata") or {}
    spec = pod.get("spec") or {}
    status = pod.get("status") or {}
    phase = status.get("phase") or "Pending"
    gated = any(g.get("name") == gate for g in spec.get("schedulingGates") or [])

    reason = ""
    message = ""
    since: float | None = None
    exit_code: int | None = None
    started_at = parse_time(status.get("startTime"))
    finished_at: float | None = None

    main = _main_container(status)
    state = (main or {}).get("state") or {}
    terminated = state.get("terminated")
    waiting = state.get("waiting")
    running = state.get("running")
    if running:
        started_at = parse_time(running.get("startedAt")) or started_at
    if terminated:
        exit_code = terminated.get("exitCode")
        started_at = parse_time(terminated.get("startedAt")) or started_at
        finished_at = parse_time(terminated.get("finishedAt"))

    disruption = _condition(status, "DisruptionTarget")
    scheduled = _condition(status, "PodScheduled")
    if status.get("reason") == "Evicted":
        reason, message = "Evicted", status.get("message", "")
    elif disruption and disruption.get("status") == "True":
        reason = DISRUPTION_REASONS.get(disruption.get("reason", ""), "Evicted")
        message = disruption.get("message", "")
    elif status.get("reason"):
        reason, message = status["reason"], status.get("message", "")
    elif terminated and (exit_code or terminated.get("reason") not in (None, "", "Completed")):
        reason = terminated.get("reason") or "Error"
        message = terminated.get("message", "")
    elif waiting and waiting.get("reason") in WAITING_ERRORS:
        reason, message = waiting["reason"], waiting.get("message", "")
        last = ((main or {}).get("lastState") or {}).get("terminated")
        if last and exit_code is None:
            exit_code = last.get("exitCode")
    elif (
        not gated
        and not spec.get("nodeName")
        and scheduled
        and scheduled.get("status") == "False"
        and scheduled.get("reason") != GATED_REASON
    ):
        reason = scheduled.get("reason") if scheduled.get("reason") in SCHEDULER_REASONS else "SchedulerError"
        message = scheduled.get("message", "")
        since = parse_time(scheduled.get("lastTransitionTime"))

    return PodState(
        job_id=job_id,
        attempt=attempt,
        index=index,
        name=meta.get("name", ""),
        namespace=meta.get("namespace", ""),
        phase=phase,
        gated=gated,
        node=spec.get("nodeName") or None,
        exit_code=exit_code,
        reason=reason,
        message=message,
        started_at=started_at,
        finished_at=finished_at,
        deleting=bool(meta.get("deletionTimestamp")),
        deletion_deadline=parse_time(meta.get("deletionTimestamp")),
        since=since,
        ready=phase == "Running" and (_condition(status, "Ready") or {}).get("status") == "True",
    )
