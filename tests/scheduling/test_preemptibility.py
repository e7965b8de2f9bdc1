"""Preemptibility apart from the tier through the API: what the lab's ``PreemptionLimit`` rows allow (who, how
long, at what surcharge), the 400s for the rest, the quote and the hold at the surcharged price, and the cycle
never evicting a protected job nor letting it borrow."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from quotas.models import LedgerEntry, PreemptionLimit, Price, Wallet
from quotas.services.preemption_limits import preemption_terms
from scheduling.models import Job, JobState
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster

pytestmark = pytest.mark.django_db


def post(client, body):
    return client.post("/api/v1/jobs", body, format="json")


def field_message(r, field="preemptible") -> str:
    assert r.status_code == 400, r.json()
    return " ".join(e["message"] for e in r.json()["error"]["fields"][field])


def test_without_a_limit_no_elastic_job_may_ask_not_to_be_preemptible(lab, client_for, payload):
    r = post(client_for(lab.alice), payload(preemptible=False))
    assert "may not run non-preemptible elastic jobs" in field_message(r)
    assert Job.objects.count() == 0
    # asking for what the tier is anyway is fine, and stores nothing
    ok = post(client_for(lab.alice), payload(preemptible=True))
    assert ok.status_code == 201 and ok.json()["preemptible"] is None


def test_the_departments_limit_says_who_for_how_long_and_at_what_surcharge(lab, client_for, payload):
    PreemptionLimit.objects.create(department=lab.vision, tier="elastic", non_preemptible=True,
                                   user_tiers=["pi"], max_runtime_s=7200, surcharge_pct=50)
    assert "Only pi members" in field_message(post(client_for(lab.alice), payload(preemptible=False)))
    long = post(client_for(lab.vadmin), payload(preemptible=False, max_runtime_s=7201))
    assert "at most 7200 s" in field_message(long)
    r = post(client_for(lab.vadmin), payload(preemptible=False, max_runtime_s=7200))
    assert r.status_code == 201, r.json()
    assert (r.json()["preemptible"], r.json()["price_surcharge_pct"]) == (False, 50)
    # another department has no limit of its own and the lab none: refused there
    assert "may not run" in field_message(post(client_for(lab.bob), payload(preemptible=False)))


def test_the_lab_wide_limit_applies_where_a_department_has_none_of_its_own(lab, client_for, payload):
    PreemptionLimit.objects.create(department=None, tier="backfill", non_preemptible=True)
    PreemptionLimit.objects.create(department=lab.vision, tier="backfill", non_preemptible=False)
    assert post(client_for(lab.bob), payload(tier="backfill", preemptible=False)).status_code == 201
    assert "may not run" in field_message(post(client_for(lab.alice), payload(tier="backfill", preemptible=False)))


def test_a_realtime_job_may_always_give_up_its_protection(lab, client_for, payload):
    r = post(client_for(lab.alice), payload(tier="realtime", preemptible=True))
    assert r.status_code == 201 and r.json()["preemptible"] is True


@pytest.mark.parametrize("bad", ["yes", 3, [False]])
def test_a_bad_value_is_a_400_on_its_field(lab, client_for, payload, bad):
    r = post(client_for(lab.alice), payload(preemptible=bad))
    assert r.status_code == 400 and "preemptible" in r.json()["error"]["fields"]


def test_a_batch_keys_the_refusal_by_the_items_position(lab, client_for, payload):
    r = client_for(lab.alice).post("/api/v1/jobs/batch", {"jobs": [payload(), payload(preemptible=False)]},
                                   format="json")
    assert r.status_code == 400 and "jobs.1.preemptible" in r.json()["error"]["fields"], r.json()
    assert Job.objects.count() == 0  # all or none


def test_sessions_the_lab_makes_preemptible(lab):
    PreemptionLimit.objects.create(department=lab.vision, tier="realtime", sessions_preemptible=True)
    terms = preemption_terms(department_id=lab.vision.pk, tier="realtime", user_tier="standard", session=True,
                             asked=None, max_runtime_s=3600)
    assert terms.preemptible is True
    from portal.errors import ValidationFailed
    with pytest.raises(ValidationFailed) as e:
        preemption_terms(department_id=lab.vision.pk, tier="realtime", user_tier="standard", session=True,
                         asked=False, max_runtime_s=3600)
    assert "preemptible" in e.value.fields
    # another department's sessions, and the department's batch realtime jobs, keep the tier's protection
    assert preemption_terms(department_id=lab.nlp.pk, tier="realtime", user_tier="standard", session=True,
                            asked=None, max_runtime_s=3600).preemptible is None
    assert preemption_terms(department_id=lab.vision.pk, tier="realtime", user_tier="standard", session=False,
                            asked=None, max_runtime_s=3600).preemptible is None


def test_the_quote_and_the_hold_pay_the_surcharge(lab, client_for, payload, submit, go):
    PreemptionLimit.objects.create(department=lab.vision, tier="elastic", non_preemptible=True, surcharge_pct=50)
    Price.objects.create(flavor=lab.a100, tier="elastic", per_gpu_hour=1000)
    Wallet.objects.create(department=lab.vision, balance=100_000)
    q = client_for(lab.alice).post("/api/v1/jobs/quote", payload(gpus=2, preemptible=False), format="json").json()
    assert (q["preemptible"], q["surcharge_pct"], q["base_price"], q["estimated_cost"]) == (False, 50, 1500, 3000)
    plain = client_for(lab.alice).post("/api/v1/jobs/quote", payload(gpus=2), format="json").json()
    assert (plain["preemptible"], plain["estimated_cost"]) == (True, 2000)
    job = submit(lab.alice, gpus=2, preemptible=False)
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    hold = LedgerEntry.objects.get(idempotency_key__startswith=f"hold:{job.pk}:")
    assert (hold.rate, hold.held_change) == (1500, 3000)


def test_the_cycle_never_evicts_a_protected_job_and_never_lets_it_borrow(lab, submit, go):
    PreemptionLimit.objects.create(department=lab.nlp, tier="elastic", non_preemptible=True)
    # nlp (nominal 4, may borrow 4) asks for 6 protected GPUs: it would borrow, so it waits
    big = submit(lab.bob, gpus=3, pods=2, preemptible=False)
    go(run_cycle)
    big.refresh_from_db()
    assert big.state == JobState.QUEUED and big.reason_code == "non_preemptible_nominal"
    Job.objects.filter(pk=big.pk).update(state=JobState.CANCELLED)
    # within nominal it starts, and a realtime job of vision finds no victim in it
    protected = submit(lab.bob, gpus=4, preemptible=False)
    plain = submit(lab.bob, gpus=4)
    go(run_cycle)
    go(sync_cluster)
    Job.objects.filter(pk__in=[protected.pk, plain.pk]).update(started_at=timezone.now() - timedelta(hours=2))
    rt = submit(lab.alice, gpus=4, tier="realtime")
    go(run_cycle)
    protected.refresh_from_db(), plain.refresh_from_db(), rt.refresh_from_db()
    assert protected.state == JobState.RUNNING
    assert plain.state in (JobState.RUNNING, JobState.PREEMPTED) and rt.reason_code == "preemption_in_progress"
    assert plain.pk in rt.reason_detail["victims"] and protected.pk not in rt.reason_detail["victims"]
