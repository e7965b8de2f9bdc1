"""The README stays a newcomer's first page: short, with the two commands that must work on a fresh machine,
and links that lead to the detail moved into docs/ (the dependencies and why each is there among it)."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()
DEMO = "python3 -m venv .venv && .venv/bin/pip install -e . && .venv/bin/python manage.py demo"
TESTS = ("python3 -m venv .venv && .venv/bin/pip install -e '.[dev]' && .venv/bin/python -m pytest -n auto "
         "--dist loadfile")


def _links(path: Path) -> list[Path]:
    text = path.read_text()
    return [(path.parent / m).resolve() for m in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", text)
            if not m.startswith(("http://", "https://", "mailto:"))]


def test_the_readme_is_short():
    assert len(README.encode()) < 12_000


def test_the_quick_start_gives_the_demo_and_test_commands_and_ci_runs_that_test_command():
    quick = README.split("## Quick start", 1)[1].split("\n## ", 1)[0]
    blocks = re.findall(r"```sh\n(.*?)\n```", quick, flags=re.S)
    assert blocks[:2] == [DEMO, TESTS]
    pytest = TESTS.split(".venv/bin/", 2)[-1]  # "python -m pytest" and its options: CI runs the same
    assert pytest.startswith("python -m pytest -n ")
    assert pytest in (ROOT / ".ci" / "run").read_text()


def test_every_link_of_the_readme_leads_somewhere():
    missing = [str(p) for p in _links(ROOT / "README.md") if not p.exists()]
    assert not missing


def test_the_dependencies_and_why_each_is_there_are_linked_and_name_every_declared_package():
    pages = [p for p in _links(ROOT / "README.md") if p.suffix == ".md"
             and "## Dependencies and why each is there" in p.read_text()]
    assert pages, "no page linked from the README has the dependencies list"
    table = pages[0].read_text().split("## Dependencies and why each is there", 1)[1].lower()
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    declared = [*project["dependencies"], *project["optional-dependencies"]["dev"]]
    names = {re.split(r"[<>=\[ ;~!]", d, maxsplit=1)[0].lower() for d in declared}
    # the schema UI's static files ship in a sidecar package, listed as "drf-spectacular (+ sidecar)"
    unexplained = [n for n in names if n.removesuffix("-sidecar") not in table]
    assert not unexplained, f"declared without a reason in {pages[0].name}: {unexplained}"
