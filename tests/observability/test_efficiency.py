"""GPU efficiency per member and per department, by week: held against used GPU-hours, idle GPU-hours and the
right-sizing savings not taken, on a page, in the API and its CSV; tenants never see each other's members."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from observability.models import AttemptUsage
from observability.services.efficiency import attempt_figures, week_of
from scheduling.models import Job, JobState

pytestmark = pytest.mark.django_db


def usage(job, *, gpus, hours, busy, idle_minutes=0.0, started=None, attempt=1):
    return AttemptUsage.objects.create(job=job, attempt=attempt, source="simulated", gpus=gpus,
                                       started_at=started or timezone.now(), step_s=60, samples=int(hours * 60),
                                       busy_gpus=busy, idle_minutes=idle_minutes, final=True)


def test_an_attempts_figures():
    # 4 GPUs for 2 hours, 1.2 busy on average, every GPU idle for 30 minutes
    f = attempt_figures(gpus=4, samples=120, step_s=60, busy_gpus=1.2, idle_minutes=30)
    assert f == {"held": 8.0, "used": 2.4, "idle": 2.0, "savings": 4.0}  # right-sizing says 2 GPUs: 2 x 2 h
    assert attempt_figures(gpus=2, samples=0, step_s=60, busy_gpus=None, idle_minutes=0)["held"] == 0


def test_weeks_start_on_monday_utc():
    assert week_of(datetime(2026, 12, 6, 23, 0, tzinfo=UTC)) == "2026-11-30"  # a Sunday
    assert week_of(datetime(2026, 12, 7, 0, 30, tzinfo=UTC)) == "2026-12-07"


@pytest.fixture
def measured(lab, submit):
    a = submit(lab.alice, gpus=4)
    b = submit(lab.vadmin, gpus=1)
    n = submit(lab.bob, gpus=2)
    usage(a, gpus=4, hours=2, busy=1.2, idle_minutes=30)
    usage(b, gpus=1, hours=1, busy=0.9)
    usage(n, gpus=2, hours=3, busy=2.0)
    usage(a, gpus=4, hours=1, busy=4.0, attempt=2, started=timezone.now() - timedelta(weeks=1))
    return lab


def test_the_api_reports_members_and_departments_by_week_within_the_tenant(measured, client_for):
    lab = measured
    r = client_for(lab.vadmin).get("/api/v1/efficiency")
    assert r.status_code == 200, r.content
    rows = r.json()["rows"]
    this_week = week_of(timezone.now())
    alice = next(x for x in rows if x["user"] == "alice" and x["week"] == this_week)
    assert (alice["held_gpu_hours"], alice["used_gpu_hours"], alice["efficiency"], alice["idle_gpu_hours"],
            alice["savings_gpu_hours"]) == (8.0, 2.4, 0.3, 2.0, 4.0)
    assert {x["week"] for x in rows if x["user"] == "alice"} == {this_week, week_of(timezone.now() - timedelta(weeks=1))}
    assert {x["department"] for x in rows} == {"vision"} and "bob" not in r.content.decode()
    dept = client_for(lab.alice).get("/api/v1/efficiency?group_by=department").json()["rows"]
    assert [(x["week"], x["held_gpu_hours"], x["user"]) for x in dept if x["week"] == this_week] == [(this_week, 9.0, None)]
    everything = client_for(lab.root).get("/api/v1/efficiency?group_by=department").json()["rows"]
    assert {x["department"] for x in everything} == {"vision", "nlp"}


def test_the_csv_has_a_row_per_week_and_member(measured, client_for):
    r = client_for(measured.alice).get("/api/v1/efficiency?format=csv")
    assert r.status_code == 200 and r["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(r.content.decode())))
    assert {row["user"] for row in rows} == {"alice", "vadmin"}
    assert all(row["department"] == "vision" for row in rows)


@pytest.mark.parametrize(("query", "field"), [("group_by=flavor", "group_by"), ("weeks=0", "weeks"),
                                              ("weeks=x", "weeks"), ("nope=1", "nope")])
def test_bad_queries_are_a_400_with_the_field(measured, client_for, query, field):
    r = client_for(measured.alice).get(f"/api/v1/efficiency?{query}")
    assert r.status_code == 400 and field in r.json()["error"]["fields"], r.content


def test_the_page_shows_both_tables_to_a_member_and_no_other_department(measured, client):
    client.force_login(measured.alice)
    html = client.get("/observability/efficiency/").content.decode()
    assert 'id="efficiency-departments"' in html and 'id="efficiency-members"' in html
    assert "alice" in html and "vadmin" in html and "bob" not in html and "nlp" not in html
    assert 'href="/observability/efficiency/"' in client.get("/").content.decode()


def test_a_fraction_holds_its_share_of_a_gpu(lab, client_for):
    # a quarter-GPU notebook for 4 hours, 0.05 of the GPU busy, idle for its last hour: it held 1 GPU-hour,
    # not 4, and it holds no whole GPU right-sizing could save
    job = Job.objects.create(owner=lab.amy, department=lab.vision, flavor=lab.a100, name="notebook-1",
                             kind="session", image="jupyter:1", command=["x"], gpus_per_pod=1, share_milli=250,
                             gpu_memory_mib=20 * 1024, state=JobState.SUCCEEDED)
    usage(job, gpus=1, hours=4, busy=0.05, idle_minutes=60)
    rows = client_for(lab.vadmin).get("/api/v1/efficiency").json()["rows"]
    amy = next(x for x in rows if x["user"] == "amy")
    assert (amy["held_gpu_hours"], amy["used_gpu_hours"], amy["efficiency"], amy["idle_gpu_hours"],
            amy["savings_gpu_hours"]) == (1.0, 0.2, 0.2, 0.25, 0.0)
