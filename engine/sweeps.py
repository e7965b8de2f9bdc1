"""The gates of sweeps and pipelines: whether a pending job may be considered for admission at all.

In the order the engine asks them (the first that closes is the job's reason):

1. **Held** (``PendingJob.held``): its owner or a department admin holds it. It keeps its submission time, so
   its place in the queue, but is never admitted (reason ``held``, no estimated start: a person releases it).
2. **Dependencies** (``PendingJob.after``): each ``Dependency`` names jobs (one job, or every task of an array)
   and a condition, as Slurm's ``--dependency``:

   * ``afterok``: every one of them succeeded;
   * ``afterany``: every one of them ended, however;
   * ``afternotok``: every one of them ended, and at least one did not succeed (failed or cancelled).

   All dependencies must be met. While one is not, the job waits (``waiting_for_dependency``, the detail names
   the first unmet one in the order given). A dependency that can no longer be met (an ``afterok`` job
   failed; every ``afternotok`` job succeeded) is ``dependency_never_satisfied``: the portal ends the job.
3. **Array throttle** (``PendingJob.array_throttle``): at most that many tasks of the array are admitted or
   running at once (``array_throttled``); the cycle's own admissions count as they happen.

Estimated starts (``dependency_ready``): a job waiting for dependencies starts no earlier than the estimated
end of every job it waits for: a running job's declared end (started + max runtime), a pending job's estimated
start + its max runtime (itself no earlier than its own dependencies' ends); unknown when any of them is
unknown (not estimated, awaiting approval, held).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping

from . import reasons
from .types import Dependency, PendingJob, Snapshot

AFTER_OK = "afterok"
AFTER_ANY = "afterany"
AFTER_NOT_OK = "afternotok"
CONDITIONS: tuple[str, ...] = (AFTER_OK, AFTER_ANY, AFTER_NOT_OK)
CONDITION_TEXT = {AFTER_OK: "after success", AFTER_ANY: "after any end", AFTER_NOT_OK: "after failure"}
SUCCEEDED = "succeeded"

MET, WAITING, NEVER = "met", "waiting", "never"


def dependency_status(dep: Dependency, ended: Mapping[int, str]) -> str:
    """``MET``, ``WAITING`` or ``NEVER`` for one dependency, from how its jobs ended (absent: not ended)."""
    outcomes = [ended.get(i) for i in dep.job_ids]
    done = all(o is not None for o in outcomes)
    if dep.condition == AFTER_OK:
        if any(o is not None and o != SUCCEEDED for o in outcomes):
            return NEVER
        return MET if done else WAITING
    if dep.condition == AFTER_NOT_OK:
        if not done:
            return WAITING
        return MET if any(o != SUCCEEDED for o in outcomes) else NEVER
    return MET if done else WAITING  # afterany (and any condition the core does not know: wait for the end)


class Gates:
    """The gates over one snapshot; ``admitted`` counts a task the cycle admits against its array's throttle."""

    def __init__(self, snapshot: Snapshot):
        self.ended = snapshot.ended
        self.array_active: Counter[int] = Counter(j.array_id for j in snapshot.running if j.array_id is not None)

    def clone(self) -> Gates:
        other = Gates.__new__(Gates)
        other.ended, other.array_active = self.ended, Counter(self.array_active)
        return other

    def check(self, job: PendingJob) -> tuple[str, dict, str] | None:
        """(reason code, detail, note) of the first gate closed to ``job``, or None when every one is open."""
        if job.held:
            return reasons.HELD, {}, ""
        for dep in job.after:
            status = dependency_status(dep, self.ended)
            if status == MET:
                continue
            detail = {"dependency": dep.label, "condition": dep.condition, "jobs": len(dep.job_ids),
                      "unfinished": sum(1 for i in dep.job_ids if i not in self.ended)}
            if status == NEVER:
                failed = sorted(i for i in dep.job_ids if self.ended.get(i, SUCCEEDED) != SUCCEEDED)
                detail["ended"] = {str(i): self.ended[i] for i in (failed or sorted(dep.job_ids))[:20]}
                return (reasons.DEPENDENCY_NEVER_SATISFIED, detail,
                        f"{dep.label} ended and {dep.condition} ({CONDITION_TEXT.get(dep.condition, '')}) "
                        "cannot be met")
            return reasons.WAITING_FOR_DEPENDENCY, detail, f"{dep.label} ({dep.condition})"
        if job.array_id is not None and job.array_throttle:
            active = self.array_active[job.array_id]
            if active >= job.array_throttle:
                return (reasons.ARRAY_THROTTLED, {"array": job.array_id, "throttle": job.array_throttle,
                                                  "active": active},
                        f"{active} of array {job.array_id}'s tasks are admitted or running, its throttle is "
                        f"{job.array_throttle}")
        return None

    def admitted(self, job: PendingJob) -> None:
        if job.array_id is not None:
            self.array_active[job.array_id] += 1


