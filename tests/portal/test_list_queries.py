"""The list pages and API lists cost a bounded number of queries, whatever the number of rows: measured at a
few rows and again at many, the count must not grow (docs/operations.md, "Benchmarks", has the times at
100,000 jobs)."""

from __future__ import annotations

import pytest
from django.utils import timezone

from quotas.models import LedgerEntry, LedgerKind, Price, Wallet
from scheduling.models import Job, JobState

pytestmark = pytest.mark.django_db


def _jobs(lab, n: int, state: str, **fields) -> list[Job]:
    now = timezone.now()
    return Job.objects.bulk_create([
        Job(owner=lab.alice if i % 2 else lab.amy, department=lab.vision, name=f"bulk-{state}-{i}", image="img",
            command=["true"], flavor=lab.a100, gpus_per_pod=1, state=state, submitted_at=now, **fields)
        for i in range(n)])


def _ledger(wallet: Wallet, jobs: list[Job]) -> None:
    rows = []
    for job in jobs:
        common = dict(wallet=wallet, job=job, attempt=1, user_id=job.owner_id, flavor_id=job.flavor_id, rate=100,
                      gpus=1)
        rows += [LedgerEntry(kind=LedgerKind.HOLD, held_change=10, balance_after=10**6, held_after=10,
                             idempotency_key=f"h{job.pk}", **common),
                 LedgerEntry(kind=LedgerKind.SETTLE, amount=-5, held_change=-5, balance_after=10**6 - 5,
                             held_after=5, idempotency_key=f"s{job.pk}", **common)]
    LedgerEntry.objects.bulk_create(rows)


def _count(client, url, django_assert_max_num_queries, limit=40) -> int:
    with django_assert_max_num_queries(limit) as q:
        r = client.get(url)
    assert r.status_code == 200, (url, r.status_code)
    return len(q.captured_queries)


PAGES = [("root", "/budgets/approvals/"), ("vadmin", "/budgets/approvals/"), ("root", "/jobs/"),
         ("alice", "/jobs/"), ("root", "/budgets/"), ("vadmin", "/budgets/vision/"),
         ("root", "/api/v1/approvals"), ("alice", "/api/v1/jobs"), ("alice", "/api/v1/ledger"),
         ("vadmin", "/api/v1/wallets/vision"), ("root", "/")]


@pytest.mark.parametrize(("who", "url"), PAGES)
def test_a_list_costs_the_same_queries_with_many_rows_as_with_few(lab, client, who, url,
                                                                  django_assert_max_num_queries):
    Price.objects.create(flavor=lab.a100, tier="elastic", per_gpu_hour=1000)
    wallet = Wallet.objects.create(department=lab.vision, balance=10**6)
    _jobs(lab, 2, JobState.PENDING_APPROVAL)
    _ledger(wallet, _jobs(lab, 2, JobState.SUCCEEDED))
    client.force_login(getattr(lab, who))
    few = _count(client, url, django_assert_max_num_queries)
    _jobs(lab, 80, JobState.PENDING_APPROVAL)  # more than a page of the inbox
    _ledger(wallet, _jobs(lab, 80, JobState.SUCCEEDED))
    _jobs(lab, 40, JobState.QUEUED)
    assert _count(client, url, django_assert_max_num_queries, limit=few) <= few


def test_the_approvals_inbox_is_paged_and_each_row_priced(lab, client):
    Price.objects.create(flavor=lab.a100, tier="elastic", per_gpu_hour=1000)
    jobs = _jobs(lab, 60, JobState.PENDING_APPROVAL, max_runtime_s=3600)
    client.force_login(lab.vadmin)
    r = client.get("/budgets/approvals/")
    first = r.content.decode()
    assert first.count("data-job=") == 50 and "Page 1 of 2 (60 waiting)" in first
    assert {j.estimated_cost for j in r.context["jobs"]} == {1000}  # 1 GPU-hour at 1,000 mcr, from the prices
    second = client.get("/budgets/approvals/?page=2").content.decode()
    assert second.count("data-job=") == 10
    shown = {int(x.split('"')[0]) for x in (first + second).split('data-job="')[1:]}
    assert shown == {j.pk for j in jobs}


def test_the_jobs_page_counts_every_state(lab, client):
    _jobs(lab, 3, JobState.QUEUED)
    _jobs(lab, 2, JobState.FAILED)
    client.force_login(lab.alice)
    states = {v: n for v, _label, n in client.get("/jobs/").context["states"]}
    assert states[JobState.QUEUED] == 3 and states[JobState.FAILED] == 2 and states[JobState.RUNNING] == 0


def test_the_wallets_page_costs_the_same_queries_for_many_wallets_and_shows_each_burn(
        lab, client, django_assert_max_num_queries):
    from portal.models import Department
    from quotas.services.reports import burn_rate

    wallet = Wallet.objects.create(department=lab.vision, balance=10**6)
    _ledger(wallet, _jobs(lab, 3, JobState.SUCCEEDED))
    [running] = _jobs(lab, 1, JobState.RUNNING)
    LedgerEntry.objects.create(wallet=wallet, job=running, attempt=1, kind=LedgerKind.HOLD, held_change=10,
                               balance_after=10**6, held_after=10, rate=3600, gpus=2, idempotency_key="open")
    client.force_login(lab.root)
    few = _count(client, "/budgets/", django_assert_max_num_queries)
    for i in range(5):
        Wallet.objects.create(department=Department.objects.create(slug=f"extra{i}", name=f"E{i}"), balance=5)
    assert _count(client, "/budgets/", django_assert_max_num_queries, limit=few) <= few
    rows = dict(client.get("/budgets/").context["rows"])
    assert rows[wallet] == burn_rate(wallet=wallet) and rows[wallet]["running_per_hour"] > 0
