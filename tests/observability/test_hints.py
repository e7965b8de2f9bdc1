"""One test per troubleshooting rule: it fires on the data that means it, and stays quiet otherwise."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

from observability.models import AttemptUsage
from observability.services import hints
from scheduling.models import Job, JobEvent, JobState, Preemption, PreemptionVictim

pytestmark = pytest.mark.django_db


def _job(lab, **fields) -> Job:
    base = {"owner": lab.alice, "department": lab.vision, "flavor": lab.a100, "name": "train-1", "image": "img",
            "command": ["x"], "gpus_per_pod": 1, "state": JobState.RUNNING}
    return Job.objects.create(**(base | fields))


def _usage(job, attempt=1, **fields) -> AttemptUsage:
    now = timezone.now()
    base = {"source": "simulated", "gpus": job.gpus_per_pod, "started_at": now - timedelta(hours=1), "samples": 60,
            "mean_util": 50, "busy_gpus": 0.5}
    return AttemptUsage.objects.create(job=job, attempt=attempt, **(base | fields))


def _codes(job) -> list[str]:
    facts = hints.Facts(job=job, events=list(job.events.order_by("at", "id")),
                        usages=list(AttemptUsage.objects.filter(job=job)),
                        victims=list(PreemptionVictim.objects.filter(job=job)))
    return [h.code for h in hints.hints(facts)]


def test_quiet_on_a_healthy_job(lab):
    job = _job(lab)
    _usage(job, shape={"low": 0.0, "high": 0.9, "swings": 0})
    assert _codes(job) == []


def test_sawtooth(lab):
    job = _job(lab)
    _usage(job, shape={"low": 0.45, "high": 0.5, "swings": 30})
    assert _codes(job) == ["sawtooth"]
    other = _job(lab)
    _usage(other, shape={"low": 0.05, "high": 0.9, "swings": 30})  # a few dips: not a saw-tooth
    assert _codes(other) == []


def test_oom_killed_suggests_memory_from_the_observed_peak(lab):
    job = _job(lab, state=JobState.FAILED, reason_code="OOMKilled", memory_mib=16384, exit_code=137)
    _usage(job, host_memory_peak_mib=16300)
    facts = hints.Facts(job=job, events=[], usages=list(AttemptUsage.objects.filter(job=job)), victims=[])
    (hint,) = hints.hints(facts)
    assert hint.code == "oom_killed" and hint.data["suggested_memory_mib"] == 24576
    assert "16300 MiB" in hint.advice


def test_sigkill_after_sigterm_during_preemption(lab):
    job = _job(lab, state=JobState.QUEUED, attempt=2, termination_grace_s=30, preemption_count=1)
    now = timezone.now()
    pre = Preemption.objects.create(reason="priority")
    PreemptionVictim.objects.create(preemption=pre, job=job, attempt=1, status="requeued",
                                    eviction_requested_at=now - timedelta(seconds=31), evicted_at=now)
    assert _codes(job) == ["sigkill_after_sigterm"]
    quick = _job(lab, state=JobState.QUEUED, attempt=2, termination_grace_s=30, preemption_count=1)
    PreemptionVictim.objects.create(preemption=Preemption.objects.create(reason="priority"), job=quick,
                                    attempt=1, status="requeued", eviction_requested_at=now - timedelta(seconds=4),
                                    evicted_at=now)
    assert _codes(quick) == []  # it checkpointed and exited on SIGTERM


def test_repeated_preemption_suggests_a_tier_and_a_checkpoint_interval(lab):
    job = _job(lab, tier="backfill", preemption_count=3, attempt=4, state=JobState.QUEUED,
               checkpoint_interval_s=3600)
    now = timezone.now()
    for a in (1, 2, 3):
        _usage(job, attempt=a, started_at=now - timedelta(minutes=20), ended_at=now, final=True)
    facts = hints.Facts(job=job, events=[], usages=list(AttemptUsage.objects.filter(job=job)), victims=[])
    (hint,) = hints.hints(facts)
    assert hint.code == "repeated_preemption"
    assert hint.data["suggested_checkpoint_interval_s"] == 600 and "elastic" in hint.advice


def test_image_pull(lab):
    job = _job(lab, state=JobState.FAILED, reason_code="ImagePullBackOff", image="nvcr.io/typo:latest")
    assert _codes(job) == ["image_pull"]
    event_only = _job(lab, state=JobState.FAILED, reason_code="Error")
    JobEvent.objects.create(job=event_only, kind="transition", reason_code="ErrImagePull")
    assert _codes(event_only) == ["image_pull"]


def test_a_pending_job_that_will_never_fit_says_why(lab, client):
    job = _job(lab, state=JobState.QUEUED, gpus_per_pod=16, reason_code="quota_exceeded_never",
               reason_message="the request exceeds the quota the department could ever use",
               reason_detail={"never": True, "requested": 16, "nominal": 4, "borrowing_limit": 4})
    assert _codes(job) == ["never_fits"]
    client.force_login(lab.alice)
    body = client.get(f"/api/v1/jobs/{job.pk}/gpu-usage").json()
    assert body["hints"][0]["code"] == "never_fits" and body["hints"][0]["data"]["requested"] == 16
    assert "requested=16" in body["hints"][0]["advice"]
    assert 'data-hint="never_fits"' in client.get(f"/jobs/{job.pk}/").content.decode()
    waiting = _job(lab, state=JobState.QUEUED, reason_detail={"free": 0})
    assert _codes(waiting) == []


def test_a_failed_job_shows_on_its_page_the_hint_its_mail_gave(lab, client):
    from django.utils.html import escape

    from scheduling.failure_hints import failure_hint

    job = _job(lab, state=JobState.FAILED, reason_code="Error", exit_code=1)
    assert _codes(job) == ["failed_with_error"]
    client.force_login(lab.alice)
    page = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-hint="failed_with_error"' in page and "gpup logs" in page
    assert escape(failure_hint("Error", 1).advice) in page  # the text the failure's notification carries
    segfault = _job(lab, state=JobState.FAILED, reason_code="Error", exit_code=139)
    assert _codes(segfault) == ["segfault"]
    # One hint per cause: the OOM rule's own numbers win over the table's generic OOM advice and exit code 137.
    oom = _job(lab, state=JobState.FAILED, reason_code="OOMKilled", exit_code=137)
    assert _codes(oom) == ["oom_killed"]
    assert _codes(_job(lab, state=JobState.SUCCEEDED, exit_code=0)) == []


def test_every_rule_has_a_test():
    tested = {"sawtooth", "oom_killed", "sigkill_after_sigterm", "repeated_preemption", "image_pull", "never_fits",
              "failed",
              "fits_fraction"}  # tests/observability/test_fraction_recommendation.py
    assert {rule.__name__ for rule in hints.RULES} == tested


def test_hints_are_read_through_the_gate(lab):
    job = _job(lab, state=JobState.FAILED, reason_code="OOMKilled")
    c = Client()
    c.force_login(lab.bob)
    assert c.get(f"/api/v1/jobs/{job.pk}/gpu-usage").status_code == 404


def test_the_sawtooth_hint_names_the_clone_with_data_workers(lab):
    job = _job(lab)
    _usage(job, shape={"low": 0.45, "high": 0.5, "swings": 30})
    (hint,) = hints.hints(hints.Facts(job=job, events=[], usages=list(AttemptUsage.objects.filter(job=job)),
                                      victims=[]))
    assert f"gpup clone {job.pk} --add-data-workers 4" in hint.advice
    assert hint.data["add_data_workers"] == f"/api/v1/jobs/{job.pk}/spec?add_data_workers=4"


def test_the_sawtooth_hint_on_the_job_page_opens_the_clone_with_data_workers(lab):
    job = _job(lab)
    _usage(job, shape={"low": 0.45, "high": 0.5, "swings": 30})
    c = Client()
    c.force_login(lab.alice)
    page = c.get(f"/jobs/{job.pk}/").content.decode()
    link = f'id="hint-add-data-workers" href="/jobs/new?clone={job.pk}&amp;add_data_workers=4"'
    assert link in page
    form = c.get(f"/jobs/new?clone={job.pk}&add_data_workers=4").content.decode()
    assert 'name="role-1-name" value="data"' in form and 'name="role-1-pods" value="4"' in form
