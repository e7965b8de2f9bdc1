"""Rows recorded inside ``portal.db.inserted_together`` are inserted at the block's end, one statement per
model, in order; a block that raises inserts nothing, and a nested block belongs to its outer one."""

from __future__ import annotations

import pytest
from django.db import connection, transaction
from django.test.utils import CaptureQueriesContext

from portal.db import insert_later, inserted_together
from portal.models import Department


def _dept(slug: str) -> Department:
    return Department(slug=slug, name=slug.title())


def test_rows_are_inserted_by_one_statement_at_the_end_then_each_one_s_follow_up_runs(db):
    seen = []
    with transaction.atomic(), CaptureQueriesContext(connection) as queries:
        with inserted_together():
            for slug in ("d1", "d2", "d3"):
                assert insert_later(_dept(slug), then=lambda d: seen.append((d.slug, d.pk)))
            with inserted_together():  # nested: the outer block inserts it
                assert insert_later(_dept("d4"))
            assert not Department.objects.filter(slug__startswith="d").exists()
    inserts = [q for q in queries.captured_queries if q["sql"].startswith("INSERT")]
    assert len(inserts) == 1
    assert list(Department.objects.filter(slug__startswith="d").order_by("pk").values_list("slug", flat=True)) == [
        "d1", "d2", "d3", "d4"]
    assert [s for s, _ in seen] == ["d1", "d2", "d3"] and all(pk is not None for _, pk in seen)


def test_a_block_that_raises_inserts_nothing_and_outside_a_block_the_caller_saves(db):
    with pytest.raises(RuntimeError), transaction.atomic(), inserted_together():
        insert_later(_dept("gone"))
        raise RuntimeError
    assert not Department.objects.filter(slug="gone").exists()
    assert insert_later(_dept("outside")) is False
