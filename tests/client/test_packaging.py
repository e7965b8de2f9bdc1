"""The client is its own distribution: it must not need the server, and the suite must have what it needs."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CLIENT = ROOT / "clients" / "python"


def _names(requirements) -> set[str]:
    return {re.split(r"[\s<>=!~;\[@]", r, maxsplit=1)[0].lower().replace("_", "-") for r in requirements}


def test_the_root_dev_extra_has_every_client_dependency():
    client = tomllib.loads((CLIENT / "pyproject.toml").read_text())["project"]
    root = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    needed = _names(client["dependencies"]) | _names(r for extra in client["optional-dependencies"].values()
                                                     for r in extra)
    have = _names(root["dependencies"]) | _names(root["optional-dependencies"]["dev"])
    assert needed <= have, f"add to the root dev extra: {sorted(needed - have)}"


def test_the_client_imports_without_the_server():
    code = ("import sys, gpuportal, gpuportal.cli; "
            "bad = sorted(m for m in sys.modules if m.split('.')[0] in "
            "('django', 'rest_framework', 'celery', 'portal', 'quotas', 'scheduling')); "
            "assert not bad, bad")
    done = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": str(CLIENT / "src")},
                          capture_output=True, text=True, timeout=60, cwd=CLIENT)
    assert done.returncode == 0, done.stderr
