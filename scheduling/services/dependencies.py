"""Dependencies between jobs: what a submission may wait for (jobs and arrays of its own department), storing
them, and changing a waiting job's dependencies without making a cycle. The engine decides when they are met
(``engine.sweeps``)."""

from __future__ import annotations

from collections import defaultdict

from django.db import transaction
from django.utils import timezone

from engine import sweeps as core_sweeps
from engine.types import Dependency
from portal.errors import Forbidden, InvalidTransition, ValidationFailed
from portal.tenancy import can_manage_job
from scheduling.models import FINAL_STATES, Job, JobArray, JobDependency, JobEvent, JobState

MAX_DEPENDENCIES = 100  # named jobs and arrays per job
# The states a job's dependencies may still change in (it has not started).
WAITING = (JobState.PENDING_APPROVAL, JobState.QUEUED)


def _error(field: str, code: str, message: str) -> ValidationFailed:
    return ValidationFailed(fields={field: [{"code": code, "message": message}]})


def resolve_after(*, department_id: int, items: list[dict], batch: bool = False) -> list[list[tuple]]:
    """Each item's ``after`` (the serializer's shape: ``{"condition", "job" | "array"}``) as (condition, job id,
    array id) triples, checked in one read of the named jobs and arrays of ``department_id``. A job or array
    that does not exist, or belongs to another department, is the same 400 ("no job 12 in your department"),
    and so is a dependency that can already never be met (an ``afterok`` job that failed)."""
    wanted_jobs = {d["job"] for item in items for d in item.get("after") or () if "job" in d}
    wanted_arrays = {d["array"] for item in items for d in item.get("after") or () if "array" in d}
    if not wanted_jobs and not wanted_arrays:
        return [[] for _ in items]
    states = dict(Job.objects.filter(department_id=department_id, pk__in=wanted_jobs).values_list("pk", "state"))
    arrays = set(JobArray.objects.filter(department_id=department_id, pk__in=wanted_arrays).values_list("pk", flat=True))
    tasks: dict[int, dict[int, str]] = defaultdict(dict)
    if arrays:
        for array_id, pk, state in Job.objects.filter(array_id__in=arrays).values_list("array_id", "pk", "state"):
            tasks[array_id][pk] = state
    out = []
    for i, item in enumerate(items):
        field = f"jobs.{i}.after" if batch else "after"
        triples = []
        for d in item.get("after") or ():
            if "job" in d:
                if d["job"] not in states:
                    raise _error(field, "unknown_job", f"No job {d['job']} in your department.")
                ended = {d["job"]: states[d["job"]]} if states[d["job"]] in FINAL_STATES else {}
                dep = Dependency(d["condition"], (d["job"],), f"job {d['job']}")
            else:
                if d["array"] not in arrays:
                    raise _error(field, "unknown_array", f"No array {d['array']} in your department.")
                members = tasks[d["array"]]
                ended = {pk: s for pk, s in members.items() if s in FINAL_STATES}
                dep = Dependency(d["condition"], tuple(members), f"array {d['array']}")
            if core_sweeps.dependency_status(dep, ended) == core_sweeps.NEVER:
                raise _error(field, "never_satisfied",
                             f"{dep.label} already ended: {d['condition']} can never be met.")
            triples.append((d["condition"], d.get("job"), d.get("array")))
        out.append(triples)
    return out


def store_dependencies(*, jobs: list[Job], after: list[list[tuple]]) -> None:
    """The dependency rows of new jobs (saved), one INSERT for all of them."""
    rows = [JobDependency(job=job, condition=c, on_job_id=j, on_array_id=a)
            for job, triples in zip(jobs, after, strict=True) for c, j, a in triples]
    if rows:
        JobDependency.objects.bulk_create(rows)
    # Each new job knows its dependencies (as if prefetched): rendering a batch reads none of them again.
    mine: dict[int, list[JobDependency]] = defaultdict(list)
    for row in rows:
        mine[row.job_id].append(row)
    for job in jobs:
        qs = job.dependencies.all()
        qs._result_cache, qs._prefetch_done = mine[job.pk], True
        cache = getattr(job, "_prefetched_objects_cache", None)
        if cache is None:
            job._prefetched_objects_cache = cache = {}
        cache["dependencies"] = qs


def dependencies_of(job: Job) -> list[dict]:
    """The job's dependencies as the API shows them (``{"condition", "job" | "array"}``), in the order given."""
    return [{"condition": d.condition, **({"job": d.on_job_id} if d.on_job_id else {"array": d.on_array_id})}
            for d in job.dependencies.all()]


def job_set_dependencies(*, user, job: Job, after: list[dict]) -> Job:
    """Replace what a waiting job waits for (Slurm's ``scontrol update dependency``). The owner or a department
    admin; a started or ended job refuses. A set that would close a cycle (the job would wait, through others,
    for itself) is a 400 naming the cycle. Recorded on the job's timeline."""
    if not can_manage_job(user, job):
        raise Forbidden("Only the job's owner or a department admin can change its dependencies.")
    [triples] = resolve_after(department_id=job.department_id, items=[{"after": after}])
    cycle = find_cycle(job=job, triples=triples)
    if cycle:
        raise _error("after", "cycle", "This would make a cycle: " + " -> ".join(cycle) + ".")
    with transaction.atomic():
        if not Job.objects.select_for_update().filter(pk=job.pk, state__in=WAITING).exists():
            raise InvalidTransition(f"The job is {job.state}: only a waiting job's dependencies can change.")
        JobDependency.objects.filter(job=job).delete()
        store_dependencies(jobs=[job], after=[triples])
        listed = ", ".join(f"{c} {'job ' + str(j) if j else 'array ' + str(a)}" for c, j, a in triples) or "nothing"
        JobEvent.objects.create(job=job, kind="dependencies", reason_code="dependencies_changed",
                                message=f"now waits for {listed}"[:500], attempt=job.attempt, actor=user,
                                at=timezone.now(), data={"after": [list(t) for t in triples]})
    return job


def find_cycle(*, job: Job, triples: list[tuple]) -> list[str]:
    """The path by which ``job`` would wait for itself if it waited for ``triples`` (empty: no cycle). Reads the
    waiting jobs' dependencies of its department and the tasks of the arrays they name (two queries)."""
    edges: dict[int, list[tuple[int | None, int | None]]] = defaultdict(list)
    for pk, on_job, on_array in (JobDependency.objects.filter(job__department_id=job.department_id,
                                                              job__state__in=WAITING)
                                 .exclude(job_id=job.pk).values_list("job_id", "on_job_id", "on_array_id")):
        edges[pk].append((on_job, on_array))
    edges[job.pk] = [(j, a) for _, j, a in triples]
    arrays = {a for targets in edges.values() for _, a in targets if a is not None}
    tasks: dict[int, list[int]] = defaultdict(list)
    for array_id, pk in Job.objects.filter(array_id__in=arrays).order_by("pk").values_list("array_id", "pk"):
        tasks[array_id].append(pk)
    # Depth-first from the job along "waits for": reaching the job again is a cycle.
    stack: list[tuple[int, list[str]]] = [(job.pk, [f"job {job.pk}"])]
    seen: set[int] = set()
    while stack:
        node, path = stack.pop()
        for on_job, on_array in edges.get(node, ()):
            nexts = [(on_job, f"job {on_job}")] if on_job else [(t, f"array {on_array} (job {t})")
                                                                 for t in tasks.get(on_array, ())]
            for nxt, label in nexts:
                if nxt == job.pk:
                    return [*path, label]
                if nxt not in seen:
                    seen.add(nxt)
                    stack.append((nxt, [*path, label]))
    return []
