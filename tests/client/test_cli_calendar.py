"""gpup and the calendar: bookings listed, made and cancelled, maintenance windows, the week; the portal's 400s
(a booking over the quota, a conflict, an unknown node) as a message naming the field and exit 2, bad times
refused before anything is sent, and a member who may not book told so (exit 4)."""

from __future__ import annotations

import json
from datetime import UTC, timedelta

import pytest
from django.utils import timezone

from portal.models import AuditEntry
from scheduling.models import Booking, MaintenanceWindow

pytestmark = pytest.mark.django_db(transaction=True)


def _at(hours: float) -> str:
    base = timezone.now().astimezone(UTC).replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    return (base + timedelta(hours=hours)).strftime("%Y-%m-%dT%H:%MZ")


def _book(gpup, user, *extra):
    return gpup("bookings", "create", "--flavor", "a100-80gb", "--start", _at(9), "--end", _at(12),
                "--purpose", "NLP course", *extra, user=user)


def test_a_department_admin_books_lists_and_cancels(gpup, lab):
    r = _book(gpup, lab.nadmin, "--gpus", "3")
    assert r.exit_code == 0, r.output
    booking = Booking.objects.get()
    assert (booking.department, booking.gpus, booking.purpose) == (lab.nlp, 3, "NLP course")
    assert f"booking {booking.pk}" in r.stdout and "for nlp (everyone)" in r.stdout

    r = gpup("bookings", "list", user=lab.bob)
    assert r.exit_code == 0 and "3 a100-80gb" in r.stdout and "NLP course" in r.stdout
    r = gpup("bookings", "list", "--json", user=lab.alice)  # another department's bookings are not listed
    assert r.exit_code == 0 and json.loads(r.stdout) == []

    r = gpup("bookings", "cancel", str(booking.pk), user=lab.nadmin)
    assert r.exit_code == 0 and f"cancelled booking {booking.pk}" in r.stdout
    booking.refresh_from_db()
    assert booking.cancelled_at is not None
    assert AuditEntry.objects.filter(action="booking.cancel").count() == 1
    assert "(cancelled)" in gpup("bookings", "list", user=lab.bob).stdout


def test_a_booking_for_some_members_and_by_hours(gpup, lab):
    r = gpup("bookings", "create", "--flavor", "a100-80gb", "--gpus", "2", "--start", _at(9), "--hours", "1.5",
             "--purpose", "demo", "--user", "bob", user=lab.nadmin)
    assert r.exit_code == 0, r.output
    booking = Booking.objects.get()
    assert booking.end - booking.start == timedelta(hours=1.5)
    assert [u.username for u in booking.users.all()] == ["bob"] and "(bob)" in r.stdout


def test_a_naive_time_is_the_terminals_local_time(gpup, lab, monkeypatch):
    monkeypatch.setenv("TZ", "Europe/Berlin")
    import time
    time.tzset()
    try:
        day = (timezone.now() + timedelta(days=2)).strftime("%Y-%m-%d")
        r = gpup("bookings", "create", "--flavor", "a100-80gb", "--gpus", "1", "--start", f"{day} 09:00",
                 "--end", f"{day}T10:00", "--purpose", "local", user=lab.nadmin)
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
    assert r.exit_code == 0, r.output
    start = Booking.objects.get().start.astimezone(UTC)
    assert (start.hour, start.minute) in {(8, 0), (7, 0)}  # 09:00 in Berlin, winter or summer time


def test_a_booking_over_the_departments_quota_is_a_clear_error(gpup, lab):
    r = _book(gpup, lab.nadmin, "--gpus", "5")
    assert r.exit_code == 2
    assert "gpus:" in r.stderr and "nominal quota: 4" in r.stderr and "(over_quota)" in r.stderr
    assert "Traceback" not in r.output and not Booking.objects.exists()


def test_a_conflicting_booking_names_what_is_in_the_way(gpup, lab):
    assert _book(gpup, lab.root, "--gpus", "6", "--department", "vision").exit_code == 0
    r = _book(gpup, lab.root, "--gpus", "3", "--department", "nlp")
    assert r.exit_code == 2
    assert "Only 2 of the 8 a100-80gb GPUs" in r.stderr and "(conflict)" in r.stderr
    assert Booking.objects.count() == 1


