"""The cycle worker's kept job rows (``scheduling.services.job_rows``): a cycle over an unchanged queue reads no
job's row in full, and whatever changed since, by any writer, is read again: the snapshot is the one a full read
gives. PostgreSQL only (the row version is its ``xmin``), with real commits (inside a test's transaction
every row is read in full)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from engine.sweeps import CONDITIONS
from scheduling.models import Cluster, Job, JobDependency, JobState
from scheduling.services import cycle
from scheduling.services.job_rows import JobRows
from scheduling.services.snapshot import build_snapshot

pytestmark = [pytest.mark.postgres, pytest.mark.django_db(transaction=True)]

# A column only a full read of a job selects (the listing of versions selects ids and versions only).
FULL_ROW = '"scheduling_job"."image"'


@pytest.fixture(autouse=True)
def fresh_rows(monkeypatch):
    monkeypatch.setattr(cycle, "ROWS", JobRows())  # nothing kept from another test's database
    return cycle.ROWS


def _waiting(lab, submit, n):
    """n gangs of 2 x 4 GPUs (the whole pool each): one runs, the others wait."""
    return [submit(lab.alice if i % 2 else lab.bob, name=f"w{i}", gpus=4, pods=2) for i in range(n)]


def test_a_cycle_reads_in_full_only_the_rows_others_changed(lab, submit, fresh_rows):
    """The first cycle writes every waiting job's reason and rank and admits one: the next reads in full only
    the admitted job's row (its pods' task wrote it); the reasons and ranks the cycle wrote itself are kept
    as written. After that, cycles over an unchanged queue read no job's row in full."""
    _waiting(lab, submit, 6)
    outcome = cycle.run_cycle()
    assert outcome.admitted == 1 and outcome.reasons_changed == 5
    for _ in range(3):
        with CaptureQueriesContext(connection) as q:
            outcome = cycle.run_cycle()
        assert outcome.admitted == 0 and outcome.pending == 5
        now = timezone.now()
        assert build_snapshot(now=now, rows=JobRows())[0] == build_snapshot(now=now)[0]
        assert build_snapshot(now=now, rows=fresh_rows)[0] == build_snapshot(now=now)[0]
    full = [x["sql"] for x in q.captured_queries if FULL_ROW in x["sql"]]
    assert full == [] and fresh_rows.fetched == 0, "\n".join(full)
    assert len(fresh_rows.rows) == 6


def test_the_cycles_own_reasons_are_kept_as_written(lab, submit, fresh_rows):
    _waiting(lab, submit, 6)
    assert cycle.run_cycle().admitted == 1
    cycle.run_cycle()
    assert fresh_rows.fetched == 1  # the admitted job only


def test_whatever_changed_since_the_last_read_is_read_again(lab, submit):
    rows = JobRows()
    jobs = _waiting(lab, submit, 6)
    assert cycle.run_cycle().admitted == 1
    now = timezone.now()
    first, first_ctx = build_snapshot(now=now, rows=rows)
    again, again_ctx = build_snapshot(now=now, rows=rows)
    # the relations read again are the instances the jobs hold when their rows did not change
    assert all(again_ctx.jobs[pk].owner is first_ctx.jobs[pk].owner for pk in again_ctx.jobs)
    assert again == build_snapshot(now=now)[0] and rows.fetched == 0
    # nothing changed: each waiting job's core.PendingJob is the one made before, not made again
    assert len(again.pending) == 5 and all(a is b for a, b in zip(first.pending, again.pending, strict=True))
    # writes that no model's save announces, and rows of the jobs' relations
    Job.objects.filter(pk=jobs[1].pk).update(pods=1)
    with connection.cursor() as cur:
        cur.execute("UPDATE scheduling_job SET urgency = 'high' WHERE id = %s", [jobs[2].pk])
    Job.objects.filter(pk=jobs[3].pk).update(state=JobState.CANCELLED)
    JobDependency.objects.create(job=jobs[4], condition=sorted(CONDITIONS)[0], on_job=jobs[5])
    lab.bob.username = "robert"
    lab.bob.save()
    lab.nlp.slug = "language"
    lab.nlp.save()
    Cluster.objects.update(reachable=False, last_error="down for the test")
    added = submit(lab.alice, name="late", gpus=1)
    snapshot, ctx = build_snapshot(now=now, rows=rows)
    full, full_ctx = build_snapshot(now=now)
    assert snapshot == full
    assert ctx.jobs.keys() == full_ctx.jobs.keys() and jobs[3].pk not in ctx.jobs
    assert rows.fetched == 3  # the two rewritten rows and the new job
    assert {p.id for p in snapshot.pending if p.after} == {jobs[4].pk}
    assert {p.user for p in snapshot.pending} == {"alice", "robert"} and added.pk in ctx.jobs
    assert all(not n.schedulable for n in snapshot.nodes)


