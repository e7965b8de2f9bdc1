"""The stored time series (one sample per interval, a fixed number of queries) and the home page per role,
drawn from it in a fixed number of queries whatever the history."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.utils import timezone

from portal.models import Role
from quotas.models import Wallet
from scheduling.models import ClusterSample, DepartmentSample, Job, JobState
from scheduling.services.cycle import run_cycle
from scheduling.services.stats import bucket, cleanup_samples, record_sample, wait_bin

pytestmark = pytest.mark.django_db


def _busy_lab(lab, submit, go):
    jobs = [submit(lab.alice, gpus=2) for _ in range(3)]  # 6 GPUs: 4 nominal + 2 borrowed
    submit(lab.bob, gpus=1, tier="backfill")
    go(run_cycle)
    return jobs


def _chart(html: str, name: str) -> dict:
    m = re.search(rf'<script id="{name}" type="application/json">(.*?)</script>', html, re.S)
    assert m, f"no data for chart {name}"
    return json.loads(m.group(1))


def test_a_sample_records_use_borrowing_lending_queue_and_waits(lab, submit, go, settings,
                                                                 django_assert_max_num_queries):
    settings.STATS_INTERVAL_S = 300
    _busy_lab(lab, submit, go)
    held = {j.department_id: 0 for j in Job.objects.all()}
    for j in Job.objects.filter(state=JobState.ADMITTED):
        held[j.department_id] += j.gpus_per_pod * j.pods
    started = bucket(timezone.now(), 300) - timedelta(seconds=1)  # in the interval the sample covers
    Job.objects.filter(state=JobState.ADMITTED).update(started_at=started, queued_at=started - timedelta(minutes=3))
    with django_assert_max_num_queries(13):  # a fixed number: savepoint, 7 reads, 2 deletes, 2 inserts
        at = record_sample()
    c = ClusterSample.objects.get(at=at, flavor=lab.a100)
    assert (c.total_gpus, c.busy_gpus, c.free_gpus) == (8, sum(held.values()), 8 - sum(held.values()))
    assert sum(c.queued.values()) == Job.objects.filter(state=JobState.QUEUED).count()
    assert sum(c.waits["elastic"]) == Job.objects.filter(state=JobState.ADMITTED, tier="elastic").count()
    assert c.waits["elastic"][wait_bin(180)] == sum(c.waits["elastic"])
    vision = DepartmentSample.objects.get(at=at, department=lab.vision)
    nlp = DepartmentSample.objects.get(at=at, department=lab.nlp)
    assert vision.busy_gpus == held[lab.vision.pk] and vision.nominal == 4
    assert vision.borrowed_gpus == max(0, held[lab.vision.pk] - 4)
    assert nlp.lent_gpus == min(4 - nlp.busy_gpus, vision.borrowed_gpus)
    # idempotent within an interval; samples past the retention are deleted
    assert record_sample() == at and ClusterSample.objects.count() == 1
    ClusterSample.objects.filter(at=at).update(at=at - timedelta(days=settings.STATS_RETENTION_DAYS + 1))
    assert cleanup_samples() == 1


def test_bucket_and_wait_bins():
    now = timezone.now().replace(minute=7, second=31, microsecond=5)
    assert bucket(now, 300).minute == 5 and bucket(now, 300).second == 0
    assert [wait_bin(s) for s in (0, 59, 60, 61, 899, 3601, 99999)] == [0, 0, 0, 1, 2, 4, 5]


def _history(lab, points: int):
    now = timezone.now()
    for i in range(points):
        at = bucket(now - timedelta(minutes=5 * i), 300)
        ClusterSample.objects.create(at=at, flavor=lab.a100, total_gpus=8, busy_gpus=i % 9, free_gpus=8 - i % 9,
                                     queued={"realtime": 0, "elastic": i % 3, "backfill": 1},
                                     waits={"elastic": [1, 0, 0, 0, 0, 0]}, preemptions=i % 2)
        DepartmentSample.objects.create(at=at, department=lab.vision, flavor=lab.a100, nominal=4, busy_gpus=i % 5)
        DepartmentSample.objects.create(at=at, department=lab.nlp, flavor=lab.a100, nominal=4, busy_gpus=7)


@pytest.mark.parametrize("who", ["alice", "vadmin", "root"])
def test_home_costs_a_fixed_number_of_queries_whatever_the_history(lab, submit, go, client, who,
                                                                   django_assert_max_num_queries):
    Wallet.objects.create(department=lab.vision, balance=50_000)
    _busy_lab(lab, submit, go)
    _history(lab, 10)
    client.force_login(getattr(lab, who))
    with django_assert_max_num_queries(25) as few:
        assert client.get("/").status_code == 200
    _history_more = [submit(lab.amy) for _ in range(5)]
    ClusterSample.objects.all().delete()
    DepartmentSample.objects.all().delete()
    _history(lab, 280)
    with django_assert_max_num_queries(len(few.captured_queries)):
        assert client.get("/").status_code == 200
    assert _history_more


def test_researcher_home_shows_my_jobs_quota_budget_and_free_gpus(lab, submit, go, client):
    Wallet.objects.create(department=lab.vision, balance=50_000)
    _busy_lab(lab, submit, go)
    waiting = submit(lab.alice, gpus=4)
    _history(lab, 12)
    client.force_login(lab.alice)
    html = client.get("/").content.decode()
    assert f'href="/jobs/{waiting.pk}/"' in html and 'href="/jobs/?mine=1"' in html
    assert 'href="/budgets/vision/"' in html and "50.000 cr" in html
    assert 'href="/cluster/"' in html and "GPUs free now" in html
    row = re.search(r'<tr data-flavor="a100-80gb">(.*?)</tr>', html, re.S).group(1)
    cells = re.findall(r"<td[^>]*>(.*?)</td>", row)
    held = sum(j.gpus_per_pod * j.pods for j in Job.objects.filter(department=lab.vision, state=JobState.ADMITTED))
    assert cells[1:4] == ["4", str(held), str(max(0, held - 4))]
    dept = _chart(html, "dept")
    assert dept["times"] and len(dept["datasets"][0]["data"]) == 12
    assert max(dept["datasets"][0]["data"]) <= 4  # vision's own samples, never nlp's (7 GPUs)
    assert "admin-board" not in html and "Approvals waiting" not in html


def test_department_admin_sees_members_jobs_and_approvals(lab, submit, client):
    from quotas.models import ApprovalRule

    ApprovalRule.objects.create(department=lab.vision, gpus_above=2)
    big = submit(lab.alice, gpus=4)
    other = submit(lab.bob, gpus=4)
    client.force_login(lab.vadmin)
    html = client.get("/").content.decode()
    assert big.state == JobState.PENDING_APPROVAL
    assert "Approvals waiting" in html and f'href="/jobs/{big.pk}/"' in html
    assert f'/jobs/{other.pk}/' not in html  # another department's job


def test_platform_admin_home_lists_every_departments_approvals(lab, submit, client):
    # A job waiting for a decision the platform admin may take (any department's) is in their home's inbox,
    # not "Nothing waits for your approval" because it is not the admin's own department's.
    from quotas.models import ApprovalRule

    ApprovalRule.objects.create(department=lab.nlp, gpus_above=2)
    big = submit(lab.bob, gpus=4)
    assert big.state == JobState.PENDING_APPROVAL
    client.force_login(lab.root)
    html = client.get("/").content.decode()
    card = re.search(r'<div class="card" id="approvals">(.*?)</div>', html, re.S).group(1)
    assert f'href="/jobs/{big.pk}/"' in card and "Nothing waits" not in card


def test_platform_admin_board_plots_the_stored_series(lab, client, submit):
    from quotas.services import wallets

    wallets.wallet_create(department=lab.vision, actor=lab.root, balance=5_500)
    job = submit(lab.alice)
    wallets.wallet_hold(job=job, attempt=1, amount=1000, rate=1000)
    wallets.wallet_settle(job=job, attempt=1, amount=500, gpu_seconds=1800, outcome="succeeded")
    _history(lab, 6)
    client.force_login(lab.root)
    html = client.get("/").content.decode()
    util = _chart(html, "util")
    assert util["datasets"][0]["data"] == [round(100 * (i % 9) / 8, 1) for i in reversed(range(6))]
    queue = _chart(html, "queue")
    assert [d["label"] for d in queue["datasets"]] == ["realtime", "elastic", "backfill"]
    waits = _chart(html, "waits")
    assert {d["label"]: d["data"][0] for d in waits["datasets"]}["elastic"] == 6
    spend = _chart(html, "spend")
    assert spend["labels"] == ["vision"] and spend["datasets"][0]["data"] == [0.5]
    assert spend["datasets"][1]["data"] == [5.0]
    assert _chart(html, "preempt")["datasets"][0]["data"] == [i % 2 for i in reversed(range(6))]


def test_without_samples_the_charts_say_so(lab, client):
    client.force_login(lab.root)
    html = client.get("/").content.decode()
    assert 'data-chart-empty="util"' in html and "No data yet" in html


def test_platform_admin_membership_is_needed_for_the_board(lab, client):
    assert lab.root.membership.role == Role.PLATFORM_ADMIN
