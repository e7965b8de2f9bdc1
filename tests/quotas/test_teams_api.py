"""Teams inside departments end to end: a department admin creates teams, splits the quota and names members
(API); submissions record the team; the engine decides with the split and says the level; tenancy keeps a team
admin to their team's limits and a researcher to their own team; every bad input is a 400."""

from __future__ import annotations

import pytest

from portal.models import AuditEntry, Membership, Team
from quotas.models import Quota, TeamQuota
from scheduling.models import JobState
from scheduling.services.cycle import run_cycle

pytestmark = pytest.mark.django_db


def _teams(client):
    """vision split 2/2 between cv (lending nothing) and det; alice in det, amy in cv as its team admin."""
    assert client.post("/api/v1/teams", {"slug": "cv", "name": "Computer vision"}, format="json").status_code == 201
    assert client.post("/api/v1/teams", {"slug": "det"}, format="json").status_code == 201
    assert client.put("/api/v1/teams/vision/cv/quotas/a100-80gb", {"nominal": 2, "lending_limit": 0},
                      format="json").status_code == 200
    assert client.put("/api/v1/teams/vision/det/quotas/a100-80gb", {"nominal": 2}, format="json").status_code == 200
    assert client.put("/api/v1/teams/vision/det/members/alice", {}, format="json").status_code == 200
    assert client.put("/api/v1/teams/vision/cv/members/amy", {"team_admin": True}, format="json").status_code == 200


def test_a_department_admin_splits_the_quota_and_jobs_carry_their_team(lab, submit, go, client_for):
    admin = client_for(lab.vadmin)
    _teams(admin)
    body = admin.get("/api/v1/teams/vision/cv").json()
    assert body == {"department": "vision", "slug": "cv", "name": "Computer vision", "budget_share_pct": None,
                    "quotas": [{"flavor": "a100-80gb", "nominal": 2, "borrowing_limit": None, "lending_limit": 0}],
                    "members": [{"user": "amy", "team_admin": True}]}
    job = go(submit, lab.alice, name="a", gpus=1)
    assert job.team.slug == "det"
    listed = client_for(lab.alice).get(f"/api/v1/jobs/{job.pk}").json()
    assert listed["team"] == "det"
    assert client_for(lab.alice).get("/api/v1/jobs?team=cv").json()["results"] == []
    assert AuditEntry.objects.filter(action="team_quota.set").count() == 2


def test_a_teams_job_waits_for_its_siblings_guarantee_with_the_level_in_its_reason(lab, submit, go, client_for):
    _teams(client_for(lab.vadmin))
    Quota.objects.filter(department=lab.nlp).update(lending_limit=0)  # the cohort has nothing to lend
    job = go(submit, lab.alice, name="a", gpus=4)
    go(run_cycle)
    job.refresh_from_db()
    assert job.state == JobState.QUEUED and job.reason_code == "team_quota"
    assert "team det quota in use" in job.reason_message
    assert "department has 2 idle, guaranteed to cv" in job.reason_message
    mine = go(submit, lab.amy, name="b", gpus=2)  # cv's own guarantee
    go(run_cycle)
    mine.refresh_from_db()
    assert mine.state == JobState.ADMITTED


def test_a_team_at_its_borrowing_limit_waits(lab, submit, go, client_for):
    admin = client_for(lab.vadmin)
    _teams(admin)
    admin.put("/api/v1/teams/vision/det/quotas/a100-80gb", {"nominal": 2, "borrowing_limit": 0}, format="json")
    job = go(submit, lab.alice, name="a", gpus=3)
    go(run_cycle)
    job.refresh_from_db()
    assert job.reason_code == "team_borrow_limit" and job.reason_detail["never"] is True


def test_the_teams_nominals_never_exceed_the_departments_the_400_says_by_how_much(lab, client_for):
    admin = client_for(lab.vadmin)
    _teams(admin)
    r = admin.put("/api/v1/teams/vision/det/quotas/a100-80gb", {"nominal": 5}, format="json")
    assert r.status_code == 400
    message = r.json()["error"]["fields"]["nominal"][0]["message"]
    assert "add up to 7, 3 above vision's nominal of 4" in message
    assert TeamQuota.objects.get(team__slug="det").nominal == 2  # nothing half-written


@pytest.mark.parametrize(("url", "body", "field"), [
    ("/api/v1/teams", {"slug": "Bad Slug"}, "slug"),
    ("/api/v1/teams", {"slug": "cv"}, "slug"),  # the department has it already
    ("/api/v1/teams", {"slug": "x", "budget_share_pct": 101}, "budget_share_pct"),
    ("/api/v1/teams", {"slug": "x", "colour": "red"}, "colour"),
    ("/api/v1/teams/vision/cv/quotas/a100-80gb", {"nominal": 2, "lending_limit": 3}, "lending_limit"),
    ("/api/v1/teams/vision/cv/quotas/a100-80gb", {"nominal": -1}, "nominal"),
    ("/api/v1/teams/vision/cv/members/amy", {"team_admin": "maybe"}, "team_admin"),
])
def test_each_bad_input_is_a_400_naming_its_field(lab, client_for, url, body, field):
    admin = client_for(lab.vadmin)
    _teams(admin)
    method = admin.post if url == "/api/v1/teams" else admin.put
    r = method(url, body, format="json")
    assert r.status_code == 400, r.content
    assert field in r.json()["error"]["fields"]


