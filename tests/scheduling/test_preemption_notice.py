"""Notice before preemption through the portal (simulated backend): the bound on the notice a job asks for (400
on ``notice_s``), a victim told first and evicted at its answer (with its attempt's own credential) or at its
notice's end, the audit record, lost work from the written checkpoint, and the answer refused (404) to anyone
without that credential."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone
from rest_framework.test import APIClient

from quotas.models import PreemptionLimit
from scheduling.models import Job, JobState, PreemptionVictim
from scheduling.services import notice
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster

pytestmark = pytest.mark.django_db


def field_message(r, field="notice_s") -> str:
    assert r.status_code == 400, r.json()
    return " ".join(e["message"] for e in r.json()["error"]["fields"][field])


def test_the_notice_a_job_asks_for_is_bounded_by_its_departments_limit(lab, client_for, payload):
    c = client_for(lab.alice)
    assert "at most 240 s of notice" in field_message(c.post("/api/v1/jobs", payload(notice_s=241), format="json"))
    assert "less than or equal to 3600" in field_message(
        c.post("/api/v1/jobs", payload(notice_s=3601), format="json"))
    assert "whole number is required" in field_message(c.post("/api/v1/jobs", payload(notice_s="soon"), format="json"))
    PreemptionLimit.objects.create(department=lab.vision, tier="elastic", max_notice_s=600)
    ok = c.post("/api/v1/jobs", payload(notice_s=600), format="json")
    assert ok.status_code == 201 and ok.json()["notice_s"] == 600
    assert Job.objects.get().notice_s == 600


def _running_victim(lab, submit, go, notice_s):
    victim = submit(lab.bob, gpus=4, pods=2, notice_s=notice_s)  # nlp borrows vision's 4 GPUs
    go(run_cycle)
    go(sync_cluster)
    Job.objects.filter(pk=victim.pk).update(started_at=timezone.now() - timedelta(hours=1))
    rt = submit(lab.alice, gpus=4, tier="realtime")
    go(run_cycle)
    return Job.objects.get(pk=victim.pk), rt


def _answer(job, token=None, client=None):
    c = client or APIClient()
    token = token if token is not None else notice.attempt_token(job.pk, job.attempt)
    return c.post(f"/api/v1/jobs/{job.pk}/checkpoint-written", HTTP_AUTHORIZATION=f"Bearer {token}")


def test_a_victim_is_told_first_and_evicted_when_it_answers(lab, submit, go, client_for):
    job, rt = _running_victim(lab, submit, go, 120)
    v = PreemptionVictim.objects.get(job=job)
    assert v.status == PreemptionVictim.Status.DECIDED and v.notice_s == 120 and v.notice_sent_at is not None
    assert job.state == JobState.RUNNING  # told, not evicted
    assert job.events.filter(reason_code="preemption_notice").exists()
    rt.refresh_from_db()
    assert rt.state == JobState.QUEUED and rt.reason_code == "preemption_in_progress"
    go(run_cycle)  # a further cycle neither evicts it nor picks another victim
    assert PreemptionVictim.objects.get(pk=v.pk).status == PreemptionVictim.Status.DECIDED
    assert PreemptionVictim.objects.count() == 1
    # nobody but the attempt answers: no credential, a member's session, another attempt's, a forged one
    assert _answer(job, token="").status_code == 404
    assert _answer(job, token="", client=client_for(lab.bob)).status_code == 404
    assert _answer(job, token=notice.attempt_token(job.pk, job.attempt + 1)).status_code == 404
    assert _answer(job, token=notice.attempt_token(rt.pk, rt.attempt)).status_code == 404
    good = notice.attempt_token(job.pk, job.attempt)
    # one character changed, whatever the last one is (a token ending in "0" once made this the valid token)
    assert _answer(job, token=good[:-1] + ("1" if good.endswith("0") else "0")).status_code == 404
    r = go(_answer, job)
    assert r.status_code == 200, r.json()
    v.refresh_from_db()
    assert v.checkpoint_at is not None and v.status in (PreemptionVictim.Status.REQUESTED,
                                                        PreemptionVictim.Status.EVICTED)
    assert v.eviction_requested_at >= v.checkpoint_at and v.gpu_seconds_lost < 60 * job.total_gpus
    assert job.events.filter(reason_code="checkpoint_written").exists()
    assert _answer(job).status_code == 200  # a second answer is the first one's result


def test_a_victim_that_does_not_answer_is_evicted_at_its_notices_end(lab, submit, go):
    job, _ = _running_victim(lab, submit, go, 60)
    v = PreemptionVictim.objects.get(job=job)
    go(run_cycle, now=timezone.now())
    assert PreemptionVictim.objects.get(pk=v.pk).status == PreemptionVictim.Status.DECIDED
    PreemptionVictim.objects.filter(pk=v.pk).update(notice_ends_at=timezone.now() - timedelta(seconds=1))
    go(run_cycle)
    v.refresh_from_db()
    assert v.status in (PreemptionVictim.Status.REQUESTED, PreemptionVictim.Status.EVICTED)
    assert v.checkpoint_at is None and v.gpu_seconds_lost >= 3600 * job.total_gpus - 60
    r = APIClient().post(f"/api/v1/jobs/{job.pk}/checkpoint-written",
                         HTTP_AUTHORIZATION=f"Bearer {notice.attempt_token(job.pk, job.attempt)}")
    assert r.status_code in (404, 409)  # too late: the eviction is under way (or the attempt requeued)


def test_a_job_without_notice_is_evicted_at_once(lab, submit, go):
    job, _ = _running_victim(lab, submit, go, 0)
    v = PreemptionVictim.objects.get(job=job)
    assert v.notice_ends_at is None and v.status != PreemptionVictim.Status.DECIDED


def test_a_session_the_lab_made_preemptible_gets_the_limits_notice(lab):
    from quotas.services.preemption_limits import preemption_terms

    PreemptionLimit.objects.create(department=lab.vision, tier="realtime", sessions_preemptible=True,
                                   max_notice_s=180)
    terms = preemption_terms(department_id=lab.vision.pk, tier="realtime", user_tier="standard", session=True,
                             asked=None, max_runtime_s=3600)
    assert terms.preemptible is True and terms.notice_s == 180
