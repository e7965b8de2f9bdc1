"""Bookings and maintenance windows in the lab file (``bookings:``, ``maintenance:``): read through the API's
serializers, applied through the calendar's services (a conflict is the API's refusal, with its line, nothing
half-applied), exported back, pruned (cancelled and audited; the past left alone); every bad row an error with
its line."""

from __future__ import annotations

from datetime import timedelta

import pytest
import yaml
from django.contrib.auth import get_user_model
from django.utils import timezone

from lab import demo
from lab.services.labfile import LabFileInvalid, apply_lab, dump, export_lab
from portal.models import AuditEntry
from scheduling.models import Booking, MaintenanceWindow

pytestmark = pytest.mark.django_db

DEMO = demo.LAB_FILE.read_text()
BASE = (timezone.now() + timedelta(days=2)).replace(minute=0, second=0, microsecond=0)


def at(hours: int) -> str:
    return (BASE + timedelta(hours=hours)).isoformat()


def booking(gpus=4, start=0, end=3, purpose="NLP course", department="nlp", extra="") -> str:
    return (f"  - department: {department}\n    cluster: default\n    flavor: a100-80gb\n    gpus: {gpus}\n"
            f"    start: '{at(start)}'\n    end: '{at(end)}'\n    purpose: {purpose}\n{extra}")


def window(start=5, end=7, reason="PDU swap", extra="    nodes: [sim-a100-0]\n") -> str:
    return f"  - cluster: default\n{extra}    start: '{at(start)}'\n    end: '{at(end)}'\n    reason: {reason}\n"


def lab(bookings: str = "", maintenance: str = "") -> str:
    return DEMO + (f"bookings:\n{bookings}" if bookings else "") + (f"maintenance:\n{maintenance}" if maintenance else "")


def _state():
    return (sorted((b.department.slug, b.gpus, b.start, b.end, b.purpose, b.cancelled_at is not None,
                    tuple(sorted(u.username for u in b.users.all())))
                   for b in Booking.objects.select_related("department")),
            sorted((w.cluster.name, tuple(w.nodes), w.start, w.end, w.reason, w.cancelled_at is not None)
                   for w in MaintenanceWindow.objects.select_related("cluster")))


def test_bookings_and_windows_apply_reapply_unchanged_and_export_round_trips():
    text = lab(booking() + booking(gpus=2, purpose="Vision sprint", department="vision",
                                   extra="    users: [alice]\n"), window())
    result = apply_lab(text)
    assert sum(line.startswith("+ booking") for line in result.lines) == 2
    assert sum(line.startswith("+ maintenance") for line in result.lines) == 1
    state = _state()
    assert state[0] == sorted([("nlp", 4, BASE, BASE + timedelta(hours=3), "NLP course", False, ()),
                               ("vision", 2, BASE, BASE + timedelta(hours=3), "Vision sprint", False, ("alice",))])
    assert state[1] == [("default", ("sim-a100-0",), BASE + timedelta(hours=5), BASE + timedelta(hours=7),
                         "PDU swap", False)]
    assert AuditEntry.objects.filter(action="booking.create").count() == 2
    assert AuditEntry.objects.filter(action="maintenance.create").count() == 1
    assert apply_lab(text).unchanged

    exported = dump(export_lab())
    doc = yaml.safe_load(exported)
    assert [b["purpose"] for b in doc["bookings"]] == ["NLP course", "Vision sprint"]
    assert doc["bookings"][1]["users"] == ["alice"] and "users" not in doc["bookings"][0]
    assert doc["maintenance"] == [{"cluster": "default", "nodes": ["sim-a100-0"], "start": at(5), "end": at(7),
                                   "reason": "PDU swap"}]
    assert apply_lab(exported).unchanged
    # onto an empty lab: the same rows, and the same file back
    Booking.objects.all().delete()
    MaintenanceWindow.objects.all().delete()
    apply_lab(exported)
    assert _state() == state and dump(export_lab()) == exported


def test_a_changed_booking_or_window_is_changed_in_place_and_audited():
    apply_lab(lab(booking(), window()))
    apply_lab(lab(booking(gpus=3, end=4, extra="    users: [carol]\n"), window(end=8)))
    b = Booking.objects.get()
    assert (b.gpus, b.end, [u.username for u in b.users.all()]) == (3, BASE + timedelta(hours=4), ["carol"])
    assert MaintenanceWindow.objects.get().end == BASE + timedelta(hours=8)
    assert AuditEntry.objects.filter(action="booking.update").count() == 1
    assert AuditEntry.objects.filter(action="maintenance.update").count() == 1


