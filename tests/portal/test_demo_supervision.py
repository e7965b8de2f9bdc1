"""The embedded default (manage.py demo) keeps its worker and beat alive and takes them down with it."""

from __future__ import annotations

import io
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from portal.supervisor import BACKOFF_MIN_S, Child, Supervisor

ROOT = Path(__file__).resolve().parents[2]
SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


class Clock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def _wait_exit(proc, timeout=30):
    proc.wait(timeout=timeout)
    return proc.returncode


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie (exited, not yet reaped by a parent that is not us) counts as gone
    stat = Path(f"/proc/{pid}/stat")
    return not (stat.exists() and stat.read_text().split(") ", 1)[1].startswith("Z"))


def test_a_child_that_dies_is_started_again_after_its_backoff_and_counted(tmp_path):
    clock = Clock()
    status = tmp_path / "status.json"
    sup = Supervisor([Child("worker", SLEEPER), Child("beat", SLEEPER)], status_path=status, clock=clock,
                     out=io.StringIO())
    sup.start(watch=False)
    try:
        first = sup.children[0].proc
        first.kill()
        _wait_exit(first)
        sup.check()
        assert sup.children[0].proc is None  # waits out its back-off
        assert json.loads(status.read_text())["worker"] == {"pid": None, "starts": 1, "exits": [-9]}
        clock.t += BACKOFF_MIN_S
        sup.check()
        second = sup.children[0].proc
        assert second is not None and second.poll() is None and second.pid != first.pid
        second.kill()
        _wait_exit(second)
        sup.check()
        clock.t += BACKOFF_MIN_S
        sup.check()
        assert sup.children[0].proc is None  # the back-off doubled: a crash loop does not spin
        clock.t += BACKOFF_MIN_S
        sup.check()
        assert sup.children[0].proc is not None
        assert json.loads(status.read_text())["worker"]["starts"] == 3
        assert json.loads(status.read_text())["beat"]["starts"] == 1  # untouched
        assert "worker exited with code -9" in sup.out.getvalue()
    finally:
        sup.stop(grace_s=10)
    assert all(c.proc.poll() is not None for c in sup.children)


def test_stop_ends_children_and_nothing_is_started_afterwards(tmp_path):
    stubborn = [sys.executable, "-c",
                "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); "
                "time.sleep(300)"]
    sup = Supervisor([Child("beat", stubborn)], clock=Clock(), out=io.StringIO())
    sup.start(watch=False)
    proc = sup.children[0].proc
    sup.stop(grace_s=1)  # SIGTERM, then SIGKILL past the grace period
    assert proc.poll() is not None
    sup.check()
    assert sup.children[0].proc is proc  # not started again


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_demo_stops_its_worker_and_beat(tmp_path, sig):
    """They were orphaned: still working on the same database, so a restarted demo ran two beats."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL",
                                                            "CELERY_TASK_ALWAYS_EAGER")}
    env.update(DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="portal.settings")
    demo = subprocess.Popen([sys.executable, "manage.py", "demo", f"127.0.0.1:{_free_port()}"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    status = tmp_path / "demo-processes.json"
    try:
        deadline = time.monotonic() + 240  # migrating a fresh SQLite file on a busy machine
        while not status.exists() and time.monotonic() < deadline and demo.poll() is None:
            time.sleep(0.2)
        pids = {name: s["pid"] for name, s in json.loads(status.read_text()).items()}
        assert set(pids) == {"worker", "beat", "session-proxy"} and all(pids.values())
        assert all(_alive(pid) for pid in pids.values())
        demo.send_signal(sig)
        assert _wait_exit(demo, timeout=240) == 0  # a generous bound: warm shutdown on a busy machine
        assert not [name for name, pid in pids.items() if _alive(pid)]
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
