"""The whole queue (``GET /api/v1/queue``, ``/queue/``): every department's queued jobs in the engine's order,
another department's shown by its department and size only."""

from __future__ import annotations

import pytest
from django.test import Client
from django.utils import timezone

import engine
from scheduling.api.queue import EVERYONE, OWN_DEPARTMENT
from scheduling.models import Job, JobState
from scheduling.services.cycle import run_cycle
from scheduling.services.snapshot import build_snapshot

pytestmark = pytest.mark.django_db

SECRET = "visionqueuesecret"


@pytest.fixture
def full(lab, submit, go):
    """Every GPU of the cluster busy (one 8-GPU gang of nlp's), so whatever is submitted next waits."""
    job = go(submit, lab.bob, name="filler", gpus=4, pods=2)
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.ADMITTED
    return job


def _queue_world(lab, submit, go):
    """Queued jobs of both departments whose engine order is not their submission order: a critical job
    submitted last goes ahead of its department's normal one, a backfill one goes last."""
    early = go(submit, lab.alice, name=f"{SECRET}-early", env={"TOKEN": f"{SECRET}-env"}, gpus=2)
    nlp = go(submit, lab.bob, name="nlp-normal", gpus=2)
    backfill = go(submit, lab.amy, name=f"{SECRET}-backfill", tier="backfill", gpus=1)
    late = go(submit, lab.amy, name=f"{SECRET}-critical", urgency="critical", gpus=2)
    go(run_cycle)
    return early, nlp, backfill, late


def _engine_order():
    snapshot, _ = build_snapshot(now=timezone.now())
    return [p.job_id for p in engine.schedule(snapshot).pending]


def test_the_queue_is_the_engine_s_order_and_the_job_pages_positions(lab, submit, go, client_for, full):
    jobs = _queue_world(lab, submit, go)
    early, _, backfill, late = jobs
    order = _engine_order()
    assert order.index(late.pk) < order.index(early.pk) and order[-1] == backfill.pk  # not by submission
    by_id = {j.pk: j for j in jobs}
    rows = client_for(lab.alice).get("/api/v1/queue").json()["results"]
    assert [(r["position"], r["department"], r.get("id")) for r in rows] == [
        (i + 1, by_id[pk].department.slug, pk if by_id[pk].department == lab.vision else None)
        for i, pk in enumerate(order)]
    for pk in order:
        detail = client_for(by_id[pk].owner).get(f"/api/v1/jobs/{pk}").json()
        assert detail["queue_position"] == order.index(pk) + 1
    # A job no cycle has looked at yet comes after the ordered ones, and its page says so too.
    newest = go(submit, lab.alice, name="newest", urgency="critical")
    rows = client_for(lab.alice).get("/api/v1/queue").json()["results"]
    assert rows[-1]["id"] == newest.pk and rows[-1]["position"] == 5 and rows[-1]["reason"] == "queued"
    assert client_for(lab.alice).get(f"/api/v1/jobs/{newest.pk}").json()["queue_position"] == 5
    go(run_cycle)  # now the engine has ordered it too
    positions = {r.get("id"): r["position"] for r in client_for(lab.alice).get("/api/v1/queue").json()["results"]}
    assert positions[newest.pk] == _engine_order().index(newest.pk) + 1


