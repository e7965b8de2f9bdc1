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


# A supervisor in a process of its own, which kills its first child and prints the pid of the one its watcher
# thread started again: the pid of each, so the test can kill the supervisor and look for them.
SUPERVISED = """
import sys, time
from portal.supervisor import Child, Supervisor
sup = Supervisor([Child("worker", [sys.executable, "-c", "import time; time.sleep(300)"])], poll_s=0.1,
                 out=sys.stderr)
sup.start()
first = sup.children[0].proc
print(first.pid, flush=True)
first.kill()
while sup.children[0].proc is None or sup.children[0].proc is first:
    time.sleep(0.1)
print(sup.children[0].proc.pid, flush=True)
time.sleep(300)
"""


def test_children_die_with_a_supervisor_that_is_killed_without_stopping_them():
    """A demo killed with SIGKILL (or crashed) runs no clean-up: its worker and beat, including one its
    watcher thread started again, must still go rather than keep working on the same database."""
    sup = subprocess.Popen([sys.executable, "-c", SUPERVISED], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                           env={**os.environ, "PYTHONPATH": str(ROOT)})
    again = None
    try:
        first, again = int(sup.stdout.readline()), int(sup.stdout.readline())
        assert again != first and _alive(again)
        sup.kill()
        sup.wait(timeout=60)
        deadline = time.monotonic() + 60  # the kernel signals at once; a bound for a busy machine
        while _alive(again) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(again)
    finally:
        if sup.poll() is None:
            sup.kill()
            sup.wait()
        if again is not None and _alive(again):  # the orphan a failure leaves
            os.kill(again, signal.SIGKILL)


def test_a_second_beat_on_the_same_data_dir_refuses_to_run(tmp_path, settings):
    """A restarted demo whose old beat is still alive (or two demos on one folder) must not run two beats,
    which would send every periodic task twice: the demo's beat holds a pid file in DATA_DIR."""
    from lab.management.commands.demo import background_processes

    settings.DATA_DIR = tmp_path
    [beat] = [c for c in background_processes() if c.name == "beat"]
    env = {k: v for k, v in beat.env.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL",
                                                            "CELERY_TASK_ALWAYS_EAGER")}
    env.update(DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="portal.settings")
    first = subprocess.Popen(beat.argv, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        pidfile = tmp_path / "celerybeat.pid"
        deadline = time.monotonic() + 240  # a bound for a busy machine, not a timing
        while not pidfile.exists() and first.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert first.poll() is None and int(pidfile.read_text()) == first.pid
        second = subprocess.run(beat.argv, cwd=ROOT, env=env, capture_output=True, text=True, timeout=240)
        assert second.returncode != 0 and "already exists" in second.stderr, second.stderr[-2000:]
        assert first.poll() is None  # the first beat is untouched
    finally:
        first.terminate()
        first.wait(timeout=60)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_to_the_demo_stops_its_worker_and_beat(tmp_path, sig):
    """They were orphaned: still working on the same database, so a restarted demo ran two beats. The
    background submitter (lab/demo_workload.py) goes with them: it would keep submitting to a demo that
    is gone."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "CELERY_BROKER_URL", "REDIS_URL",
                                                            "CELERY_TASK_ALWAYS_EAGER")}
    # the session proxy on a free port too: 8001 may be taken on the machine (another demo, another worker's test)
    env.update(DATA_DIR=str(tmp_path), DJANGO_SETTINGS_MODULE="portal.settings", SESSION_PORT=str(_free_port()))
    demo = subprocess.Popen([sys.executable, "manage.py", "demo", f"127.0.0.1:{_free_port()}"], cwd=ROOT, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    status = tmp_path / "demo-processes.json"
    try:
        deadline = time.monotonic() + 240  # migrating a fresh SQLite file on a busy machine
        while not status.exists() and time.monotonic() < deadline and demo.poll() is None:
            time.sleep(0.2)
        pids = {name: s["pid"] for name, s in json.loads(status.read_text()).items()}
        assert set(pids) == {"worker", "beat", "session-proxy", "workload"} and all(pids.values())
        assert all(_alive(pid) for pid in pids.values())
        demo.send_signal(sig)
        assert _wait_exit(demo, timeout=240) == 0  # a generous bound: warm shutdown on a busy machine
        assert not [name for name, pid in pids.items() if _alive(pid)]
    finally:
        if demo.poll() is None:
            demo.kill()
            demo.wait()
