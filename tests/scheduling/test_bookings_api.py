"""Bookings and maintenance windows through the API: who may book (platform admins; department admins within
their department's nominal quota), conflicts with other bookings, maintenance windows and the installed capacity
(a 400 that names them and says how many GPUs are left, nothing written), edits and cancellations audited,
tenancy (a department reads its own bookings; the calendar shows the others' as "another department"), what the
engine is given, and the notices."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.utils import timezone

from notifications.models import Event
from portal.models import AuditEntry
from scheduling.models import Booking, Job, JobState, MaintenanceWindow
from scheduling.services import calendar
from scheduling.services.snapshot import build_snapshot

pytestmark = pytest.mark.django_db


def _at(hours: float) -> str:
    base = timezone.now().replace(minute=0, second=0, microsecond=0) + timedelta(days=1)
    return (base + timedelta(hours=hours)).isoformat()


def _book(client, **fields):
    body = {"flavor": "a100-80gb", "gpus": 4, "start": _at(9), "end": _at(12), "purpose": "NLP course"}
    body.update(fields)
    return client.post("/api/v1/bookings", body, format="json")


def _fields(r) -> dict:
    return r.json().get("fields") or r.json().get("error", {}).get("fields") or {}


def _message(r) -> str:
    return str(r.json())


def test_a_platform_admin_books_for_a_department_and_it_is_audited(lab, client_for):
    r = _book(client_for(lab.root), department="nlp", gpus=6)
    assert r.status_code == 201, r.content
    booking = Booking.objects.get()
    assert (booking.department, booking.gpus, booking.purpose) == (lab.nlp, 6, "NLP course")
    entry = AuditEntry.objects.get(action="booking.create")
    assert entry.new["gpus"] == 6 and entry.department_id == lab.nlp.pk


def test_a_department_admin_books_within_its_nominal_quota(lab, client_for):
    admin = client_for(lab.nadmin)
    assert _book(admin, gpus=3).status_code == 201
    r = _book(admin, gpus=2, start=_at(10), end=_at(11))
    assert r.status_code == 400
    assert _fields(r)["gpus"][0]["code"] == "over_quota"
    assert "nominal quota: 4" in _message(r) and "1 are not booked yet" in _message(r)
    assert Booking.objects.count() == 1


def test_a_department_admin_may_not_book_for_another_department(lab, client_for):
    r = _book(client_for(lab.nadmin), department="vision")
    assert r.status_code == 403
    assert not Booking.objects.exists()


def test_a_researcher_may_not_book(lab, client_for):
    assert _book(client_for(lab.bob)).status_code == 403


def test_a_booking_beyond_the_installed_capacity_says_what_holds_the_rest(lab, client_for):
    root = client_for(lab.root)
    assert _book(root, department="vision", gpus=6, purpose="CVPR deadline").status_code == 201
    r = _book(root, department="nlp", gpus=4, start=_at(11), end=_at(14))
    assert r.status_code == 400
    assert _fields(r)["gpus"][0]["code"] == "conflict"
    assert "Only 2 of the 8 a100-80gb GPUs on default" in _message(r)
    assert "CVPR deadline" in _message(r)
    # after it ends the capacity is free again
    assert _book(root, department="nlp", gpus=8, start=_at(12), end=_at(14)).status_code == 201


def test_a_department_admin_reads_another_departments_booking_in_the_way_without_its_purpose(lab, client_for):
    assert _book(client_for(lab.root), department="vision", gpus=6, purpose="CVPR deadline").status_code == 201
    r = _book(client_for(lab.nadmin), gpus=3, start=_at(0), end=_at(24))
    assert r.status_code == 400
    assert "Only 2 of the 8" in _message(r)
    assert "another department" in _message(r) and "CVPR" not in _message(r)


def test_a_booking_over_a_maintenance_window_names_it(lab, client_for):
    root = client_for(lab.root)
    r = root.post("/api/v1/maintenance", {"nodes": ["n0"], "start": _at(8), "end": _at(10),
                                          "reason": "firmware update"}, format="json")
    assert r.status_code == 201, r.content
    assert r.json()["affected_nodes"] == ["n0"]
    r = _book(root, department="nlp", gpus=6)
    assert r.status_code == 400
    assert "maintenance window" in _message(r) and "firmware update" in _message(r)
    assert "Only 4 of the 8" in _message(r)


def test_a_maintenance_window_that_leaves_a_booking_too_few_gpus_is_refused(lab, client_for):
    root = client_for(lab.root)
    assert _book(root, department="nlp", gpus=6).status_code == 201
    r = root.post("/api/v1/maintenance", {"selector": {"gpu-type": "a100"}, "start": _at(11), "end": _at(13),
                                          "reason": "rack swap"}, format="json")
    assert r.status_code == 400
    assert _fields(r)["start"][0]["code"] == "conflict" and "NLP course" in _message(r)
    assert not MaintenanceWindow.objects.exists()


@pytest.mark.parametrize("body,field", [
    ({"end": _at(8)}, "end"),
    ({"flavor": "h100"}, "flavor"),
    ({"gpus": 0}, "gpus"),
    ({"users": ["nobody"]}, "users"),
    ({"users": ["alice"]}, "users"),  # not a member of nlp
    ({"cluster": "elsewhere"}, "cluster"),
    ({"purpose": ""}, "purpose"),
    ({"start": "tuesday"}, "start"),
])
def test_bad_bookings_are_refused_with_the_field_and_nothing_written(lab, client_for, body, field):
    r = _book(client_for(lab.root), department="nlp", **body)
    assert r.status_code == 400, r.content
    assert field in _fields(r)
    assert not Booking.objects.exists()


def test_a_booking_past_its_end_is_refused(lab, client_for):
    past = (timezone.now() - timedelta(days=2)).isoformat()
    r = _book(client_for(lab.root), department="nlp", start=past, end=(timezone.now() - timedelta(days=1)).isoformat())
    assert r.status_code == 400 and "over already" in _message(r)


@pytest.mark.parametrize("body,field", [
    ({"nodes": ["n9"]}, "nodes"),
    ({"nodes": [], "selector": {"rack": "r9"}}, "selector"),
    ({"nodes": [], "selector": {"bad key!": "x"}}, "selector"),
    ({"end": _at(1)}, "end"),
    ({"reason": ""}, "reason"),
])
def test_bad_maintenance_windows_are_refused(lab, client_for, body, field):
    data = {"nodes": ["n0"], "start": _at(8), "end": _at(10), "reason": "firmware"}
    data.update(body)
    r = client_for(lab.root).post("/api/v1/maintenance", data, format="json")
    assert r.status_code == 400, r.content
    assert field in _fields(r)
    assert not MaintenanceWindow.objects.exists()


def test_only_platform_admins_declare_maintenance(lab, client_for):
    r = client_for(lab.nadmin).post("/api/v1/maintenance", {"nodes": ["n0"], "start": _at(8), "end": _at(10),
                                                            "reason": "x"}, format="json")
    assert r.status_code == 403
    assert client_for(lab.bob).get("/api/v1/maintenance").status_code == 200  # everyone reads them


def test_editing_checks_again_and_cancelling_is_audited(lab, client_for):
    root = client_for(lab.root)
    pk = _book(root, department="nlp", gpus=4).json()["id"]
    r = root.patch(f"/api/v1/bookings/{pk}", {"gpus": 9}, format="json")
    assert r.status_code == 400 and "Only 8 of the 8" in _message(r)
    assert Booking.objects.get().gpus == 4
    r = root.patch(f"/api/v1/bookings/{pk}", {"gpus": 8, "comment": "the whole course"}, format="json")
    assert r.status_code == 200 and r.json()["gpus"] == 8
    assert AuditEntry.objects.get(action="booking.update").old["gpus"] == 4
    assert client_for(lab.nadmin).delete(f"/api/v1/bookings/{pk}").status_code == 204
    assert Booking.objects.get().cancelled_at is not None
    assert AuditEntry.objects.filter(action="booking.cancel").count() == 1
    # the capacity is free again
    assert _book(root, department="vision", gpus=8).status_code == 201


def test_tenancy_a_department_reads_its_own_bookings_and_the_calendar_hides_the_others_owners(lab, client_for):
    root = client_for(lab.root)
    pk = _book(root, department="nlp", gpus=4, users=["bob"]).json()["id"]
    assert client_for(lab.alice).get(f"/api/v1/bookings/{pk}").status_code == 404
    assert client_for(lab.alice).get("/api/v1/bookings").json() == []
    assert client_for(lab.bob).get(f"/api/v1/bookings/{pk}").json()["users"] == ["bob"]
    assert client_for(lab.bob).delete(f"/api/v1/bookings/{pk}").status_code == 403  # a researcher
    day = (timezone.now() + timedelta(days=1)).date().isoformat()
    seen = client_for(lab.alice).get(f"/api/v1/calendar?start={day}&days=7").json()
    (row,) = seen["bookings"]
    assert row["department"] == "another department" and row["users"] == [] and "NLP" not in str(row)
    own = client_for(lab.bob).get(f"/api/v1/calendar?start={day}").json()["bookings"][0]
    assert own["purpose"] == "NLP course" and own["users"] == ["bob"]
    assert client_for(lab.bob).get("/api/v1/calendar?days=40").status_code == 400
    assert client_for(lab.bob).get("/api/v1/calendar?start=soon").status_code == 400


def test_the_engine_is_given_the_live_bookings_and_windows(lab, client_for):
    root = client_for(lab.root)
    _book(root, department="nlp", gpus=4)
    pk = _book(root, department="vision", gpus=2, users=["alice"], purpose="demo").json()["id"]
    root.delete(f"/api/v1/bookings/{pk}")
    _book(root, department="vision", gpus=2, users=["alice"], purpose="demo2")
    root.post("/api/v1/maintenance", {"nodes": ["n1"], "start": _at(20), "end": _at(22), "reason": "fw"},
              format="json")
    snap, _ = build_snapshot(now=timezone.now())
    assert sorted((b.purpose, b.departments, b.users, b.gpus) for b in snap.bookings) == [
        ("NLP course", ("nlp",), (), 4), ("demo2", (), ("alice",), 2)]
    (w,) = snap.maintenance
    assert w.nodes == ("n1",) and w.cluster == "default" and w.reason == "fw"


def test_owners_are_told_when_a_booking_begins_and_when_maintenance_affects_their_job(lab, client_for, submit):
    now = timezone.now()
    booking = calendar.booking_create(actor=lab.root, department=lab.nlp, cluster=lab.cluster, flavor=lab.a100, gpus=2,
                                      start=now - timedelta(minutes=1), end=now + timedelta(hours=2),
                                      purpose="NLP course", users=["bob"])
    job = submit(lab.alice, max_runtime_s=8 * 3600)
    Job.objects.filter(pk=job.pk).update(state=JobState.RUNNING, cluster=lab.cluster, placement=["n0"],
                                         started_at=now)
    calendar.maintenance_create(actor=lab.root, cluster=lab.cluster, nodes=["n0"], start=now + timedelta(hours=3),
                                end=now + timedelta(hours=5), reason="firmware")
    told = calendar.notify_due(now=now)
    assert told == {"maintenance": 1, "booking": 1}
    kinds = {e.kind: e for e in Event.objects.all()}
    assert kinds["maintenance.affects_job"].user_ids == [lab.alice.pk]
    assert kinds["booking.started"].user_ids == [lab.bob.pk]
    assert calendar.notify_due(now=now) == {"maintenance": 0, "booking": 0}  # once each
    assert Booking.objects.get(pk=booking.pk).started_notified_at is not None


def test_window_of_reads_a_date_as_its_midnight_utc():
    from scheduling.selectors import calendar_window

    start, days = calendar_window({"start": "2026-03-03", "days": "2"})
    assert (start.astimezone(UTC), days) == (datetime(2026, 3, 3, tzinfo=UTC), 2)


def test_the_calendar_page_shows_the_week_within_tenancy(lab, client_for, client):
    _book(client_for(lab.root), department="nlp", gpus=4, users=["bob"])
    client_for(lab.root).post("/api/v1/maintenance", {"nodes": ["n1"], "start": _at(20), "end": _at(22),
                                                      "reason": "firmware"}, format="json")
    day = (timezone.now() + timedelta(days=1)).date().isoformat()
    client.force_login(lab.alice)
    page = client.get(f"/calendar/?start={day}").content.decode()
    assert "booked by another department" in page and "NLP course" not in page and "bob" not in page
    assert "maintenance: firmware" in page and "n1" in page
    client.force_login(lab.bob)
    page = client.get(f"/calendar/?start={day}").content.decode()
    assert "NLP course" in page and "nlp: bob" in page
    assert client.get("/calendar/?days=99").status_code == 200  # a bad window shows this week instead