def test_another_department_s_rows_carry_its_department_and_size_only(lab, submit, go, client_for, full):
    _queue_world(lab, submit, go)
    r = client_for(lab.bob).get("/api/v1/queue")
    assert r.status_code == 200
    assert SECRET.encode() not in r.content and b"alice" not in r.content and b"amy" not in r.content
    rows = r.json()["results"]
    theirs = [row for row in rows if row["department"] == "vision"]
    mine = [row for row in rows if row["department"] == "nlp"]
    assert len(theirs) == 3 and len(mine) == 1
    for row in theirs:
        assert set(row) == set(EVERYONE) and row["own"] is False
        assert row["gpus"] in (1, 2) and row["pods"] == 1 and row["flavor"] == "a100-80gb"
    assert set(mine[0]) == set(EVERYONE) | set(OWN_DEPARTMENT)
    assert mine[0]["owner"] == "bob" and mine[0]["own"] is True and mine[0]["name"] == "nlp-normal"
    # the job's own department sees it whole; a platform admin sees every job whole
    own = client_for(lab.vadmin).get("/api/v1/queue").json()["results"]
    assert {row.get("name") for row in own if row["department"] == "vision"} == {
        f"{SECRET}-early", f"{SECRET}-backfill", f"{SECRET}-critical"}
    assert all(row["own"] for row in client_for(lab.root).get("/api/v1/queue").json()["results"])


def test_the_page_shows_the_same_queue_and_is_linked_from_the_shell(lab, submit, go, full):
    early = _queue_world(lab, submit, go)[0]
    c = Client()
    c.force_login(lab.bob)
    home = c.get("/").content.decode()
    assert 'href="/queue/"' in home
    page = c.get("/queue/")
    assert page.status_code == 200
    text = page.content.decode()
    assert SECRET not in text and "alice" not in text and "nlp-normal" in text
    assert text.count("another department&#x27;s job") + text.count("another department's job") == 3
    c.force_login(lab.alice)
    text = c.get("/queue/?flavor=a100-80gb").content.decode()
    assert f"{SECRET}-early" in text and "nlp-normal" not in text
    assert c.get("/queue/?flavor=nope").status_code == 400
    assert 'href="/queue/?flavor=a100-80gb"' in c.get(f"/jobs/{early.pk}/").content.decode()


def test_bad_input_and_who_may_read(lab, client_for, full):
    r = client_for(lab.alice).get("/api/v1/queue?flavor=h100")
    assert r.status_code == 400 and r.json()["error"]["fields"]["flavor"]
    assert client_for(lab.stranger).get("/api/v1/queue").status_code == 403
    assert client_for(None).get("/api/v1/queue").status_code in (401, 403)
    assert client_for(lab.alice).get("/api/v1/queue?page=99").status_code == 404
    assert client_for(lab.alice).get("/api/v1/queue?flavor=a100-mig-3g.40gb").json()["count"] == 0


@pytest.mark.parametrize("n", [3, 30])
def test_query_counts_do_not_grow_with_the_queue(lab, submit, go, client_for, full, n,
                                                django_assert_max_num_queries):
    for i in range(n):
        go(submit, (lab.alice, lab.bob, lab.amy)[i % 3], name=f"q{i}")
    go(run_cycle)
    c = client_for(lab.alice)
    with django_assert_max_num_queries(3):  # membership, count, the page's rows
        r = c.get("/api/v1/queue?page_size=100")
    assert r.json()["count"] == n
    page = Client()
    page.force_login(lab.alice)
    page.get("/queue/")  # the session's first read
    with django_assert_max_num_queries(7):  # session, user, membership, flavors, count, rows, the ETAs' cluster
        assert page.get("/queue/").status_code == 200


def test_positions_follow_the_engine_as_the_queue_moves(lab, submit, go, client_for, full):
    jobs = [go(submit, lab.alice, name=f"w{i}", gpus=1) for i in range(4)]
    go(run_cycle)
    before = {r["id"]: r["position"] for r in client_for(lab.alice).get("/api/v1/queue").json()["results"]}
    assert sorted(before.values()) == [1, 2, 3, 4]
    Job.objects.filter(pk=jobs[0].pk).update(state=JobState.CANCELLED)  # the head leaves: everyone moves up
    after = {r["id"]: r["position"] for r in client_for(lab.alice).get("/api/v1/queue").json()["results"]}
    assert after == {pk: before[pk] - (before[pk] > before[jobs[0].pk]) for pk in before if pk != jobs[0].pk}
