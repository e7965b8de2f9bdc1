"""The top-level layout: the shell and the partials several apps include live in templates/, each app keeps
its own pages, and the image carries every folder the portal runs from."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.conf import settings
from django.template import TemplateDoesNotExist
from django.template.loader import get_template

ROOT = Path(settings.BASE_DIR)
SHARED = ["portal/base.html", "portal/_field.html", "portal/_errors.html", "portal/_select_error.html",
          "portal/_days_left.html"]


@pytest.mark.parametrize("name", SHARED)
def test_the_shell_and_shared_partials_come_from_the_top_level_folder(name):
    assert Path(get_template(name).origin.name) == ROOT / "templates" / name


def test_a_partial_included_by_several_apps_is_in_the_top_level_folder():
    users: dict[str, set[str]] = {}
    for path, name in _references():
        if path.parts[0] != "templates":
            users.setdefault(name, set()).add(path.parts[0])
    shared = {name for name, apps in users.items() if len(apps) > 1}
    assert shared and shared <= set(SHARED), shared - set(SHARED)
    assert not list(ROOT.glob("*/templates/portal/base.html"))  # one shell


def _references():
    for path in [*ROOT.glob("*/templates/**/*.html"), *ROOT.glob("templates/**/*.html")]:
        for name in re.findall(r'{% (?:include|extends) "([^"]+)"', path.read_text()):
            yield path.relative_to(ROOT), name


def test_every_included_or_extended_template_exists():
    missing = []
    for path, name in _references():
        try:
            get_template(name)
        except TemplateDoesNotExist:
            missing.append(f"{path}: {name}")
    assert not missing, missing


def test_the_image_copies_every_app_and_the_templates():
    copied = set(re.findall(r"^COPY (\S+) ", (ROOT / "Dockerfile").read_text(), re.M))
    apps = {a.split(".")[0] for a in settings.INSTALLED_APPS if (ROOT / a.split(".")[0]).is_dir()}
    assert apps | {"templates"} <= copied, (apps | {"templates"}) - copied