def test_an_apply_that_fails_keeps_nothing_it_may_have_changed(lab, submit, monkeypatch, fresh_rows):
    job = submit(lab.alice, gpus=1)
    cycle.run_cycle()  # admitted (rows kept: none changed in memory since)
    queued = submit(lab.alice, name="next", gpus=1)
    cycle.run_cycle()
    assert fresh_rows.rows

    def broken(**_):
        raise RuntimeError("the outbox went away")

    monkeypatch.setattr(cycle.notify, "job_transitioned", broken)
    another = submit(lab.bob, name="third", gpus=1)
    with pytest.raises(RuntimeError):
        cycle.run_cycle()  # the admission had changed ``another`` in memory, then rolled back
    assert fresh_rows.rows == {}
    assert Job.objects.get(pk=another.pk).state == JobState.QUEUED
    now = timezone.now()
    assert build_snapshot(now=now, rows=fresh_rows)[0] == build_snapshot(now=now)[0]
    assert {job.pk, queued.pk} <= build_snapshot(now=now, rows=fresh_rows)[1].jobs.keys()


def test_a_row_written_by_another_between_the_read_and_the_apply_is_read_again(lab, submit, monkeypatch,
                                                                              fresh_rows):
    jobs = _waiting(lab, submit, 6)
    cycle.run_cycle()
    cycle.run_cycle()
    real = cycle.engine.schedule

    def meanwhile(snapshot):  # after the snapshot, before the apply: another process writes a waiting job
        Job.objects.filter(pk=jobs[4].pk).update(urgency="high")
        fresh_rows.rows[jobs[4].pk][1].reason_message = "as read"  # so that the apply rewrites its reason
        fresh_rows.rows[jobs[4].pk][1].explained_at = None  # (at once: not as if written a moment ago)
        return real(snapshot)

    monkeypatch.setattr(cycle.engine, "schedule", meanwhile)
    assert cycle.run_cycle().reasons_changed == 0  # it rewrote jobs[4]'s message, on top of the other write
    assert Job.objects.get(pk=jobs[4].pk).reason_message != "as read"
    monkeypatch.setattr(cycle.engine, "schedule", real)
    now = timezone.now()
    snapshot, ctx = build_snapshot(now=now, rows=fresh_rows)
    assert snapshot == build_snapshot(now=now)[0] and ctx.jobs[jobs[4].pk].urgency == "high"
    assert fresh_rows.fetched >= 1


