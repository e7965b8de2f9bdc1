"""collectstatic gathers each static file once: a folder found by two finders (an app's static folder also
named in STATICFILES_DIRS) made it warn of a duplicate for every file, the vendored Chart.js and its licence
among them, on every install."""

from __future__ import annotations

import io

from django.contrib.staticfiles import finders
from django.core.management import call_command


def test_every_static_file_has_one_source():
    seen: dict[str, int] = {}
    for finder in finders.get_finders():
        for path, _storage in finder.list(ignore_patterns=["CVS", ".*", "*~"]):
            seen[path] = seen.get(path, 0) + 1
    assert seen.get("portal/vendor/chartjs/LICENSE.md") == 1
    assert seen.get("portal/vendor/chartjs/chart.umd.min.js") == 1
    assert [p for p, n in seen.items() if n > 1] == []


def test_collectstatic_warns_of_no_duplicate_and_ships_the_licence(settings, tmp_path):
    settings.STATIC_ROOT = tmp_path / "static"
    out, err = io.StringIO(), io.StringIO()
    call_command("collectstatic", interactive=False, verbosity=1, stdout=out, stderr=err)
    assert "Found another file" not in out.getvalue() + err.getvalue()
    assert (tmp_path / "static" / "portal" / "vendor" / "chartjs" / "LICENSE.md").read_text().strip()