def dependency_ready(
    jobs: Mapping[int, PendingJob],
    estimates: Mapping[int, float | None],
    running_end: Mapping[int, float],
    ended: Mapping[int, str],
    now: float,
) -> dict[int, float | None]:
    """For every pending job with dependencies: the instant all of them are estimated to have ended (None:
    unknown). A pending dependency ends at its estimated start (or its own readiness, if later) plus its max
    runtime; a cycle of dependencies, which submission refuses, is unknown."""
    ready: dict[int, float | None] = {}
    visiting: set[int] = set()

    def end_of(job_id: int) -> float | None:
        if job_id in ended:
            return now
        if job_id in running_end:
            return max(now, running_end[job_id])
        job = jobs.get(job_id)
        if job is None:
            return None
        start = estimates.get(job_id)
        if start is None:
            return None
        if job.after:
            r = ready_of(job)
            if r is None:
                return None
            start = max(start, r)
        return start + job.max_runtime_s

    def ready_of(job: PendingJob) -> float | None:
        if job.id in ready:
            return ready[job.id]
        if job.id in visiting:
            return None
        visiting.add(job.id)
        when: float | None = now
        for dep in job.after:
            for i in dep.job_ids:
                end = end_of(i)
                if end is None:
                    when = None
                    break
                when = max(when, end)
            if when is None:
                break
        visiting.discard(job.id)
        ready[job.id] = when
        return when

    for job in sorted(jobs.values(), key=lambda j: j.id):
        if job.after:
            ready_of(job)
    return ready


def parse_after(text: str) -> list[dict]:
    """Slurm's dependency syntax as the API's ``after`` list: ``afterok:12:13,afterany:a7`` -> [{"condition":
    "afterok", "job": 12}, {"condition": "afterok", "job": 13}, {"condition": "afterany", "array": 7}]. A job
    is its id, an array ``a`` and its id. Raises ValueError with what to write instead."""
    out: list[dict] = []
    for part in (p.strip() for p in text.split(",")):
        if not part:
            continue
        condition, _, ids = part.partition(":")
        if condition not in CONDITIONS:
            raise ValueError(f"{part!r}: start with one of {', '.join(CONDITIONS)} (e.g. afterok:12).")
        if not ids:
            raise ValueError(f"{part!r}: name at least one job (afterok:12) or array (afterok:a7).")
        for ref in ids.split(":"):
            ref = ref.strip()
            if ref.isdigit() and len(ref) > 18:
                raise ValueError(f"{ref!r} in {part!r} is not an id.")
            if ref.isdigit():
                out.append({"condition": condition, "job": int(ref)})
            elif ref[:1] in ("a", "A") and ref[1:].isdigit() and len(ref) <= 19:
                out.append({"condition": condition, "array": int(ref[1:])})
            else:
                raise ValueError(f"{ref!r} in {part!r} is neither a job id (12) nor an array (a7).")
    return out