def test_an_error_as_json_carries_the_fields(gpup, lab):
    r = _book(gpup, lab.nadmin, "--gpus", "5", "--json")
    assert r.exit_code == 2
    assert json.loads(r.stdout)["error"]["fields"]["gpus"][0]["code"] == "over_quota"


def test_a_researcher_may_not_book(gpup, lab):
    r = _book(gpup, lab.bob, "--gpus", "1")
    assert r.exit_code == 4 and "book GPUs" in r.stderr and not Booking.objects.exists()


def test_an_unknown_flavor_names_the_field(gpup, lab):
    r = gpup("bookings", "create", "--flavor", "h200", "--gpus", "1", "--start", _at(9), "--end", _at(10),
             "--purpose", "x", user=lab.nadmin)
    assert r.exit_code == 2 and "flavor: No such flavor." in r.stderr


def test_an_end_before_the_start_names_the_field(gpup, lab):
    r = gpup("bookings", "create", "--flavor", "a100-80gb", "--gpus", "1", "--start", _at(10), "--end", _at(9),
             "--purpose", "x", user=lab.nadmin)
    assert r.exit_code == 2 and "end:" in r.stderr and not Booking.objects.exists()


def test_a_time_that_is_no_time_is_refused_before_anything_is_sent(gpup, lab):
    r = gpup("bookings", "create", "--flavor", "a100-80gb", "--gpus", "1", "--start", "tuesday 9am",
             "--end", _at(10), "--purpose", "x", user=lab.nadmin)
    assert r.exit_code == 2 and "--start 'tuesday 9am' is not a time" in r.stderr


def test_end_and_hours_are_one_or_the_other(gpup, lab):
    r = gpup("bookings", "create", "--flavor", "a100-80gb", "--gpus", "1", "--start", _at(9), "--purpose", "x",
             user=lab.nadmin)
    assert r.exit_code == 2 and "--end or --hours" in r.stderr
    r = gpup("bookings", "create", "--flavor", "a100-80gb", "--gpus", "1", "--start", _at(9), "--end", _at(10),
             "--hours", "1", "--purpose", "x", user=lab.nadmin)
    assert r.exit_code == 2 and "--end or --hours" in r.stderr


def test_cancelling_another_departments_booking_is_not_found(gpup, lab):
    assert _book(gpup, lab.nadmin, "--gpus", "1").exit_code == 0
    r = gpup("bookings", "cancel", str(Booking.objects.get().pk), user=lab.vadmin)
    assert r.exit_code == 3 and Booking.objects.get().cancelled_at is None


def test_a_platform_admin_declares_lists_and_cancels_maintenance(gpup, lab):
    r = gpup("maintenance", "create", "--node", "n1", "--start", _at(18), "--end", _at(22),
             "--reason", "firmware update", user=lab.root)
    assert r.exit_code == 0, r.output
    window = MaintenanceWindow.objects.get()
    assert window.nodes == ["n1"] and f"maintenance {window.pk} on default (n1)" in r.stdout
    r = gpup("maintenance", "list", user=lab.alice)  # every member reads them
    assert r.exit_code == 0 and "firmware update" in r.stdout and "n1" in r.stdout
    assert gpup("maintenance", "cancel", str(window.pk), user=lab.root).exit_code == 0
    window.refresh_from_db()
    assert window.cancelled_at is not None


def test_maintenance_by_selector(gpup, lab):
    lab.nodes[0].labels = {**lab.nodes[0].labels, "rack": "r1"}
    lab.nodes[0].save()
    r = gpup("maintenance", "create", "--selector", "rack=r1", "--start", _at(18), "--end", _at(22),
             "--reason", "rack r1", user=lab.root)
    assert r.exit_code == 0, r.output
    assert MaintenanceWindow.objects.get().selector == {"rack": "r1"} and "(n0)" in r.stdout


def test_a_researcher_may_not_declare_maintenance(gpup, lab):
    r = gpup("maintenance", "create", "--start", _at(18), "--end", _at(22), "--reason", "x", user=lab.alice)
    assert r.exit_code == 4 and not MaintenanceWindow.objects.exists()
    r = gpup("maintenance", "cancel", "1", user=lab.alice)
    assert r.exit_code == 4


