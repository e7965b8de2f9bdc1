"""Dashboard pages, the job cost snippet, the monthly statement command and the periodic tasks."""

from __future__ import annotations

import json
from datetime import datetime, timedelta
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import call_command
from django.utils import timezone

from quotas import tasks
from quotas.models import ApprovalRule, LedgerEntry, RefillRecord, RefillRule, Wallet
from quotas.services import periodic, wallets
from scheduling.models import JobState, SimPod
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.jobs import budget_admitted

pytestmark = pytest.mark.django_db


@pytest.fixture
def browser(client):
    def as_user(user):
        client.force_login(user)
        return client

    return as_user


def _finished_job(lab, go, submit, **fields):
    job = go(submit, lab.alice, **fields)
    # an hour before the simulated cluster's clock, which stands still: the hour is exact however slow the machine
    go(run_cycle, now=settings.SIM_CLOCK.now() - timedelta(hours=1))
    go(sync_cluster)
    SimPod.objects.filter(phase="Running").update(runtime_s=0)  # its runtime is over: it ended as it started, now
    go(sync_cluster)
    job.refresh_from_db()
    return job


def test_wallet_page_for_department_admin(money, browser, go, submit):
    _finished_job(money, go, submit, gpus=2)
    r = browser(money.vadmin).get("/budgets/")
    assert r.status_code == 302 and r["Location"].endswith("/budgets/vision/")
    page = browser(money.vadmin).get("/budgets/vision/").content.decode()
    assert "98.000 cr" in page  # 100 credits - 2 GPU-hours at 1 credit
    assert "alice" in page and "settle" in page
    # the ledger names the attempt in words: "a1" is how the pages name array 1
    job = LedgerEntry.objects.filter(kind="settle").get().job_id
    assert f'<td data-ledger-job><a href="/jobs/{job}/">job {job}</a>, attempt 1</td>' in page
    assert f"{job}</a> a1" not in page
    assert browser(money.vadmin).get("/budgets/nlp/").status_code == 404


def test_platform_admin_sees_all_wallets(money, browser):
    page = browser(money.root).get("/budgets/").content.decode()
    assert "vision" in page and "nlp" in page and "100.000 cr" in page


def test_approvals_inbox_page(money, browser, go, submit):
    ApprovalRule.objects.create(department=money.vision, gpus_above=1)
    job = go(submit, money.alice, gpus=2, name="needs-ok")
    assert job.state == JobState.PENDING_APPROVAL
    page = browser(money.vadmin).get("/budgets/approvals/").content.decode()
    assert "needs-ok" in page and "2 GPUs &gt; 1" in page
    assert browser(money.alice).get("/budgets/approvals/").status_code == 403  # a role she lacks
    # another department's admin cannot decide: 404, and the job still waits
    assert browser(money.nadmin).post(f"/budgets/approvals/{job.pk}/approve", {"comment": ""}).status_code == 404
    r = browser(money.vadmin).post(f"/budgets/approvals/{job.pk}/reject", {"comment": ""})
    assert r.status_code == 302
    job.refresh_from_db()
    assert job.state == JobState.PENDING_APPROVAL  # a rejection needs a comment
    with_callbacks = go(browser(money.vadmin).post, f"/budgets/approvals/{job.pk}/approve", {"comment": "ok"})
    assert with_callbacks.status_code == 302
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.approval.comment == "ok"


def test_job_page_shows_hold_cost_to_date_and_final_charge(money, browser, go, submit):
    running = go(submit, money.alice, gpus=1, name="running")
    go(run_cycle)
    page = browser(money.alice).get(f"/jobs/{running.pk}/").content.decode()
    assert 'id="job-cost"' in page and "Hold" in page and "1.000 cr" in page and "settled when the job ends" in page
    done = _finished_job(money, go, submit, gpus=2, name="done")
    page = browser(money.amy).get(f"/jobs/{done.pk}/").content.decode()
    assert "Final charge" in page and "<strong>2.000 cr</strong>" in page


