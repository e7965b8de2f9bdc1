"""Bookings for teams: a team admin books for their own team within the team's nominal quota (a department admin
for any of its teams within the department's), the engine lets only the team's members use it, outside the team's
share; bad input (an unknown team, a team and users together) is a 400 naming the field, with nothing written;
edits and cancels by the team's admins only; a team with bookings is kept."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from portal.models import AuditEntry
from quotas.services.teams import member_set_team, team_create, team_delete, team_quota_set
from scheduling.models import Booking, JobState
from scheduling.services.cycle import run_cycle
from scheduling.services.snapshot import build_snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture
def teams(lab):
    """vision split 2/2 between cv (amy, its team admin) and det (alice); nlp has a team cv of its own."""
    from portal.models import Membership

    cv = team_create(department=lab.vision, slug="cv", actor=None)
    det = team_create(department=lab.vision, slug="det", actor=None)
    team_create(department=lab.nlp, slug="cv", actor=None)
    team_quota_set(team=cv, flavor=lab.a100, nominal=2, lending_limit=0, borrowing_limit=0, actor=None,
                   check_role=False)
    team_quota_set(team=det, flavor=lab.a100, nominal=2, actor=None, check_role=False)
    member_set_team(membership=Membership.objects.get(user=lab.amy), team=cv, team_admin=True, actor=None)
    member_set_team(membership=Membership.objects.get(user=lab.alice), team=det, actor=None)
    return cv, det


def _at(hours: float) -> str:
    base = timezone.now().replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    return (base + timedelta(hours=hours)).isoformat()


def _book(client, **fields):
    body = {"flavor": "a100-80gb", "gpus": 2, "start": _at(9), "end": _at(12), "purpose": "cv deadline",
            "team": "cv"}
    body.update(fields)
    return client.post("/api/v1/bookings", body, format="json")


def _field(r, name) -> dict:
    return r.json()["error"]["fields"][name][0]


def test_a_team_admin_books_for_their_team_within_its_share(lab, teams, client_for):
    amy = client_for(lab.amy)
    r = _book(amy)
    assert r.status_code == 201, r.content
    assert (r.json()["department"], r.json()["team"]) == ("vision", "cv")
    assert AuditEntry.objects.get(action="booking.create").new["team"] == "cv"
    r = _book(amy, gpus=1, start=_at(10), end=_at(11))
    assert r.status_code == 400 and _field(r, "gpus")["code"] == "over_quota"
    assert "team's nominal quota: 2 a100-80gb GPUs, of which 0 are not booked yet" in _field(r, "gpus")["message"]
    assert Booking.objects.count() == 1


def test_a_team_admin_books_for_no_one_but_their_team(lab, teams, client_for):
    amy = client_for(lab.amy)
    assert _book(amy, team="det").status_code == 403
    body = {"flavor": "a100-80gb", "gpus": 1, "start": _at(9), "end": _at(10), "purpose": "x"}
    assert amy.post("/api/v1/bookings", body, format="json").status_code == 403  # the whole department's
    assert _book(client_for(lab.alice), team="det").status_code == 403  # a team's member, not its admin
    assert not Booking.objects.exists()


def test_a_department_admin_books_for_a_team_within_the_departments_quota(lab, teams, client_for):
    r = _book(client_for(lab.vadmin), gpus=4)  # above cv's share of 2, within vision's nominal of 4
    assert r.status_code == 201 and r.json()["team"] == "cv"


def test_an_unknown_team_names_the_field(lab, teams, client_for):
    r = _book(client_for(lab.vadmin), team="nlp-team")
    assert r.status_code == 400 and _field(r, "team")["code"] == "does_not_exist"
    assert not Booking.objects.exists()


def test_a_team_of_another_department_is_unknown(lab, teams, client_for):
    r = _book(client_for(lab.root), department="vision", team="cv")  # vision's cv: fine
    assert r.status_code == 201
    r = _book(client_for(lab.vadmin), department="nlp", team="cv")
    assert r.status_code == 403  # not their department


def test_a_team_and_users_together_are_refused(lab, teams, client_for):
    r = _book(client_for(lab.vadmin), users=["amy"])
    assert r.status_code == 400 and "team or for some members" in _field(r, "users")["message"]
    assert not Booking.objects.exists()


def test_the_teams_admins_edit_and_cancel_its_bookings_and_no_one_else_of_it(lab, teams, client_for):
    pk = _book(client_for(lab.vadmin), gpus=1).json()["id"]
    assert client_for(lab.alice).patch(f"/api/v1/bookings/{pk}", {"gpus": 2}, format="json").status_code == 403
    r = client_for(lab.amy).patch(f"/api/v1/bookings/{pk}", {"gpus": 3}, format="json")
    assert r.status_code == 400 and _field(r, "gpus")["code"] == "over_quota"  # the team's share binds its admin
    assert client_for(lab.amy).patch(f"/api/v1/bookings/{pk}", {"gpus": 2}, format="json").status_code == 200
    r = client_for(lab.amy).patch(f"/api/v1/bookings/{pk}", {"users": ["amy"]}, format="json")
    assert r.status_code == 400 and Booking.objects.get().users.count() == 0
    assert client_for(lab.alice).delete(f"/api/v1/bookings/{pk}").status_code == 403
    assert client_for(lab.amy).delete(f"/api/v1/bookings/{pk}").status_code == 204
    assert Booking.objects.get().cancelled_at is not None


def test_a_team_admin_may_not_change_the_departments_bookings(lab, teams, client_for):
    body = {"flavor": "a100-80gb", "gpus": 1, "start": _at(9), "end": _at(10), "purpose": "x"}
    pk = client_for(lab.vadmin).post("/api/v1/bookings", body, format="json").json()["id"]
    assert client_for(lab.amy).delete(f"/api/v1/bookings/{pk}").status_code == 403


def test_the_engine_and_the_calendar_name_the_team(lab, teams, client_for):
    _book(client_for(lab.amy))
    snap, _ = build_snapshot(now=timezone.now())
    (b,) = snap.bookings
    assert (b.teams, b.departments, b.users) == (("vision/cv",), (), ())
    day = (timezone.now() + timedelta(days=1)).date().isoformat()
    (row,) = client_for(lab.alice).get(f"/api/v1/calendar?start={day}").json()["bookings"]
    assert (row["department"], row["team"]) == ("vision", "cv")
    (row,) = client_for(lab.bob).get(f"/api/v1/calendar?start={day}").json()["bookings"]
    assert row["team"] is None and row["department"] == "another department"


def test_the_teams_members_use_its_booking_outside_the_teams_share(lab, teams, client_for, submit, go):
    now = timezone.now()
    r = _book(client_for(lab.root), department="vision", gpus=8, start=(now - timedelta(minutes=5)).isoformat(),
              end=(now + timedelta(hours=3)).isoformat())  # the whole cluster, for cv
    assert r.status_code == 201
    amy_job = go(submit, lab.amy, name="cv", gpus=4)  # cv's share is 2 and it borrows nothing
    alice_job = go(submit, lab.alice, name="det", gpus=1)  # det, a sibling team
    bob_job = go(submit, lab.bob, name="nlp", gpus=1)
    go(run_cycle)
    for job in (amy_job, alice_job, bob_job):
        job.refresh_from_db()
    assert amy_job.state in (JobState.ADMITTED, JobState.RUNNING)
    assert (alice_job.state, alice_job.reason_code) == (JobState.QUEUED, "booked")
    assert (bob_job.state, bob_job.reason_code) == (JobState.QUEUED, "booked")


def test_a_team_with_bookings_is_kept(lab, teams):
    from portal.errors import ValidationFailed

    cv, _ = teams
    Booking.objects.create(department=lab.vision, team=cv, cluster=lab.cluster, flavor=lab.a100, gpus=1,
                           start=timezone.now() - timedelta(days=3), end=timezone.now() - timedelta(days=2),
                           purpose="past", cancelled_at=timezone.now() - timedelta(days=4))
    with pytest.raises(ValidationFailed) as exc:
        team_delete(team=cv, actor=None)
    assert exc.value.fields["team"][0]["code"] == "has_bookings"
