"""The admitted, running and queued Job rows the admission cycle reads, kept between its cycles.

Reading every waiting and active job's full row each cycle, and making a model instance of it, was most of a
cycle's CPU (and of its PostgreSQL backend's) with thousands waiting: a cycle's cost grew with a queue that
had not changed. ``JobRows`` keeps each row with its version and, each cycle, lists the jobs in those states
with their versions (one narrow query) and reads in full only the rows that are new or changed since.

The version is PostgreSQL's ``xmin``, the id of the transaction that wrote this version of the row. Every
write of a row makes a new version carrying the writer's transaction id, whoever writes it (a model's
``save``, a queryset's ``update``, ``bulk_update``, raw SQL, an operator's psql), so no writer can forget to
bump it; a row lock (``SELECT ... FOR UPDATE``) leaves it unchanged, and so does freezing (PostgreSQL keeps
the original ``xmin``). Two versions of a row carry the same ``xmin`` only when one transaction wrote both,
and another connection only ever sees the last of them, or when transaction ids wrap around (after 2^31 of
them): the whole cache is dropped every ``REFRESH_S``, far sooner than that.

So the cache is used only where that holds: on PostgreSQL, outside a transaction (inside one, this
connection's own writes keep one ``xmin`` however often it rewrites a row, which is what a test's transaction
does). Elsewhere, SQLite included, every row is read in full each time, as without a cache.

What is not the job's own row is read each cycle, never kept: its department, flavor, owner, cluster and
array (a slug, a throttle, a cluster's reachability change without the job's row changing), and whether it
has dependencies (they are rows of their own). A row the cycle's apply may have changed in memory is
forgotten after the apply (``forget``), but for the rows whose reasons and ranks alone it wrote, still at the
version the decision read when the apply locked them: those rows in memory are what it wrote, and they are
kept at its transaction's id (``renew``); an apply that fails drops everything (``clear``).
"""

from __future__ import annotations

import time
from datetime import datetime

from django.db import connection
from django.db.models import Exists, OuterRef
from django.db.models.expressions import RawSQL

from scheduling.models import Job, JobDependency, JobState

ACTIVE = (JobState.ADMITTED, JobState.RUNNING)
STATES = (JobState.QUEUED, *ACTIVE)
# What a cycle never reads of a job (its pod spec and stored explanation): not loaded for every waiting and
# running job.
UNUSED_FIELDS = ("command", "env", "reason_detail", "idempotency_key", "request_hash")
# The relations a cycle follows from a job, read afresh every cycle (one query each, ``array`` only when a
# job has one).
RELATED = ("department", "flavor", "owner", "cluster", "array")
# Seconds after which every kept row is read again (see the module's docstring: transaction id wraparound).
REFRESH_S = 600.0
# The row's version: PostgreSQL's xmin as a number.
VERSION = RawSQL('"scheduling_job"."xmin"::text::bigint', ())


def _has_dependencies():
    return Exists(JobDependency.objects.filter(job=OuterRef("pk")))


def read_uncached() -> tuple[list[Job], list[Job]]:
    """The active jobs (newest first) and the queued ones (by id) with their relations, read in full."""
    active = list(Job.objects.filter(state__in=ACTIVE).select_related("department", "flavor", "owner", "cluster")
                  .defer(*UNUSED_FIELDS))
    queued = list(
        Job.objects.filter(state=JobState.QUEUED).select_related("department", "flavor", "owner", "array")
        .annotate(has_dependencies=_has_dependencies()).defer(*UNUSED_FIELDS).order_by("id")
    )
    return active, queued