def test_prune_cancels_what_the_file_leaves_out_audited_and_leaves_the_past_alone():
    apply_lab(lab(booking() + booking(gpus=2, purpose="Extra"), window()))
    first = Booking.objects.first()
    past = Booking.objects.create(department=first.department, cluster=first.cluster, flavor=first.flavor, gpus=1,
                                  start=timezone.now() - timedelta(days=3), end=timezone.now() - timedelta(days=2),
                                  purpose="Last week")
    result = apply_lab(lab(booking()))  # without prune nothing goes
    assert result.unchanged
    result = apply_lab(lab(booking()), prune=True)
    assert sum(line.startswith("- ") for line in result.lines) == 2, result.lines
    assert sorted(b.purpose for b in Booking.objects.live()) == ["Last week", "NLP course"]
    assert MaintenanceWindow.objects.get().cancelled_at is not None
    assert AuditEntry.objects.filter(action="booking.cancel").get().comment == "pruned by the lab file"
    assert AuditEntry.objects.filter(action="maintenance.cancel").count() == 1
    past.refresh_from_db()
    assert past.cancelled_at is None
    assert apply_lab(lab(booking()), prune=True).unchanged


def test_a_booking_beyond_the_capacity_is_the_apis_refusal_with_its_line_and_nothing_is_applied():
    text = lab(booking(gpus=6) + booking(gpus=4, purpose="Vision sprint", department="vision"))
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(text)
    message = str(exc.value)
    assert "Only 2 of the 8 a100-80gb GPUs on default are free to book" in message
    assert "bookings" in message and "line " in message, message
    assert not Booking.objects.exists()


def test_a_window_that_leaves_a_declared_booking_too_few_gpus_is_refused():
    apply_lab(lab(booking(gpus=8, start=5, end=7)))
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(lab(booking(gpus=8, start=5, end=7), window()))
    assert "too few GPUs for the bookings" in str(exc.value) and "line " in str(exc.value)
    assert not MaintenanceWindow.objects.exists()


@pytest.mark.parametrize(("bookings", "maintenance", "message"), [
    (booking(gpus=0), "", "greater than or equal to 1"),
    (booking(start=3, end=1), "", "must end after it starts"),
    (booking(department="physics"), "", "no department physics"),
    (booking().replace("flavor: a100-80gb", "flavor: h100"), "", "no flavor h100"),
    (booking().replace("cluster: default", "cluster: east"), "", "no cluster east"),
    (booking().replace("    cluster: default\n", ""), "", "cluster is required"),
    (booking().replace("  - department: nlp\n    cluster", "  - cluster"), "", "department is required"),
    (booking().replace("'" + at(0) + "'", "next tuesday"), "", "Datetime has wrong format"),
    (booking(extra="    colour: red\n"), "", "unknown field"),
    (booking(extra="    users: [alice]\n"), "", "Not members of nlp: alice"),
    (booking() + booking(), "", "the same booking is declared twice"),
    (booking(start=-100, end=-99), "", "would be over already"),
    ("", window(extra="    nodes: [nope-0]\n"), "No such node on default: nope-0"),
    ("", window(extra="    selector: {rack: r9}\n"), "carries every label of the selector"),
    ("", window(start=2, end=1), "must end after it starts"),
    ("", window().replace("    reason: PDU swap\n", ""), "reason is required"),
    ("", window() + window(), "the same maintenance window is declared twice"),
])
def test_bad_calendar_rows_are_refused_with_their_line_before_anything_changes(bookings, maintenance, message):
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(lab(bookings, maintenance))
    text = str(exc.value)
    assert message in text and "line " in text, text
    assert not Booking.objects.exists() and not MaintenanceWindow.objects.exists()


def test_a_booking_larger_than_the_pool_says_so_without_naming_anything_in_the_way():
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(lab(booking(gpus=9)))
    assert "Only 8 of the 8 a100-80gb GPUs on default are free to book" in str(exc.value)
    assert "fewer than the 9 asked for" in str(exc.value) and "hold the rest" not in str(exc.value)


def test_unquoted_times_read_as_yaml_timestamps_match_the_same_booking():
    apply_lab(lab(booking()))
    unquoted = lab(booking().replace(f"'{at(0)}'", at(0).replace("+00:00", "Z")).replace(f"'{at(3)}'", at(3)))
    assert apply_lab(unquoted).unchanged
    assert Booking.objects.count() == 1


def test_the_platform_admin_named_by_actor_is_recorded_and_audited():
    apply_lab(DEMO)
    admin = get_user_model().objects.get(username="admin")
    apply_lab(lab(booking()), actor=admin)
    assert Booking.objects.get().created_by == admin
    assert AuditEntry.objects.get(action="booking.create").actor == admin


def test_a_booking_for_a_team_applies_exports_and_moves_to_another_team_in_place():
    text = lab(booking(gpus=2, department="vision", purpose="Detection deadline", extra="    team: detection\n"))
    apply_lab(text)
    b = Booking.objects.get()
    assert (b.department.slug, b.team.slug) == ("vision", "detection")
    assert apply_lab(text).unchanged
    doc = yaml.safe_load(dump(export_lab()))
    assert doc["bookings"][0]["team"] == "detection"
    apply_lab(text.replace("team: detection", "team: segmentation"))
    b.refresh_from_db()
    assert b.team.slug == "segmentation" and Booking.objects.count() == 1
    assert AuditEntry.objects.get(action="booking.update").old["team"] == "detection"


def test_a_booking_for_a_team_the_department_lacks_is_refused_with_its_line():
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(lab(booking(gpus=2, department="nlp", extra="    team: detection\n")))
    text = str(exc.value)
    assert "nlp has no team detection" in text and "line " in text, text
    assert not Booking.objects.exists()
