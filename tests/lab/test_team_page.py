"""The teams page of a department: its admins create teams, split the quota and place members through the API's
serializers and services; a team admin changes only their team's limits; anyone else gets a 403 or a 404."""

from __future__ import annotations

import pytest
from django.test import Client

from portal.models import Membership, Team
from quotas.models import TeamQuota

pytestmark = pytest.mark.django_db


def _client(user):
    c = Client()
    c.force_login(user)
    return c


def test_an_admin_creates_splits_and_places_members_from_the_page(lab):
    c = _client(lab.vadmin)
    assert 'id="teams-link"' in c.get("/lab/departments/vision/").content.decode()
    assert c.post("/lab/departments/vision/teams", {"action": "create", "slug": "cv", "name": "Vision core",
                                                    "budget_share_pct": "40"}).status_code == 302
    r = c.post("/lab/departments/vision/teams", {"action": "split", "team": "cv", "flavor": "a100-80gb",
                                                 "nominal": "3", "borrowing_limit": "", "lending_limit": "1"})
    assert r.status_code == 302
    assert c.post("/lab/departments/vision/teams", {"action": "member", "user": "amy", "team": "cv",
                                                    "team_admin": "on"}).status_code == 302
    assert TeamQuota.objects.get(team__slug="cv").lending_limit == 1
    assert Membership.objects.get(user=lab.amy).team_admin is True
    page = c.get("/lab/departments/vision/teams").content.decode()
    assert '<tr data-flavor="a100-80gb"><td>a100-80gb</td><td>4</td><td>3</td><td>1</td></tr>' in page
    assert "a100-80gb: 3 / any / 1" in page and "amy*" in page and "40%" in page


@pytest.mark.parametrize(("form", "message"), [
    ({"action": "create", "slug": "Not A Slug"}, "slug"),
    ({"action": "create", "slug": "cv"}, "has a team cv already"),
    ({"action": "create", "slug": "x", "budget_share_pct": "150"}, "less than or equal to 100"),
    ({"action": "split", "team": "cv", "flavor": "a100-80gb", "nominal": "5"}, "1 above vision&#x27;s nominal of 4"),
    ({"action": "split", "team": "", "flavor": "a100-80gb", "nominal": "1"}, "Choose a team."),
    ({"action": "split", "team": "cv", "flavor": "a100-80gb", "nominal": "2", "lending_limit": "3"},
     "lending limit (3) is above the nominal (2)"),
    ({"action": "member", "user": "nobody", "team": "cv"}, "Choose a member of the department."),
])
def test_each_bad_form_is_a_400_with_its_message_and_nothing_written(lab, form, message):
    Team.objects.create(department=lab.vision, slug="cv", name="cv")
    r = _client(lab.vadmin).post("/lab/departments/vision/teams", form)
    assert r.status_code == 400
    assert message in r.content.decode()
    assert Team.objects.count() == 1 and not TeamQuota.objects.exists()


def test_a_team_admin_tunes_their_teams_limits_only_and_others_are_refused(lab):
    cv = Team.objects.create(department=lab.vision, slug="cv", name="cv")
    Team.objects.create(department=lab.vision, slug="det", name="det")
    TeamQuota.objects.create(team=cv, flavor=lab.a100, nominal=2)
    Membership.objects.filter(user=lab.amy).update(team=cv, team_admin=True)
    amy = _client(lab.amy)
    page = amy.get("/lab/departments/vision/teams").content.decode()
    assert 'data-team="cv"' in page and 'data-team="det"' not in page and 'id="team-create"' not in page
    ok = amy.post("/lab/departments/vision/teams", {"action": "split", "team": "cv", "flavor": "a100-80gb",
                                                    "nominal": "2", "lending_limit": "0"})
    assert ok.status_code == 302 and TeamQuota.objects.get(team=cv).lending_limit == 0
    more = amy.post("/lab/departments/vision/teams", {"action": "split", "team": "cv", "flavor": "a100-80gb",
                                                      "nominal": "3"})
    assert more.status_code == 403  # the nominal split is the department admin's
    assert TeamQuota.objects.get(team=cv).nominal == 2
    assert amy.post("/lab/departments/vision/teams", {"action": "create", "slug": "x"}).status_code == 403
    assert _client(lab.alice).get("/lab/departments/vision/teams").status_code == 403
    assert _client(lab.bob).get("/lab/departments/vision/teams").status_code == 404
