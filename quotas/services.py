"""Quota and budget use cases called by the job lifecycle.

Budgets, holds and approvals (issue 5) plug in here: ``approval_required`` decides whether a new job waits
for a department admin, ``available_credits`` feeds the engine's snapshot, ``on_attempt_ended`` settles.
Until department rules or wallets exist, every job is approved automatically and credits are not enforced.
"""

from __future__ import annotations


def approval_required(*, job) -> str | None:
    """Why ``job`` must wait for a department admin's approval, or None to queue it directly."""
    return None


def available_credits() -> dict[str, int] | None:
    """Credits each department can still commit to holds; None when budgets are not enforced."""
    return None


def hold_for(*, job, now) -> int:
    """Credits a job needs held to be admitted (0 while budgets are not enforced)."""
    return 0


def on_attempt_ended(*, job, attempt: int, outcome: str) -> None:
    """Settle, release or refund the hold of one attempt of ``job``.

    ``outcome``: succeeded | failed | cancelled | preempted | platform_failure. No-op while budgets are not
    enforced."""
    return None


def on_job_admitted(*, job) -> None:
    """Place the job's hold when it is admitted (no-op while budgets are not enforced)."""
    return None
