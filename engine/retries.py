"""Whether a failed attempt is retried, and after how long. Pure: the adapter passes the failed pods' states as
plain values and the job's retry settings, and acts on the answer (a new attempt, or the job fails).

Causes, from the first failed pod (phase ``Failed`` or a container that cannot start):

* ``platform``: not the user's doing. A pod evicted by the kubelet (``Evicted``), lost with its node
  (``NodeLost``, ``NodeShutdown``), an image pull that failed for a transient reason (a registry timeout, a
  refused connection, a 5xx or a 429 of the registry). Retried up to ``max(max_retries, PLATFORM_RETRIES)``
  times: a job asks for nothing to be retried on the platform's faults.
* ``oom``: ``OOMKilled``. Retried only when the job lists exit code 137 (the same run would fail the same way).
* ``image``: an image pull that fails for good (not found, unauthorized, an invalid name): never retried.
* ``exit_code``: the main container exited non-zero. Retried when the job lists that code.
* ``other``: anything else (a missing config, a deadline): never retried.
"""

from __future__ import annotations

from dataclasses import dataclass

PLATFORM = "platform"
OOM = "oom"
IMAGE = "image"
EXIT_CODE = "exit_code"
OTHER = "other"

PLATFORM_RETRIES = 3  # platform failures are retried at least this often, whatever ``max_retries`` says
MAX_RETRIES = 10
BACKOFF_FIRST_S = 30.0
BACKOFF_MAX_S = 600.0

PLATFORM_REASONS = frozenset({"Evicted", "NodeLost", "NodeShutdown", "TerminationByKubelet"})
IMAGE_PULL_REASONS = frozenset({"ErrImagePull", "ImagePullBackOff"})
# What a registry or the network says when trying again may work (containerd's and CRI-O's messages quote the
# registry's answer).
TRANSIENT_PULL_WORDS = ("timeout", "timed out", "connection refused", "connection reset", "temporary failure",
                        "i/o timeout", "eof", "too many requests", "429", "500 internal", "502", "503", "504",
                        "service unavailable", "tls handshake")


@dataclass(frozen=True, slots=True)
class FailedPod:
    index: int
    reason: str = ""
    exit_code: int | None = None
    message: str = ""


@dataclass(frozen=True, slots=True)
class RetryDecision:
    retry: bool
    cause: str  # one of the causes above
    detail: str  # one line for the timeline
    backoff_s: float = 0.0


def classify(pod: FailedPod) -> str:
    if pod.reason in PLATFORM_REASONS:
        return PLATFORM
    if pod.reason == "OOMKilled":
        return OOM
    if pod.reason in IMAGE_PULL_REASONS:
        text = pod.message.lower()
        return PLATFORM if any(word in text for word in TRANSIENT_PULL_WORDS) else IMAGE
    if pod.reason in ("InvalidImageName", "ErrImageNeverPull"):
        return IMAGE
    if pod.exit_code not in (None, 0):
        return EXIT_CODE
    return OTHER


def backoff_s(retry_number: int) -> float:
    """The wait before retry ``retry_number`` (1 for the first): 30 s, doubling, at most 10 min."""
    return min(BACKOFF_MAX_S, BACKOFF_FIRST_S * 2 ** max(0, retry_number - 1))


def decide(pod: FailedPod, *, max_retries: int, retry_on_exit_codes: tuple[int, ...] | frozenset[int],
           retries_done: int) -> RetryDecision:
    """Retry the attempt whose pod ``pod`` failed, or let the job fail. ``retries_done``: retries made so far."""
    cause = classify(pod)
    codes = frozenset(retry_on_exit_codes)
    what = f"pod {pod.index}: {pod.reason or 'error'}" + (f" (exit code {pod.exit_code})" if pod.exit_code else "")
    if cause == PLATFORM:
        allowed = max(max_retries, PLATFORM_RETRIES)
    elif cause == OOM:
        allowed = max_retries if 137 in codes else 0
    elif cause == EXIT_CODE:
        allowed = max_retries if pod.exit_code in codes else 0
    else:
        allowed = 0
    if retries_done >= allowed:
        why = "retries used up" if allowed else "not retried"
        return RetryDecision(False, cause, f"{what}: {why}")
    return RetryDecision(True, cause, f"{what}: retry {retries_done + 1} of {allowed}",
                         backoff_s(retries_done + 1))


# Pods lost with their node: the node went away under a healthy job. An eviction by the kubelet (node pressure)
# is left out: the job's own use of memory or disk may be what pressed the node.
NODE_FAILURE_REASONS = frozenset({"NodeLost", "NodeShutdown"})


@dataclass(frozen=True, slots=True)
class Expedite:
    expedited: bool
    backoff_s: float  # 0 when not expedited: the job waits in its normal place, as any requeue
    number: int  # this expedited requeue's number for the job (1 for the first); the count so far when not
    detail: str  # one line for the timeline


def expedite(reason: str, *, done: int, limit: int, first_backoff_s: float, tier: str) -> Expedite:
    """Whether a job whose attempt ended for ``reason`` returns ahead of its tier's queue (an expedited requeue),
    and after how long. Only pods lost with their node qualify (``NODE_FAILURE_REASONS``): a preemption or the
    job's own failure never does. ``done``: expedited requeues the job has had; ``limit``: the policy's cap per
    job (``Policy.expedited_requeues``, 0 = off). The back-off (``first_backoff_s``, doubling per expedited
    requeue, at most ``BACKOFF_MAX_S``) lets a flapping node be marked unready before the job comes back, and
    bounds what a job that itself brings nodes down can cost."""
    if reason not in NODE_FAILURE_REASONS:
        return Expedite(False, 0.0, done, "")
    if done >= limit:
        why = "expedited requeue is off" if limit <= 0 else f"its {limit} expedited requeues are used up"
        return Expedite(False, 0.0, done, f"lost its pods to a node failure ({reason}); {why}: it waits in its "
                                          "normal place")
    number = done + 1
    wait = min(BACKOFF_MAX_S, first_backoff_s * 2 ** done)
    return Expedite(True, wait, number,
                    f"lost its pods to a node failure ({reason}): expedited requeue {number} of {limit}, ahead of "
                    f"the {tier} queue after a {wait:g} s back-off")
