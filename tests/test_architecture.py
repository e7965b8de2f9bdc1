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


CLIENT = Path("clients/python")


def _lint(root: Path, project: Path = Path()) -> subprocess.CompletedProcess:
    # A fresh interpreter with that tree's sources first on the path: the contracts see its files only. The
    # client (its own distribution, with its own contracts) is linted from its src/ folder.
    where = root / project / "src" if project.parts else root
    return subprocess.run([str(LINT_IMPORTS), "--no-cache", str(root / project / "pyproject.toml")], cwd=where,
                          capture_output=True, text=True, timeout=120,
                          env={"PATH": str(LINT_IMPORTS.parent), "PYTHONPATH": str(where)})


def test_the_import_contracts_hold():
    run = _lint(ROOT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


def test_the_clients_import_contracts_hold():
    run = _lint(ROOT, CLIENT)
    assert run.returncode == 0, run.stdout[-4000:] + run.stderr[-2000:]
    assert "0 broken" in run.stdout


@pytest.mark.parametrize(("module", "line", "contract"), [
    # the sweep commands reaching back up for the group (the circle that was): gpup's shared base serves both
    ("gpuportal/cli_sweeps.py", "from gpuportal.cli import cli", "gpup's commands above their shared base"),
    ("gpuportal/client.py", "from gpuportal.cli_base import State", "gpup's commands above their shared base"),
    # a notebook's client needing the server
    ("gpuportal/errors.py", "import django.db", "The client imports nothing of the portal's server"),
    ("gpuportal/client.py", "from scheduling.models import Job", "The client imports nothing of the portal"),
])
def test_a_planted_violation_breaks_the_clients_contracts(tmp_path, module, line, contract):
    shutil.copytree(ROOT / CLIENT / "src" / "gpuportal", tmp_path / CLIENT / "src" / "gpuportal",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / CLIENT / "pyproject.toml", tmp_path / CLIENT / "pyproject.toml")
    target = tmp_path / CLIENT / "src" / module
    target.write_text(target.read_text() + f"\n{line}  # noqa\n")
    run = _lint(tmp_path, CLIENT)
    assert run.returncode != 0, run.stdout[-4000:]
    broken = run.stdout[run.stdout.index("Broken contracts"):]
    assert contract in broken, broken[:4000]


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
    # the pure libraries reaching for Django or an app, and the engine reaching up to the simulator
    ("engine/reasons.py", "import django.db", "The engine, the simulator, the money arithmetic and the CSV guard are pure"),
    ("simulator/report.py", "from scheduling.models import Job", "The engine, the simulator, the money arithmetic"),
    ("engine/ordering.py", "import simulator.metrics", "The libraries below the apps"),
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
        ("quotas.models", "engine.types"),                    # down to a library below every app: fine
        ("engine.ordering", "simulator.metrics"),             # up from the engine to the simulator
        ("portal.services.x", "lab.services.members"),        # up from the base
        ("lab.views", "observability.models"),                # same floor: apps there know nothing of each other
    ])
    assert figures["arrows_back_up"] == ["engine -> simulator (1)", "lab -> observability (1)", "portal -> lab (1)",
                                         "quotas -> scheduling (1)"]
    assert figures["two_way_app_pairs"] == ["quotas <-> scheduling"]


# An import inside a function hides a dependency from the reader and the graph; the few that must wait (the app
# registry, the Kubernetes client, the logging filter) say why on their line, and there stay fewer than 20.
HIDDEN_IMPORTS_MAX = 20


def test_imports_inside_functions_are_few_and_each_says_why():
    from benchmarks.architecture import measure

    figures = measure()
    assert figures["imports_inside_functions_without_reason"] == []
    assert figures["imports_inside_functions"] <= HIDDEN_IMPORTS_MAX


# Modules over 600 lines and functions over 80 are listed by ``make arch`` for a reader to look at, never
# failed on: a module that is one thing may be longer, and a file cut at a line count is harder to read than
# one split along its seams (docs/architecture.md, "Sizes").


def test_no_app_arrow_runs_back_up_and_no_modules_import_each_other_client_included():
    from benchmarks.architecture import measure

    figures = measure()
    assert figures["arrows_back_up"] == [] and figures["two_way_app_pairs"] == []
    assert figures["circles"] == []
    assert "gpuportal" in figures["package_lines"]  # the client and gpup are measured too


def test_no_module_imports_another_modules_private_names():
    from benchmarks.architecture import measure

    assert measure()["private_names_imported"] == []