def test_figures_alone_are_rewritten_at_most_every_reason_slack(lab, submit, fresh_rows, monkeypatch):
    """A waiting job whose code and estimate stand, whose message's figures alone moved (its department's GPUs
    in use), keeps its stored words for ``REASON_SLACK`` after a cycle wrote them, whichever cycle worker runs
    the next cycle; then they are written. A new code is written at once. Past the head of the queue the
    words wait ``REASON_SLACK_DEEP``."""
    running = [submit(lab.alice, name=f"r{i}", gpus=1) for i in range(2)]
    blocker = submit(lab.bob, name="bob-4", gpus=4)
    start = timezone.now()
    cycle.run_cycle(now=start)
    assert {j.state for j in Job.objects.filter(pk__in=[*map(lambda j: j.pk, running), blocker.pk])} == {
        JobState.ADMITTED}
    waiting = submit(lab.alice, name="gang", gpus=4, pods=2)  # 8 GPUs: over what vision may hold beside its 2
    cycle.run_cycle(now=start + timedelta(seconds=1))
    stored = Job.objects.get(pk=waiting.pk)
    assert stored.state == JobState.QUEUED and "2 of nominal 4 in use" in stored.reason_message
    Job.objects.filter(pk=running[0].pk).update(state=JobState.SUCCEEDED, finished_at=timezone.now())

    fresh_rows.clear()  # another cycle worker (nothing remembered): the row says when its words were written
    cycle.run_cycle(now=start + timedelta(seconds=2))  # 1 in use now: only the figure moved
    again = Job.objects.get(pk=waiting.pk)
    assert (again.reason_code, again.reason_message) == (stored.reason_code, stored.reason_message)

    head = cycle.RANK_HEAD
    monkeypatch.setattr(cycle, "RANK_HEAD", 0)  # the job is deep in the queue: its words wait longer
    cycle.run_cycle(now=start + timedelta(seconds=1) + cycle.REASON_SLACK + timedelta(seconds=1))
    assert Job.objects.get(pk=waiting.pk).reason_message == stored.reason_message
    monkeypatch.setattr(cycle, "RANK_HEAD", head)

    cycle.run_cycle(now=start + timedelta(seconds=1) + cycle.REASON_SLACK + timedelta(seconds=1))
    later = Job.objects.get(pk=waiting.pk)
    assert later.reason_code == stored.reason_code and "1 of nominal 4 in use" in later.reason_message
    assert later.explained_at == start + cycle.REASON_SLACK + timedelta(seconds=2)


def test_past_the_head_the_queue_is_ranked_again_at_most_every_rank_slack(lab, submit, fresh_rows, monkeypatch):
    """Between two rankings of the whole queue, ``RANK_SLACK`` apart, a cycle ranks only the first ``RANK_HEAD``
    jobs of the engine's order: a job that fell out of the head keeps its place on the pages until then."""
    monkeypatch.setattr(cycle, "RANK_HEAD", 2)
    jobs = _waiting(lab, submit, 6)
    start = timezone.now()
    cycle.run_cycle(now=start)
    cycle.run_cycle(now=start + timedelta(seconds=1))

    def by_rank():
        return list(Job.objects.filter(state=JobState.QUEUED).order_by("queue_rank", "id").values_list("pk", flat=True))

    first = by_rank()
    assert len(first) == 5 and {j.pk for j in jobs} > set(first)
    Job.objects.filter(pk=first[0]).update(urgency="low")  # the head leaves the head

    def engine_order(now):
        return [p.job_id for p in cycle.engine.schedule(build_snapshot(now=now)[0]).pending]

    cycle.run_cycle(now=start + timedelta(seconds=2))
    assert engine_order(start + timedelta(seconds=2))[:2] != first[:2]
    assert by_rank() == first  # the new head was in order already; the job that left it keeps its rank

    later = start + timedelta(seconds=1) + cycle.RANK_SLACK
    cycle.run_cycle(now=later)
    assert by_rank() == engine_order(later) != first


def test_the_whole_queue_is_ranked_once_per_rank_slack_whichever_worker_cycles(lab, submit, fresh_rows, monkeypatch):
    """Two cycle workers taking turns: the one whose own whole ranking is older than ``RANK_SLACK`` ranks only
    the head when the other ranked the whole queue since (the time is shared through the cache)."""
    monkeypatch.setattr(cycle, "RANK_HEAD", 2)
    _waiting(lab, submit, 6)
    wholes = []
    real = cycle._rank_changes

    def spy(pending, ctx, ranked_at):
        ranks, whole = real(pending, ctx, ranked_at)
        wholes.append(whole)
        return ranks, whole

    monkeypatch.setattr(cycle, "_rank_changes", spy)
    first, second = fresh_rows, JobRows()
    start = timezone.now()
    for rows, at in ((first, 0), (second, 1), (first, 30.5), (second, 31.5)):
        monkeypatch.setattr(cycle, "ROWS", rows)
        cycle.run_cycle(now=start + timedelta(seconds=at))
    assert cycle.RANK_SLACK == timedelta(seconds=30)
    assert wholes == [True, True, False, True]
