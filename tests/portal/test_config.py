"""Configuration is read and checked in one place and fails fast with every problem listed."""

from __future__ import annotations

import pytest

from portal import config


def test_defaults_are_embedded():
    values = config.load({})
    assert values["DATABASE_URL"] == "" and values["SCHEDULING_BACKEND"] == "simulated"
    assert values["DEBUG"] is False


def test_every_problem_is_reported_at_once():
    with pytest.raises(config.ConfigError) as exc:
        config.load({"DEBUG": "maybe", "SCHEDULING_BACKEND": "slurm", "KUBE_BURST": "many",
                     "DATABASE_URL": "mysql://x", "SECRET_KEY": "short"})
    text = str(exc.value)
    for name in ("DEBUG", "SCHEDULING_BACKEND", "KUBE_BURST"):
        assert name in text
    assert len(exc.value.problems) == 3  # type errors first; cross-checks run once types are valid


def test_cross_checks():
    with pytest.raises(config.ConfigError) as exc:
        config.load({"DATABASE_URL": "mysql://x/y", "SECRET_KEY": "short", "CYCLE_INTERVAL_S": "0",
                     "KUBE_NAMESPACE_TEMPLATE": "jobs", "WHATIF_MAX_JOBS": "0"})
    assert len(exc.value.problems) == 5
    assert any("WHATIF_MAX_JOBS" in p for p in exc.value.problems)


def test_admissions_need_at_least_one_at_a_time_and_one_connection():
    with pytest.raises(config.ConfigError) as exc:
        config.load({"ADMIT_CONCURRENCY": "0", "KUBE_CONNECTIONS": "-1"})
    assert exc.value.problems == ["ADMIT_CONCURRENCY and KUBE_CONNECTIONS must be positive."]


def test_secrets_are_masked():
    rows = dict((n, v) for n, v, _ in config.describe(config.load({"DATABASE_URL": "postgres://u:pw@h/db"})))
    assert rows["DATABASE_URL"] == "***"


def test_manage_py_fails_fast_with_a_clear_message(tmp_path):
    import subprocess
    import sys

    r = subprocess.run([sys.executable, "manage.py", "check"], capture_output=True, text=True,
                       env={"PATH": "/usr/bin:/bin", "SCHEDULING_BACKEND": "nomad", "DATA_DIR": str(tmp_path)},
                       timeout=60)
    assert r.returncode != 0
    assert "Invalid portal configuration" in r.stderr and "SCHEDULING_BACKEND" in r.stderr
    assert "Traceback" not in r.stderr