def test_a_team_with_jobs_is_kept(lab, submit, go, client_for):
    admin = client_for(lab.vadmin)
    _teams(admin)
    go(submit, lab.alice, name="a", gpus=1)
    r = admin.delete("/api/v1/teams/vision/det")
    assert r.status_code == 400 and "has 1 job(s)" in r.json()["error"]["fields"]["team"][0]["message"]
    assert admin.delete("/api/v1/teams/vision/cv").status_code == 204
    assert Membership.objects.get(user=lab.amy).team is None


def test_tenancy_a_team_admin_tunes_only_their_team_researchers_see_their_own(lab, client_for):
    _teams(client_for(lab.vadmin))
    amy = client_for(lab.amy)  # cv's team admin
    assert amy.put("/api/v1/teams/vision/cv/quotas/a100-80gb", {"nominal": 2, "lending_limit": 1},
                   format="json").status_code == 200
    assert amy.put("/api/v1/teams/vision/cv/quotas/a100-80gb", {"nominal": 3},
                   format="json").status_code == 403  # the nominal split is the department admin's
    assert amy.get("/api/v1/teams/vision/det").status_code == 404  # not her team
    assert amy.put("/api/v1/teams/vision/cv/members/alice", {}, format="json").status_code == 403
    assert [t["slug"] for t in client_for(lab.alice).get("/api/v1/teams").json()] == ["det"]
    assert client_for(lab.bob).get("/api/v1/teams").json() == []  # nlp has no teams; bob is in none
    assert client_for(lab.nadmin).get("/api/v1/teams/vision/cv").status_code == 404  # another department's
    assert client_for(lab.nadmin).put("/api/v1/teams/vision/cv/members/bob", {}, format="json").status_code == 404
    assert [t["slug"] for t in client_for(lab.vadmin).get("/api/v1/teams").json()] == ["cv", "det"]
    assert Team.objects.count() == 2


def test_each_teams_fair_share_standing_is_a_metric_of_its_own(lab, submit, go, client_for, client):
    _teams(client_for(lab.vadmin))
    go(submit, lab.alice, name="a", gpus=1)
    go(run_cycle)
    text = client.get("/metrics").content.decode()
    assert 'portal_team_fair_share_factor{department="vision",team="cv"}' in text
    assert 'portal_team_fair_share_use_ratio{department="vision",team="det"}' in text
    assert 'portal_fair_share_factor{department="vision"}' in text  # the department's own series, unchanged
    assert 'portal_fair_share_factor{department="vision",team=' not in text


def test_a_team_admin_approves_their_teams_jobs_and_no_others(lab, submit, go, client_for):
    from quotas.models import ApprovalRule

    admin = client_for(lab.vadmin)
    _teams(admin)
    admin.put("/api/v1/teams/vision/cv/members/alice", {}, format="json")  # alice moves to cv, amy's team
    ApprovalRule.objects.create(department=lab.vision, gpus_above=1)
    theirs = go(submit, lab.alice, name="cv-job", gpus=2)
    other = go(submit, lab.vadmin, name="no-team", gpus=2)  # no team: the department's admins decide
    assert theirs.state == JobState.PENDING_APPROVAL and other.state == JobState.PENDING_APPROVAL
    amy = client_for(lab.amy)
    inbox = amy.get("/api/v1/approvals").json()["results"]
    assert [j["id"] for j in inbox] == [theirs.pk]
    assert amy.post(f"/api/v1/approvals/{other.pk}/approve", {}, format="json").status_code == 403
    r = amy.post(f"/api/v1/approvals/{theirs.pk}/approve", {"comment": "fine"}, format="json")
    assert r.status_code == 200 and r.json()["decision"] == "approved"
    assert client_for(lab.alice).get("/api/v1/approvals").status_code == 403  # a researcher has no inbox


def test_the_fair_share_statement_shows_the_tree(lab, submit, go, client_for):
    from django.test import Client

    _teams(client_for(lab.vadmin))
    go(submit, lab.alice, name="a", gpus=1)
    go(run_cycle)
    body = client_for(lab.vadmin).get("/api/v1/fair-share").json()
    vision = next(s for s in (body if isinstance(body, list) else body["results"]) if s["department"] == "vision")
    assert [(t["team"], t["nominal"], t["running_gpus"]) for t in vision["teams"]] == [("cv", 2, 0), ("det", 2, 1)]
    page = Client()
    page.force_login(lab.vadmin)
    html = page.get("/fair-share/").content.decode()
    assert '<tr data-team="cv"><td>cv</td><td class="num">2</td><td class="num">0</td>' in html
