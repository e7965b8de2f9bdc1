"""The spreadsheet rule for CSV cells (OWASP CSV injection): text that a spreadsheet would run as a formula
gets a leading quote; numbers and other text are unchanged."""

from __future__ import annotations

from decimal import Decimal

import pytest

from csvsafe import safe_cell, safe_row


@pytest.mark.parametrize(("value", "cell"), [
    ("=HYPERLINK(\"http://x\")", "'=HYPERLINK(\"http://x\")"),
    ("+1", "'+1"),
    ("-2+3", "'-2+3"),
    ("@SUM+1-2", "'@SUM+1-2"),
    ("\tcmd", "'\tcmd"),
    ("\rcmd", "'\rcmd"),
    ("alice", "alice"),
    ("a=b", "a=b"),
    ("", ""),
    ("'=already", "'=already"),
    (-5, -5),
    (-1.5, -1.5),
    (Decimal("-3"), Decimal("-3")),
    (None, None),
])
def test_safe_cell(value, cell):
    assert safe_cell(value) == cell


def test_safe_row_applies_the_rule_to_every_cell():
    assert safe_row(["=x", 1, "y", "-z"]) == ["'=x", 1, "y", "'-z"]
