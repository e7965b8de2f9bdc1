"""portal.db.update_each: one statement per batch, a compare-and-set per row, the changed keys answered; and
the same answer row by row where the database lacks UPDATE ... FROM ... RETURNING (SQLite before 3.35)."""

from __future__ import annotations

import pytest

from portal import db
from scheduling.models import Job, JobState


@pytest.fixture(params=["one statement", "row by row"])
def path(request, monkeypatch):
    if request.param == "row by row":
        monkeypatch.setattr(db, "_update_from_supported", lambda: False)
    return request.param


def test_each_row_gets_its_values_where_it_still_holds_what_was_read(lab, submit, path):
    a, b, c = (submit(lab.alice, name=f"j{i}") for i in range(3))
    Job.objects.filter(pk=c.pk).update(state=JobState.CANCELLED)  # moved on since it was read
    Job.objects.filter(pk=b.pk).update(attempt=2)

    changed = db.update_each(
        Job,
        [{"pk": j.pk, "attempt": 1, "reason_message": f"admitted {j.name}", "price": 7 + i}
         for i, j in enumerate((a, b, c))],
        fields=["reason_message", "price"], same={"borrowed": True}, where={"state": JobState.QUEUED},
        where_each=("attempt",), batch_size=2,
    )

    assert changed == [a.pk]
    a.refresh_from_db(), b.refresh_from_db(), c.refresh_from_db()
    assert (a.reason_message, a.price, a.borrowed) == ("admitted j0", 7, True)
    assert (b.price, b.borrowed) == (None, False) and b.reason_message != "admitted j1"
    assert c.reason_message != "admitted j2"


def test_no_rows_no_statement(lab, path, django_assert_num_queries):
    with django_assert_num_queries(0):
        assert db.update_each(Job, [], fields=["price"]) == []
