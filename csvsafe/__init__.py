"""Spreadsheet-safe CSV cells: the one rule every CSV the portal writes follows (the usage report, the
what-if history export, simulator traces).

A cell that starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage return is run as a formula by
Excel, LibreOffice and Google Sheets when the file is opened (``=HYPERLINK(...)``, ``@SUM(...)``), so a user
named ``@SUM+1-2`` could plant one in an admin's report. Such text gets a leading single quote (the OWASP
rule), which spreadsheets show as text. Numbers are left alone: ``-5`` is a value, not a formula, and must
stay a number. It lives in the pure core, standard library only, because the simulator may import nothing
else and the portal's writers may import it too.
"""

from __future__ import annotations

from collections.abc import Iterable

FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def safe_cell(value):
    """``value`` as a CSV cell that no spreadsheet runs: text starting like a formula gets a leading quote."""
    if isinstance(value, str) and value.startswith(FORMULA_START):
        return "'" + value
    return value


def safe_row(values: Iterable) -> list:
    return [safe_cell(v) for v in values]