class JobRows:
    """The cycle worker's rows, by job id: (version, the Job as read at that version)."""

    def __init__(self, *, clock=time.monotonic):
        self.rows: dict[int, tuple[int, Job]] = {}
        # each kept queued job's core.PendingJob by what it was made of (``snapshot.pending_jobs``)
        self.pending: dict[int, tuple] = {}
        # each relation's rows as last read, by relation and id (``_attach_related``)
        self.related: dict[str, dict] = {}
        self.ranked_at: datetime | None = None  # when this process last ranked the whole queue
        self.clock = clock
        self.filled_at = clock()
        self.fetched = 0  # rows read in full by the last ``read`` (what the tests pin)

    def usable(self) -> bool:
        return connection.vendor == "postgresql" and not connection.in_atomic_block

    def clear(self) -> None:
        self.rows, self.pending, self.related = {}, {}, {}
        self.ranked_at = None
        self.filled_at = self.clock()

    def forget(self, ids) -> None:
        for pk in ids:
            self.rows.pop(pk, None)

    def renew(self, ids, version: int | None) -> None:
        """These kept rows were written in memory as the committed transaction ``version`` wrote them in the
        database (the cycle's own reasons and ranks): they are current at that version. Their kept pending
        jobs stay theirs: a pending job is made of none of the columns written (the reason, its detail, the
        estimate, the rank), so only the version it is keyed by moves. Without this a queue whose ranks moved
        (a department's fair share going up and down reorders it) made hundreds of pending jobs again every
        cycle for rows that had changed in nothing they are made of."""
        for pk in ids:
            if pk in self.rows:
                old, job = self.rows[pk]
                job.v = version
                self.rows[pk] = (version, job)
                kept = self.pending.get(pk)
                if kept is not None and kept[0][0] == old:
                    self.pending[pk] = ((version, *kept[0][1:]), kept[1])

    def read(self) -> tuple[list[Job], list[Job]]:
        """What ``read_uncached`` returns, from the kept rows that are still current and a read of the rest."""
        if not self.usable():
            self.clear()  # nothing kept may outlive a stretch in which rows were not checked
            active, queued = read_uncached()
            self.fetched = len(active) + len(queued)
            return active, queued
        if self.clock() - self.filled_at > REFRESH_S:
            self.clear()
        listed = list(Job.objects.filter(state__in=STATES).order_by()
                      .annotate(v=VERSION, has_dependencies=_has_dependencies())
                      .values_list("pk", "v", "has_dependencies"))
        missing = {pk for pk, v, _ in listed if self.rows.get(pk, (None,))[0] != v}
        fresh = self._fetch(sorted(missing), everything=len(missing) * 2 > len(listed))
        kept: dict[int, tuple[int, Job]] = {}
        for pk, _v, has_deps in listed:
            row = fresh.get(pk) if pk in missing else self.rows[pk]
            if row is None:  # left these states between the two reads: not in this cycle
                continue
            row[1].has_dependencies = has_deps
            kept[pk] = row
        self.rows, self.fetched = kept, len(fresh)
        jobs = [job for _, job in kept.values()]
        self._attach_related(jobs, [job for _, job in fresh.values()])
        active = sorted((j for j in jobs if j.state in ACTIVE), key=lambda j: (j.submitted_at, j.pk), reverse=True)
        queued = sorted((j for j in jobs if j.state == JobState.QUEUED), key=lambda j: j.pk)
        return active, queued

    def _attach_related(self, jobs: list[Job], fresh: list[Job]) -> None:
        """Give every job its department, flavor, owner, cluster and array as they are now (one query each).

        A related row equal to the instance the jobs already hold (every column, as read now against that
        instance as it is now) stays that instance, so only the rows read in full this cycle are given theirs,
        unless one of a relation's rows changed: then every job is given that relation's afresh. The id
        columns come straight from the instances' dicts, and the relations go into the instances' caches as
        select_related fills them: no descriptor call per job and relation."""
        fields = [Job._meta.get_field(name) for name in RELATED]
        ids: dict[str, set] = {f.name: set() for f in fields}
        for j in jobs:
            d = j.__dict__
            for f in fields:
                ids[f.name].add(d[f.attname])
        for f in fields:
            wanted = ids[f.name] - {None}
            found = f.related_model._base_manager.in_bulk(wanted) if wanted else {}
            before = self.related.get(f.name, {})
            current = {pk: before[pk] if pk in before and _same(before[pk], row) else row for pk, row in found.items()}
            self.related[f.name] = current
            changed = any(current[pk] is not before.get(pk) for pk in current)
            for j in jobs if changed else fresh:
                j._state.fields_cache[f.name] = current.get(j.__dict__[f.attname])

    def _fetch(self, ids: list[int], *, everything: bool) -> dict[int, tuple[int, Job]]:
        """The full rows of ``ids`` (still in the cycle's states) with their versions; every such row when
        ``everything`` (most are wanted: no list of ids to send)."""
        if not ids:
            return {}
        rows = Job.objects.filter(state__in=STATES).defer(*UNUSED_FIELDS).annotate(v=VERSION).order_by()
        if not everything:
            rows = rows.filter(pk__in=ids)
        return {j.pk: (j.v, j) for j in rows}


def _same(kept, row) -> bool:
    """Whether a kept related instance holds what its row holds now, column by column."""
    return all(getattr(kept, f.attname) == getattr(row, f.attname) for f in row._meta.concrete_fields)
