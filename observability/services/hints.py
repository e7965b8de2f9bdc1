"""Troubleshooting hints: one rule per table entry, each from data the portal already has (the job, its
timeline, its preemptions, its measured GPU use). A rule returns a ``Hint`` or None; add a rule by writing a
function and listing it in ``RULES`` (and a test in tests/observability/test_hints.py).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from engine import tiers
from observability.services import rightsizing
from observability.services.series import HIGH_PCT, LOW_PCT
from scheduling import failure_hints
from scheduling.models import JobState

IMAGE_REASONS = failure_hints.reasons_of("image_pull")
OOM_REASONS = failure_hints.reasons_of("oom_killed")
SIGKILL_EXIT = 137  # 128 + SIGKILL


@dataclass(frozen=True)
class Hint:
    code: str
    title: str
    advice: str
    data: dict = field(default_factory=dict)


@dataclass
class Facts:
    """What a rule may look at: the job, its timeline (oldest first), its attempts' GPU use (by attempt), and
    its preemption victims (rows with eviction_requested_at / evicted_at)."""

    job: object
    events: list
    usages: list
    victims: list

    @property
    def latest_usage(self):
        measured = [u for u in self.usages if u.samples]
        return max(measured, key=lambda u: u.attempt) if measured else None

    def reasons(self) -> set[str]:
        return {e.reason_code for e in self.events if e.reason_code} | {self.job.reason_code}


def sawtooth(f: Facts) -> Hint | None:
    """Utilisation swinging between starved and busy: the input pipeline cannot keep the GPUs fed."""
    u = f.latest_usage
    shape = (u.shape if u else None) or {}
    if not u or u.samples < 10 or shape.get("swings", 0) < 4:
        return None
    if shape.get("low", 0) < 0.2 or shape.get("high", 0) < 0.2:
        return None
    return Hint("sawtooth", "GPUs wait for data",
                f"Utilisation swings between under {LOW_PCT:g}% ({shape['low']:.0%} of the time) and over "
                f"{HIGH_PCT:g}% ({shape['high']:.0%}), {shape['swings']} times: the input pipeline is the "
                "bottleneck. Use more data-loader workers, pin memory and prefetch, or copy the dataset to local "
                f"disk first; or run the clone with CPU data workers beside the trainers: gpup clone {f.job.pk} "
                "--add-data-workers 4 (docs/workloads.md, \"Add data workers\").",
                {**shape, "add_data_workers": f"/api/v1/jobs/{f.job.pk}/spec?add_data_workers=4"})


def oom_killed(f: Facts) -> Hint | None:
    """The container went over its memory limit: suggest a limit from the observed peak."""
    if not (f.reasons() & OOM_REASONS):
        return None
    limit = f.job.memory_mib
    peaks = [u.host_memory_peak_mib for u in f.usages if u.host_memory_peak_mib]
    peak = max(peaks) if peaks else None
    suggest = int(math.ceil(max(limit, peak or 0) * 1.5 / 1024) * 1024)
    seen = f"; the highest use observed was {peak:.0f} MiB" if peak else ""
    return Hint("oom_killed", failure_hints.BY_REASON["OOMKilled"].title,
                f"The container used more than its memory limit of {limit} MiB (OOMKilled){seen}. Ask for "
                f"memory_mib={suggest}, or lower the batch size or the data loader's prefetch.",
                {"memory_mib": limit, "observed_peak_mib": peak, "suggested_memory_mib": suggest})


def sigkill_after_sigterm(f: Facts) -> Hint | None:
    """A preempted attempt that did not exit within its grace period was killed (SIGKILL after SIGTERM)."""
    grace = f.job.termination_grace_s
    killed = [e.attempt for e in f.events if e.to_state == JobState.PREEMPTED
              and (e.data or {}).get("exit_code") == SIGKILL_EXIT]
    for v in f.victims:
        if v.eviction_requested_at and v.evicted_at and \
                (v.evicted_at - v.eviction_requested_at).total_seconds() >= grace:
            killed.append(v.attempt)
    if not killed:
        return None
    return Hint("sigkill_after_sigterm", "Killed at the end of its grace period",
                f"When preempted, attempt {sorted(set(killed))[0]} did not exit within its {grace} s grace "
                "period and was killed (SIGKILL after SIGTERM), losing the work since its last checkpoint. "
                "Handle SIGTERM by saving a checkpoint and exiting, or ask for a longer termination_grace_s.",
                {"attempts": sorted(set(killed)), "termination_grace_s": grace})


def repeated_preemption(f: Facts) -> Hint | None:
    """Preempted again and again: a steadier tier, or checkpoints often enough to lose little each time."""
    n = f.job.preemption_count
    if n < 2:
        return None
    runs = [(u.ended_at - u.started_at).total_seconds() for u in f.usages if u.ended_at and u.started_at]
    between = sum(runs) / len(runs) if runs else None
    interval = f.job.checkpoint_interval_s
    advice = [f"Preempted {n} times."]
    tier = tiers.BY_NAME.get(f.job.tier)
    if tier is not None and tier.preemption_hint:
        advice.append(tier.preemption_hint)
    suggest = None
    if between:
        suggest = max(60, int(between / 2))
        if interval is None or interval > suggest:
            advice.append(f"Attempts ran about {between / 60:.0f} minutes each: checkpoint every {suggest} s "
                          "or less (checkpoint_interval_s) so a preemption loses little.")
    elif interval is None:
        advice.append("Declare a checkpoint_interval_s: the scheduler then prefers to preempt right after one.")
    return Hint("repeated_preemption", "Preempted repeatedly", " ".join(advice),
                {"preemptions": n, "tier": f.job.tier, "suggested_checkpoint_interval_s": suggest})


def image_pull(f: Facts) -> Hint | None:
    """The image could not be pulled."""
    found = f.reasons() & IMAGE_REASONS
    if not found:
        return None
    return Hint("image_pull", failure_hints.BY_REASON["ImagePullBackOff"].title,
                f"{sorted(found)[0]}: check the image name and tag ({f.job.image}), that the registry is "
                "reachable from the cluster, and that the department's pull secret covers it.",
                {"reasons": sorted(found), "image": f.job.image})


def never_fits(f: Facts) -> Hint | None:
    """A pending job the scheduler says can never start as asked."""
    detail = f.job.reason_detail or {}
    if f.job.state != JobState.QUEUED or not detail.get("never"):
        return None
    facts = ", ".join(f"{k}={v}" for k, v in sorted(detail.items()) if k != "never")
    return Hint("never_fits", "This job can never start as asked",
                f"{f.job.reason_message or f.job.reason_code} ({f.job.reason_code}; {facts}). Ask for fewer GPUs, "
                "another flavor, or a larger quota from your department's admin; cancel it meanwhile.",
                {"reason_code": f.job.reason_code, **{k: v for k, v in detail.items() if k != "never"}})


def failed(f: Facts) -> Hint | None:
    """A failed job: the advice its failure notification gave (the one table of failure hints), unless a rule
    above said the same with the job's own numbers (the same code). A reason of its timeline's counts too (an
    image that could not be pulled, then a plain error)."""
    if f.job.state != JobState.FAILED:
        return None
    own = sorted(r for r in f.reasons() if failure_hints.BY_REASON.get(r, failure_hints.GENERIC)
                 is not failure_hints.GENERIC)
    h = failure_hints.failure_hint(own[0] if own else f.job.reason_code, f.job.exit_code)
    return Hint(h.code, h.title, h.advice, {"reason_code": f.job.reason_code, "exit_code": f.job.exit_code})


def fits_fraction(f: Facts) -> Hint | None:
    """A whole-GPU job on a flavor that shares its GPUs whose measured use fits in a fraction of one: say which
    fraction, and what it would cost an hour against the whole GPUs."""
    u, job = f.latest_usage, f.job
    if u is None or u.samples < rightsizing.MIN_SAMPLES or job.share_milli:
        return None
    peak, measured_by = rightsizing.peak_of(u, fraction=False)
    fit = rightsizing.fraction_fit(peak_memory_mib=peak, busy_gpus=u.busy_gpus, gpus_held=u.gpus, flavor=job.flavor)
    if fit is None:
        return None
    what = "this notebook" if job.kind == "session" else "this job"
    advice = rightsizing.fraction_advice(fit, flavor=job.flavor, tier=job.tier, whole_gpus=job.total_gpus,
                                         what=what, source=measured_by)
    return Hint("fits_fraction", "A fraction of a GPU would do",
                advice["text"][0].upper() + advice["text"][1:] + ". Ask for it next time (docs/fractions.md).",
                advice)


RULES: tuple[Callable[[Facts], Hint | None], ...] = (
    never_fits, image_pull, oom_killed, sigkill_after_sigterm, repeated_preemption, sawtooth, failed,
    fits_fraction,
)


def hints(facts: Facts) -> list[Hint]:
    """Every rule's hint, in ``RULES`` order; of two with the same code the first (the more precise) is kept."""
    found: dict[str, Hint] = {}
    for rule in RULES:
        h = rule(facts)
        if h is not None and h.code not in found:
            found[h.code] = h
    return list(found.values())
