"""Live updates that scale: pages poll /jobs/live for the jobs they show, with ETags (304 while nothing
changed), never the whole job list; estimates are shown on the cluster's clock."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from scheduling.models import Job
from scheduling.selectors import wall_eta

pytestmark = pytest.mark.django_db


def test_the_fragment_answers_304_until_a_job_changes(lab, submit, client, django_assert_max_num_queries):
    jobs = [submit(lab.alice) for _ in range(3)]
    other = submit(lab.bob)
    client.force_login(lab.alice)
    ids = ",".join(str(j.pk) for j in [*jobs, other])
    with django_assert_max_num_queries(4):
        first = client.get(f"/jobs/live?ids={ids}")
    assert first.status_code == 200
    body = first.json()["jobs"]
    assert [j["id"] for j in body] == [j.pk for j in jobs]  # bob's job is not even mentioned
    assert {j["state"] for j in body} == {"queued"} and body[0]["n_events"] == 1
    again = client.get(f"/jobs/live?ids={ids}", HTTP_IF_NONE_MATCH=first["ETag"])
    assert again.status_code == 304 and again.content == b""
    Job.objects.filter(pk=jobs[1].pk).update(reason_message="now something else")
    changed = client.get(f"/jobs/live?ids={ids}", HTTP_IF_NONE_MATCH=first["ETag"])
    assert changed.status_code == 200 and changed["ETag"] != first["ETag"]


def test_bad_ids_are_a_400_and_too_many_too(lab, client):
    client.force_login(lab.alice)
    assert client.get("/jobs/live?ids=1,x").status_code == 400
    assert client.get("/jobs/live?ids=" + ",".join(map(str, range(1, 200)))).status_code == 400
    assert client.get("/jobs/live?ids=").json() == {"jobs": []}


def test_the_pages_no_longer_fetch_the_whole_job_list(client, lab):
    client.force_login(lab.alice)
    js = client.get("/static/portal/app.js")
    text = b"".join(js.streaming_content).decode() if js.streaming else js.content.decode()
    assert "page_size=500" not in text and "/jobs/live?ids=" in text and "If-None-Match" in text


def test_estimates_are_shown_on_the_clusters_clock(settings, lab):
    from scheduling.backends import reset_backends

    settings.SIM_SPEEDUP = 60
    reset_backends()
    now = timezone.now()
    assert wall_eta(now + timedelta(hours=1), now=now) == now + timedelta(minutes=1)
    assert wall_eta(now - timedelta(minutes=5), now=now) == now - timedelta(minutes=5)
    assert wall_eta(None) is None
    settings.SIM_SPEEDUP = 1
    reset_backends()
    assert wall_eta(now + timedelta(hours=1), now=now) == now + timedelta(hours=1)


def test_destructive_actions_ask_first(lab, submit, client):
    job = submit(lab.alice)
    client.force_login(lab.alice)
    html = client.get(f"/jobs/{job.pk}/").content.decode()
    assert 'data-confirm="Cancel job' in html
