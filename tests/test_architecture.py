"""Dependencies point one way: the import-linter contracts in pyproject.toml hold, and they catch a new circle.

The contracts (docs/architecture.md, "Dependencies") are checked by ``lint-imports``; running it here makes
the README's test command fail on a new import circle or a service importing a task, not only CI's lint.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
LINT_IMPORTS = Path(sys.executable).with_name("lint-imports")

pytestmark = pytest.mark.skipif(not LINT_IMPORTS.exists(), reason="import-linter is a dev dependency")


def _lint(root: Path) -> subprocess.CompletedProcess:
    # A fresh interpreter with ``root`` first on the path: the contracts see that tree's files only.
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", str(root / "pyproject.toml")], cwd=root,
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": str(LINT_IMPORTS.parent), "PYTHONPATH": str(root)})


def test_the_import_contracts_hold():
    run = _lint(ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    # quotas' services calling back into scheduling's: the circle budgets/quotas.budgets removed
    ("quotas/services/hooks.py", "from scheduling.services import jobs", "Quotas never imports scheduling"),
    # quotas reading a job (its pages or services reading scheduling's models): facts come through quotas.ports
    ("quotas/views.py", "from scheduling.models import Job", "Quotas never imports scheduling"),
    # the apps' floors: notifications reaching up to quotas, and the portal's foundation reaching up to an app
    ("notifications/kinds.py", "import quotas.models", "Apps from the top floor down"),
    ("portal/metrics.py", "from scheduling.models import Job", "Apps from the top floor down"),
    # a service importing the tasks that run it, instead of sending them by name
    ("scheduling/services/cycle.py", "from scheduling import tasks", "Services send tasks by name"),
    # the pure core reaching for Django
    ("scheduling/core/reasons.py", "import django.db", "The scheduling core is pure"),
    # observability's services reaching up for its task, and scheduling depending on observability
    ("observability/services/idle.py", "from observability import tasks", "Services send tasks by name"),
    ("scheduling/services/jobs.py", "import observability.selectors", "No other app imports observability"),
    # the notifications outbox reaching back into an app that emits into it
    ("notifications/services/outbox.py", "from scheduling import models", "Notifications knows no app"),
])
def test_a_planted_violation_breaks_the_contracts(tmp_path, module, line, contract):
    """The contracts are not vacuous: the same tree with one bad import fails, naming the broken contract."""
    for package in tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["root_packages"]:
        shutil.copytree(ROOT / package, tmp_path / package, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    target = tmp_path / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    run = _lint(tmp_path)
    assert run.returncode != 0, run.stdout[-4000:]
    broken = run.stdout[run.stdout.index("Broken contracts"):]
    assert contract in broken, broken[:4000]


def test_make_arch_counts_app_arrows_that_run_back_up_and_two_way_pairs():
    from benchmarks.architecture import _app_graph

    figures = _app_graph([
        ("scheduling.services.jobs", "quotas.budgets"),       # down: fine
        ("quotas.services.rules", "scheduling.models"),       # up
        ("quotas.models", "scheduling.core.types"),           # the pure core: a library, no arrow
        ("portal.services.x", "lab.services.members"),        # up from the base
        ("lab.views", "observability.models"),                # same floor: apps there know nothing of each other
    ])
    assert figures["arrows_back_up"] == ["lab -> observability (1)", "portal -> lab (1)", "quotas -> scheduling (1)"]
    assert figures["two_way_app_pairs"] == ["quotas <-> scheduling"]


# An import inside a function hides a dependency from the reader and the graph; the few that must wait (the app
# registry, the Kubernetes client, the logging filter) say why on their line, and there stay fewer than 20.
HIDDEN_IMPORTS_MAX = 19
# Functions still over the limit, each being split by its own change.
LONG_FUNCTIONS_PENDING: set[str] = set()


def test_imports_inside_functions_are_few_and_each_says_why():
    from benchmarks.architecture import measure

    figures = measure()
    assert figures["imports_inside_functions_without_reason"] == []
    assert figures["imports_inside_functions"] <= HIDDEN_IMPORTS_MAX


def test_no_function_is_longer_than_a_screenful():
    from benchmarks.architecture import LONG_FUNCTION, measure

    long = {row["function"]: row["lines"] for row in measure()["functions_over_limit"]}
    assert set(long) <= LONG_FUNCTIONS_PENDING, f"functions over {LONG_FUNCTION} lines: {long}"


def test_no_module_is_longer_than_the_limit_and_no_app_arrow_runs_back_up():
    from benchmarks.architecture import LARGE_MODULE, measure

    figures = measure()
    assert figures["modules_over_limit"] == [], f"modules over {LARGE_MODULE} lines: {figures['modules_over_limit']}"
    assert figures["arrows_back_up"] == [] and figures["two_way_app_pairs"] == []