def test_monthly_statement_command(money, go, submit):
    _finished_job(money, go, submit, gpus=2)
    out = StringIO()
    call_command("monthly_statement", stdout=out)
    text = out.getvalue()
    assert "vision" in text and "nlp" in text and "Closing balance" in text and "98.000 cr" in text
    out = StringIO()
    call_command("monthly_statement", "--department", "vision", "--json", stdout=out)
    (s,) = json.loads(out.getvalue())
    assert s["opening_mcr"] == 0 and s["adjustments_mcr"] == 100_000 and s["charges_mcr"] == 2000
    assert s["closing_mcr"] == Wallet.objects.get(department=money.vision).balance
    assert s["users"] == [{"user": "alice", "net_mcr": 2000, "gpu_hours": 2.0}]
    nxt = (timezone.localdate().replace(day=1) + timedelta(days=32)).strftime("%Y-%m")
    out = StringIO()
    call_command("monthly_statement", "--month", nxt, "--department", "vision", "--json", stdout=out)
    (s,) = json.loads(out.getvalue())
    assert s["opening_mcr"] == s["closing_mcr"] == 98_000 and s["charges_mcr"] == 0


def test_period_keys_and_proportional_refill(money):
    at = datetime(2026, 11, 29, 12, tzinfo=timezone.get_current_timezone())
    assert periodic.period_key(period="monthly", at=at) == "2026-11"
    assert periodic.period_key(period="weekly", at=at) == "2026-W48"
    rule = RefillRule.objects.create(department=money.vision, mode="per_nominal_gpu", amount=2500)
    assert periodic.refill_amount(rule=rule) == 10_000  # 4 nominal GPUs
    assert tasks.refill.delay().get() == 1
    assert tasks.refill.delay().get() == 0  # once per period
    later = timezone.now() + timedelta(days=40)
    assert periodic.refill_due(now=later) == 1  # the next month refills again
    assert RefillRecord.objects.filter(department=money.vision).count() == 2
    assert Wallet.objects.get(department=money.vision).balance == 120_000


def test_ledger_check_alerts_on_drift(money, caplog, client):
    assert tasks.check_ledger.delay().get() == 0
    assert "portal_ledger_drifting_wallets 0.0" in client.get("/metrics").content.decode()
    Wallet.objects.filter(department=money.nlp).update(balance=10_500)  # someone bypassed the services
    assert tasks.check_ledger.delay().get() == 1
    assert "ledger drift in nlp" in caplog.text
    scraped = client.get("/metrics").content.decode()
    assert "portal_ledger_drifting_wallets 1.0" in scraped
    assert 'portal_ledger_drift_mcr{column="balance",department="nlp"} 500.0' in scraped
    beat = settings.CELERY_BEAT_SCHEDULE  # the one list of periodic tasks
    assert {"quotas-refill", "quotas-check-ledger", "quotas-reconcile-holds"} <= set(beat)
    assert {e["task"] for n, e in beat.items() if n.startswith("quotas-")} == {
        "quotas.refill", "quotas.check_ledger", "quotas.reconcile_holds"}


def test_hold_is_capped_when_credits_vanished_between_snapshot_and_apply(money, submit, go):
    """The engine checked the budget on its snapshot; if credits vanished before apply, the hold takes
    what is available (the charge can never exceed it) instead of failing the whole cycle."""
    from scheduling.models import Job

    job = go(submit, money.bob, gpus=1, max_runtime_s=36_000)  # 10 credits = all nlp has
    Job.objects.filter(pk=job.pk).update(state=JobState.ADMITTED, admitted_at=timezone.now())
    wallets.wallet_adjust(department=money.nlp, amount=-4000, actor=money.root, comment="taken meanwhile")
    job.refresh_from_db()
    budget_admitted(job)
    hold = LedgerEntry.objects.get(job=job, kind="hold")
    assert hold.held_change == 6000 and hold.data["wanted"] == 10_000
    assert "SHORT by 4.000 cr" in job.events.filter(kind="budget").get().message
