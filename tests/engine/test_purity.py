"""The pure libraries stay pure: importing the engine, the simulator, the money arithmetic or the CSV guard loads no
Django, Kubernetes, Celery, DRF or Redis, and the engine reads no clock."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[2]
PURE = sorted([*(ROOT / "engine").glob("*.py"), *(ROOT / "billing").glob("*.py"), *(ROOT / "csvsafe").glob("*.py")])
FORBIDDEN = ("django", "kubernetes", "celery", "rest_framework", "redis", "kombu", "psycopg")


def test_import_in_a_fresh_interpreter_loads_no_framework():
    code = (
        "import sys\n"
        "import engine, engine.cycle, engine.policy, billing.money, csvsafe\n"
        "import simulator.simulator, simulator.report, simulator.whatif\n"
        f"bad = sorted(m for m in sys.modules if m.split('.')[0] in {FORBIDDEN!r})\n"
        "print(','.join(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)  # noqa: S603
    assert out.stdout.strip() == ""


@pytest.mark.parametrize("path", PURE, ids=lambda p: f"{p.parent.name}/{p.name}")
def test_no_clock_reads(path):
    source = path.read_text()
    for pattern in (r"^\s*import time\b", r"^\s*from time import", r"\bdatetime\b", r"time\.time\(",
                    r"monotonic\(", r"perf_counter\(", r"\brandom\b"):  # fmt: skip
        assert not re.search(pattern, source, re.MULTILINE), f"{path.name}: {pattern}"


def test_fifo_baseline_is_still_available():
    from engine import fifo_schedule
    from engine.types import Node, PendingJob, Quota, Snapshot

    res = fifo_schedule(
        Snapshot(now=0.0, nodes=(Node("n0", "a100", 8),), pending=(PendingJob(1, "A", "a100"),),
                 quotas=(Quota("A", "a100", 8),))
    )  # fmt: skip
    assert [a.job_id for a in res.admissions] == [1]


@pytest.mark.parametrize("enabled", [True, False])
def test_a_cycle_leaves_the_garbage_collector_as_it_found_it(enabled):
    import gc

    from engine import schedule
    from engine.types import Node, PendingJob, Quota, Snapshot

    snap = Snapshot(now=0.0, nodes=(Node("n0", "a100", 8),), pending=(PendingJob(1, "A", "a100"),),
                    quotas=(Quota("A", "a100", 8),))  # fmt: skip
    was = gc.isenabled()
    try:
        gc.enable() if enabled else gc.disable()
        assert [a.job_id for a in schedule(snap).admissions] == [1]
        assert gc.isenabled() is enabled
    finally:
        gc.enable() if was else gc.disable()
