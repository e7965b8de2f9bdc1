"""Per-member GPU limits: how many GPUs one member of a department may hold at once (``types.UserLimit``).

A member's limit is their own row, else their department's row for every member (``user`` None), else none.
What a member holds is the GPUs of their running jobs (admitted, running, or being evicted: every job of the
snapshot's ``running``), every flavor and cluster together, plus what this cycle admits for them. A job is
admitted only when its owner's holding stays within the limit after it; one that waits says how much its
owner holds (``user_gpu_limit``). Jobs that already hold more than a lowered limit are never evicted for it:
the limit only keeps new jobs out until the member is back under it. A job larger than the limit itself can
never start (``detail["never"]``), and has no estimated start.

Jobs without an owner (``user == ""``, e.g. trace jobs with no user column) are never limited.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable

from .fractions import plain
from .types import PendingJob, RunningJob, UserLimit

Key = tuple[str, str]  # (department, user)


class UserBook:
    """The cycle's per-member limits and holdings (mutable working state; the snapshot is never changed)."""

    __slots__ = ("own", "default", "held")

    def __init__(self, limits: Iterable[UserLimit], running: Iterable[RunningJob]):
        self.own: dict[Key, int] = {}
        self.default: dict[str, int] = {}
        # Sorted, so a snapshot with two rows for the same member (never stored) decides the same in any order.
        for lim in sorted(limits, key=lambda x: (x.department, x.user or "", x.max_gpus)):
            if lim.user is None:
                self.default[lim.department] = max(0, lim.max_gpus)
            else:
                self.own[(lim.department, lim.user)] = max(0, lim.max_gpus)
        self.held: dict[Key, int] = defaultdict(int)
        if self.own or self.default:
            for job in running:
                if job.user:
                    self.held[(job.department, job.user)] += job.total_gpus

    def clone(self) -> UserBook:
        other = UserBook.__new__(UserBook)
        other.own, other.default, other.held = self.own, self.default, defaultdict(int, self.held)
        return other

    @property
    def active(self) -> bool:
        return bool(self.own or self.default)

    def limit(self, department: str, user: str) -> int | None:
        """The member's limit in GPUs, None when they have none."""
        if not user:
            return None
        found = self.own.get((department, user))
        return self.default.get(department) if found is None else found

    def blocked(self, job: PendingJob) -> dict | None:
        """Why ``job`` may not start now because of its owner's limit (the reason's detail), None when it may."""
        limit = self.limit(job.department, job.user)
        if limit is None:
            return None
        held = self.held.get((job.department, job.user), 0)
        k = job.total_gpus
        if held + k <= limit:
            return None
        detail: dict[str, object] = {"user": job.user, "limit": limit, "held": plain(held), "requested": plain(k)}
        if k > limit:
            detail["never"] = True
        return detail

    def add(self, department: str, user: str, gpus: int) -> None:
        if self.limit(department, user) is not None:
            self.held[(department, user)] += gpus


def limit_note(detail: dict) -> str:
    """The one-line note of a ``user_gpu_limit`` wait."""
    if detail.get("never"):
        return f"the job needs {detail['requested']} GPUs, more than the {detail['limit']} one member may hold"
    return f"{detail['user']} holds {detail['held']} of {detail['limit']} GPUs, {detail['requested']} requested"
