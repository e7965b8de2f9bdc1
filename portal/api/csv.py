"""The CSV form of a report's rows (``?format=csv``): one renderer for every report the API offers, so each
writes its header the same way and every cell passes the spreadsheet guard (``csvsafe``)."""

from __future__ import annotations

import csv
import io

from rest_framework.renderers import BaseRenderer

from csvsafe import safe_row


class CsvRowsRenderer(BaseRenderer):
    """Rows (dicts) as CSV in ``columns``' order; a missing or null value is an empty cell. Names in the rows
    are people's own text, so every cell is neutralised for spreadsheets. Subclasses set ``columns``."""

    media_type = "text/csv"
    format = "csv"
    charset = "utf-8"
    columns: tuple[str, ...] | list[str] = ()

    def render(self, data, accepted_media_type=None, renderer_context=None):
        out = io.StringIO()
        w = csv.writer(out)
        w.writerow(self.columns)
        for row in data or []:
            w.writerow(safe_row("" if row.get(c) is None else row.get(c) for c in self.columns))
        return out.getvalue().encode()
