"""Logs that stay: an attempt's log tail is kept when it ends (finished, preempted, cancelled), read from the
cluster while it runs, shown as a page with the attempt chosen, followed with ETags, and deleted after the
retention period."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.timestamps import split_log_stamp
from scheduling.models import AttemptLog, Job, JobState, SimPod
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.lifecycle import requeue
from scheduling.services.logs import cleanup_logs, keep_attempt_log, tail_bytes

pytestmark = pytest.mark.django_db


def _run(go):
    go(run_cycle)
    go(sync_cluster)


def _finish(go):
    SimPod.objects.filter(phase="Running").update(started_at=timezone.now() - timedelta(days=1))
    go(sync_cluster)


def test_a_finished_attempt_keeps_its_log_after_its_pods_are_gone(lab, submit, go, client_for):
    job = submit(lab.alice, command=["python", "train.py"])
    _run(go)
    _finish(go)
    job.refresh_from_db()
    assert job.state == JobState.SUCCEEDED
    kept = AttemptLog.objects.get(job=job, attempt=1)
    # Kept with each line's time stamp, so that a follower resumes from its last line after the pods are gone.
    assert [split_log_stamp(x)[1] for x in kept.text.splitlines()] == ["$ python train.py", "done"]
    assert kept.stamped and not kept.truncated
    SimPod.objects.filter(job_id=job.pk).delete()  # the cluster forgets the pod
    r = client_for(lab.alice).get(f"/api/v1/jobs/{job.pk}/logs")
    assert r.status_code == 200 and b"".join(r.streaming_content) == b"$ python train.py\ndone\n"


def test_a_preempted_attempt_keeps_its_log_and_the_page_selects_attempts(lab, submit, go, client):
    job = submit(lab.alice, command=["python", "train.py"])
    _run(go)
    job.refresh_from_db()
    with_pods = SimPod.objects.filter(job_id=job.pk, attempt=1)
    with_pods.update(log="epoch 1\nepoch 2")
    go(requeue, job=job, outcome="preempted", reason="preempted", message="preempted for a test")
    job.refresh_from_db()
    assert job.attempt == 2 and job.state == JobState.QUEUED
    assert _unstamped(AttemptLog.objects.get(job=job, attempt=1)).startswith("epoch 1\nepoch 2")
    assert not SimPod.objects.filter(job_id=job.pk, attempt=1).exists()

    client.force_login(lab.alice)
    page = client.get(f"/jobs/{job.pk}/logs/?attempt=1").content.decode()
    assert "epoch 2" in page and "Attempt 2 (current)" in page and 'data-source="kept"' in page
    current = client.get(f"/jobs/{job.pk}/logs/").content.decode()
    assert "epoch 2" not in current and "data-follow=" in current  # queued: live, followed
    # the job page links to the page, not to raw API text
    assert f'href="/jobs/{job.pk}/logs/"' in client.get(f"/jobs/{job.pk}/").content.decode()


def test_following_a_live_log_answers_304_while_nothing_changed(lab, submit, go, client):
    job = submit(lab.alice)
    _run(go)
    client.force_login(lab.alice)
    first = client.get(f"/jobs/{job.pk}/logs/text")
    assert first.status_code == 200 and first["X-Log-Live"] == "1"
    again = client.get(f"/jobs/{job.pk}/logs/text", HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304 and again.content == b""
    SimPod.objects.filter(job_id=job.pk).update(log="$ python train.py\nstep 1")
    changed = client.get(f"/jobs/{job.pk}/logs/text", HTTP_IF_NONE_MATCH=first["ETag"])
    assert changed.status_code == 200 and b"step 1" in changed.content


def test_only_the_owner_and_admins_read_logs_and_other_departments_get_404(lab, submit, client):
    job = submit(lab.alice)
    client.force_login(lab.amy)  # same department, not the owner
    assert client.get(f"/jobs/{job.pk}/logs/").status_code == 403
    client.force_login(lab.vadmin)
    assert client.get(f"/jobs/{job.pk}/logs/").status_code == 200
    client.force_login(lab.bob)
    assert client.get(f"/jobs/{job.pk}/logs/").status_code == 404
    assert client.get(f"/jobs/{job.pk}/logs/text").status_code == 404
    assert AttemptLog.objects.restrict(lab.bob, "view").count() == 0


def test_only_the_tail_is_kept(settings, lab, submit, go):
    settings.LOG_KEEP_KB = 1
    job = submit(lab.alice)
    _run(go)
    SimPod.objects.filter(job_id=job.pk).update(log="\n".join(f"line {i:04d}" for i in range(500)))
    Job.objects.filter(pk=job.pk).update(state=JobState.FAILED)
    kept = keep_attempt_log(job_id=job.pk, attempt=1)
    assert kept.truncated and len(kept.text.encode()) <= 1024
    assert "line 0499" in kept.text and "line 0000" not in kept.text and " line " in kept.text.splitlines()[0]
    assert keep_attempt_log(job_id=job.pk, attempt=1).pk == kept.pk  # idempotent


def test_tail_bytes_cuts_at_a_line_start_and_never_splits_a_character():
    text, cut = tail_bytes(["héllo wörld"] * 10, 30)
    assert cut and len(text.encode()) <= 30 and set(text.splitlines()) == {"héllo wörld"}
    assert tail_bytes(["a", "b"], 100) == ("a\nb", False)


def test_a_live_attempt_is_not_kept_and_old_logs_are_cleaned_up(settings, lab, submit, go):
    job = submit(lab.alice)
    _run(go)
    assert keep_attempt_log(job_id=job.pk, attempt=1) is None
    settings.LOG_RETENTION_DAYS = 7
    old = AttemptLog.objects.create(job=job, attempt=9, text="x", kept_at=timezone.now() - timedelta(days=8))
    fresh = AttemptLog.objects.create(job=job, attempt=8, text="y")
    assert cleanup_logs() == 1
    assert not AttemptLog.objects.filter(pk=old.pk).exists() and AttemptLog.objects.filter(pk=fresh.pk).exists()


def _unstamped(kept: AttemptLog) -> str:
    return "\n".join(split_log_stamp(line)[1] for line in kept.text.splitlines())


def test_the_logs_of_many_ended_attempts_are_kept_with_two_reads_for_all_and_a_failure_is_retried_alone(
        lab, submit, go, monkeypatch):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from scheduling import tasks
    from scheduling.services import logs

    jobs = [submit(lab.alice if i % 2 else lab.bob, name=f"k{i}", command=["echo", str(i)]) for i in range(6)]
    live = submit(lab.alice, name="live")
    Job.objects.filter(pk=live.pk).update(state=JobState.CANCELLED)  # out of the cycle's way
    _run(go)
    Job.objects.filter(pk=live.pk).update(state=JobState.QUEUED)  # still live: never kept
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(state=JobState.SUCCEEDED)

    def keep(some) -> int:
        with CaptureQueriesContext(connection) as q:
            assert logs.keep_attempt_logs(pairs=[(j.pk, 1) for j in some]) == []
        return len(q.captured_queries)

    one, three = keep(jobs[:1]), keep(jobs[1:4])
    per_pod = (three - one) // 2  # reading the pod's log: the rest is read, and stored, once for all pairs
    assert per_pod == 1 and three - one == 2 * per_pod and one == 3 + per_pod
    assert keep(jobs[:4]) == 2  # all kept already: nothing read again
    real, retried = logs._pod_log_row, []
    monkeypatch.setattr(logs, "_pod_log_row", lambda job, *a: 1 / 0 if job.pk == jobs[4].pk else real(job, *a))
    monkeypatch.setattr(tasks.keep_log, "delay", lambda *args: retried.append(args))
    assert tasks.keep_logs([[j.pk, 1] for j in jobs] + [[live.pk, 1]]) == {"done": 6, "retrying": 1}
    assert retried == [(jobs[4].pk, 1)]
    assert set(AttemptLog.objects.values_list("job_id", flat=True)) == {j.pk for j in jobs} - {jobs[4].pk}
    assert split_log_stamp(AttemptLog.objects.get(job=jobs[5]).text.splitlines()[0])[1] == "$ echo 5"


def test_a_log_kept_meanwhile_by_another_task_stays_and_the_others_are_kept_together(lab, submit, go, monkeypatch):
    from scheduling.services import logs

    jobs = [submit(lab.alice, name=f"m{i}", command=["echo", str(i)]) for i in range(3)]
    _run(go)
    Job.objects.filter(pk__in=[j.pk for j in jobs]).update(state=JobState.SUCCEEDED)
    real = logs._pod_log_row

    def raced(job, attempt, pod):
        row = real(job, attempt, pod)
        if job.pk == jobs[1].pk:  # a cancel's delete kept it between this task's read and its insert
            AttemptLog.objects.create(job=job, attempt=attempt, pod=pod, text="kept by the delete")
        return row

    monkeypatch.setattr(logs, "_pod_log_row", raced)
    assert logs.keep_attempt_logs(pairs=[(j.pk, 1) for j in jobs]) == []
    assert AttemptLog.objects.get(job=jobs[1]).text == "kept by the delete"
    assert AttemptLog.objects.filter(job__in=jobs).count() == 3
