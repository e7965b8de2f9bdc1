"""Per-user limits in the lab file (``user_limits:`` of a department): read through the API's serializer,
applied through the same service, exported back, pruned; every bad row an error with its line."""

from __future__ import annotations

import pytest
import yaml

from lab import demo
from lab.services.labfile import LabFileInvalid, apply_lab, dump, export_lab
from quotas.models import UserLimit

pytestmark = pytest.mark.django_db

DEMO = demo.LAB_FILE.read_text()
QUOTA = "      a100-80gb: {nominal: 4, borrowing_limit: 4, lending_limit: null}\n"


def _with_limits(rows: str) -> str:
    assert QUOTA in DEMO
    return DEMO.replace(QUOTA, QUOTA + "    user_limits:\n" + rows, 1)


def _limits():
    return sorted(((x.department.slug, x.user.username if x.user_id else None, x.max_gpus, x.max_queued)
                   for x in UserLimit.objects.select_related("department", "user")), key=lambda r: (r[0], r[1] or ""))


def test_limits_apply_export_and_prune():
    text = _with_limits("      - {max_gpus: 4, max_queued: 20}\n      - {user: bob, max_gpus: 8}\n")
    result = apply_lab(text)
    assert [line for line in result.lines if "user limit" in line] == [
        "+ user limit vision/(every member) (max_gpus: 4, max_queued: 20)", "+ user limit vision/bob (max_gpus: 8)"]
    assert _limits() == [("vision", None, 4, 20), ("vision", "bob", 8, None)]
    assert apply_lab(text).unchanged
    exported = dump(export_lab())
    vision = next(d for d in yaml.safe_load(exported)["departments"] if d["slug"] == "vision")
    assert vision["user_limits"] == [{"max_gpus": 4, "max_queued": 20}, {"user": "bob", "max_gpus": 8}]
    changed = apply_lab(_with_limits("      - {user: bob, max_gpus: 6}\n"))  # without prune the default stays
    assert [line for line in changed.lines if "user limit" in line] == ["~ user limit vision/bob: max_gpus: 8 -> 6"]
    assert _limits() == [("vision", None, 4, 20), ("vision", "bob", 6, None)]
    apply_lab(_with_limits("      - {user: bob, max_gpus: 6}\n"), prune=True)
    assert _limits() == [("vision", "bob", 6, None)]


@pytest.mark.parametrize(("rows", "message"), [
    ("      - {max_gpus: -1}\n", "Ensure this value is greater than or equal to 1."),
    ("      - {max_gpus: 0}\n", "Ensure this value is greater than or equal to 1."),
    ("      - {user: bob}\n", "max_gpus is required"),
    ("      - {user: bob, max_gpus: 2, max_queued: 0}\n", "Ensure this value is greater than or equal to 1."),
    ("      - {user: bob, max_gpus: 2, gpus: 3}\n", "unknown field"),
    ("      - {user: bob, max_gpus: 2}\n      - {user: bob, max_gpus: 3}\n", "bob is declared twice"),
])
def test_bad_rows_are_refused_with_their_line_before_anything_changes(rows, message):
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(_with_limits(rows))
    text = str(exc.value)
    assert message in text and "user_limits" in text and "line " in text
    assert not UserLimit.objects.exists()


@pytest.mark.parametrize(("rows", "message"), [
    ("      - {max_gpus: 9}\n", "At most 8 GPUs"),  # over vision's quota (4 + 4)
    ("      - {user: carol, max_gpus: 2}\n", "carol is not a member of vision"),  # nlp's member
    ("      - {user: nobody, max_gpus: 2}\n", "nobody is not a member of vision"),
    ("      - {max_gpus: 2}\n      - {max_gpus: 3}\n", "declared twice"),
])
def test_rows_the_database_refuses_roll_everything_back(rows, message):
    with pytest.raises(LabFileInvalid) as exc:
        apply_lab(_with_limits(rows))
    assert message in str(exc.value) and "line " in str(exc.value)
    assert not UserLimit.objects.exists()