def test_maintenance_of_an_unknown_node_names_the_field(gpup, lab):
    r = gpup("maintenance", "create", "--node", "n9", "--start", _at(18), "--end", _at(22), "--reason", "x",
             user=lab.root)
    assert r.exit_code == 2 and "nodes: No such node on default: n9." in r.stderr
    assert not MaintenanceWindow.objects.exists()


def test_a_selector_without_a_value_is_refused(gpup, lab):
    r = gpup("maintenance", "create", "--selector", "rack", "--start", _at(18), "--end", _at(22), "--reason", "x",
             user=lab.root)
    assert r.exit_code == 2 and "LABEL=VALUE" in r.stderr


def test_maintenance_that_leaves_too_few_gpus_for_bookings_is_a_conflict(gpup, lab):
    assert _book(gpup, lab.root, "--gpus", "6", "--department", "vision").exit_code == 0
    r = gpup("maintenance", "create", "--node", "n1", "--start", _at(8), "--end", _at(10), "--reason", "x",
             user=lab.root)
    assert r.exit_code == 2 and "(conflict)" in r.stderr and "2 short" in r.stderr


def test_the_week_as_each_reader_sees_it(gpup, lab):
    assert _book(gpup, lab.nadmin, "--gpus", "2").exit_code == 0
    assert gpup("maintenance", "create", "--node", "n0", "--start", _at(18), "--end", _at(20), "--reason",
                "firmware", user=lab.root).exit_code == 0
    r = gpup("calendar", user=lab.bob)
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    booking = next(line for line in lines if "booking" in line)
    assert "nlp, NLP course (everyone)" in booking
    assert lines.index(booking) < next(i for i, line in enumerate(lines) if "maintenance" in line)
    r = gpup("calendar", "--json", user=lab.alice)
    seen = json.loads(r.stdout)["bookings"][0]
    assert (seen["own"], seen["department"], seen["purpose"]) == (False, "another department",
                                                                   "booked by another department")
    later = (timezone.now() + timedelta(days=20)).strftime("%Y-%m-%d")
    assert "nothing booked" in gpup("calendar", "--start", later, "--days", "3", user=lab.bob).stdout


def test_a_calendar_start_that_is_no_date_is_refused(gpup, lab):
    r = gpup("calendar", "--start", "next week", user=lab.bob)
    assert r.exit_code == 2 and "is not a date or a time" in r.stderr


def test_the_client_books_and_reads_the_calendar(portal, lab):
    from datetime import datetime

    client = portal(lab.nadmin)
    start = datetime.fromisoformat(_at(9).replace("Z", "+00:00"))
    booking = client.booking_create(flavor="a100-80gb", gpus=2, start=start, end=start + timedelta(hours=2),
                                    purpose="course")
    assert client.booking(booking["id"])["gpus"] == 2
    assert client.booking_update(booking, gpus=3, comment="more students")["gpus"] == 3
    assert [b["id"] for b in client.bookings()] == [booking["id"]]
    assert client.calendar(start=start.date(), days=1)["bookings"][0]["purpose"] == "course"
    client.booking_cancel(booking)
    assert client.booking(booking)["cancelled"] is True
    with pytest.raises(ValueError, match="time zone"):
        client.booking_create(flavor="a100-80gb", gpus=1, start=start.replace(tzinfo=None), end=start, purpose="x")


def test_a_team_admin_books_for_their_team(gpup, lab):
    from portal.models import Membership
    from quotas.services.teams import member_set_team, team_create, team_quota_set

    cv = team_create(department=lab.vision, slug="cv", actor=None)
    team_quota_set(team=cv, flavor=lab.a100, nominal=2, actor=None, check_role=False)
    member_set_team(membership=Membership.objects.get(user=lab.amy), team=cv, team_admin=True, actor=None)
    r = _book(gpup, lab.amy, "--gpus", "2", "--team", "cv")
    assert r.exit_code == 0, r.output
    assert "for vision (team cv)" in r.stdout and Booking.objects.get().team == cv
    r = _book(gpup, lab.amy, "--gpus", "1", "--team", "cv")
    assert r.exit_code == 2 and "team's nominal quota: 2" in r.stderr
    assert "team cv" in gpup("bookings", "list", user=lab.alice).stdout


def test_a_team_and_users_together_are_refused_before_anything_is_sent(gpup, lab):
    r = _book(gpup, lab.vadmin, "--gpus", "1", "--team", "cv", "--user", "amy")
    assert r.exit_code == 2 and "not both" in r.stderr
