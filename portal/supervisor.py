"""Keep the embedded default's background processes (Celery worker, beat) alive, and take them down with it.

``manage.py demo`` serves the portal in its own process and starts the others as children. A child that
exits is started again after a back-off (1 s, doubling to 30 s; back to 1 s once it has run a minute), and
every start and exit is logged and written to a status file (JSON, ``DATA_DIR/demo-processes.json``) that
``benchmarks/soak_demo.py`` reads. ``stop()`` ends them: SIGTERM, then SIGKILL after a grace period. On Linux a
child also receives SIGTERM when the demo itself dies without running ``stop()`` (SIGKILL, a crash), so no
worker or beat is left working on the same database. Pure standard library.
"""

from __future__ import annotations

import ctypes
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

BACKOFF_MIN_S = 1.0
BACKOFF_MAX_S = 30.0
HEALTHY_AFTER_S = 60.0  # a child that ran this long starts its back-off afresh when it exits
PR_SET_PDEATHSIG = 1


def _libc_prctl():
    """libc's prctl, looked up here in the parent: between fork and exec the child may not import a module or
    open a library, since another thread (runserver's) may have held the import lock or the dynamic loader's
    lock at the fork, and the child would then hang before its exec for ever (a worker that never starts)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_PRCTL = _libc_prctl()


def _die_with(parent_pid: int):
    def preexec() -> None:  # pragma: no cover - runs in the child between fork and exec
        _PRCTL(PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != parent_pid:  # the parent died before the line above: nobody will signal us
            os._exit(1)

    return preexec


@dataclass
class Child:
    name: str
    argv: list[str]
    env: dict[str, str] | None = None
    proc: subprocess.Popen | None = None
    starts: int = 0
    exits: list[int] = field(default_factory=list)
    started_at: float = 0.0
    next_start_at: float = 0.0
    backoff_s: float = BACKOFF_MIN_S


class Supervisor:
    def __init__(self, children: list[Child], *, status_path: Path | None = None, poll_s: float = 0.5,
                 clock=time.monotonic, out=sys.stderr):
        self.children = children
        self.status_path = status_path
        self.poll_s = poll_s
        self.clock = clock
        self.out = out
        self._lock = threading.Lock()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None

    # -- lifecycle
    def start(self, *, watch: bool = True) -> None:
        """Start every child and (``watch``) a thread that calls ``check()`` every ``poll_s``."""
        with self._lock:
            for child in self.children:
                self._spawn(child)
            self._write_status()
        if not watch:
            return
        # Restarts are spawned from this thread; PR_SET_PDEATHSIG follows the thread that forked, and this
        # one lives until stop(), which ends the children itself.
        self._thread = threading.Thread(target=self._watch, name="demo-supervisor", daemon=True)
        self._thread.start()

    def stop(self, *, grace_s: float = 10.0) -> None:
        """Stop restarting, then end every child: SIGTERM, and SIGKILL for any still alive after ``grace_s``."""
        self._stopping.set()
        if self._thread is not None:
            self._thread.join(timeout=5 * self.poll_s + 1)
        with self._lock:
            alive = [c for c in self.children if c.proc is not None and c.proc.poll() is None]
            for child in alive:
                child.proc.terminate()
            deadline = time.monotonic() + grace_s
            for child in alive:
                try:
                    child.proc.wait(timeout=max(0.0, deadline - time.monotonic()))
                except subprocess.TimeoutExpired:
                    self._say(f"{child.name} (pid {child.proc.pid}) did not stop in {grace_s:.0f} s: killed")
                    child.proc.kill()
                    child.proc.wait()
            self._write_status()

    def check(self) -> None:
        """One pass: note children that exited and start those whose back-off is over."""
        now = self.clock()
        with self._lock:
            if self._stopping.is_set():
                return
            changed = False
            for child in self.children:
                if child.proc is not None and (code := child.proc.poll()) is not None:
                    child.exits.append(code)
                    child.proc = None
                    if now - child.started_at >= HEALTHY_AFTER_S:
                        child.backoff_s = BACKOFF_MIN_S
                    child.next_start_at = now + child.backoff_s
                    self._say(f"{child.name} exited with code {code}; starting it again in "
                              f"{child.backoff_s:.0f} s (exit {len(child.exits)})")
                    child.backoff_s = min(BACKOFF_MAX_S, child.backoff_s * 2)
                    changed = True
                if child.proc is None and now >= child.next_start_at:
                    self._spawn(child)
                    changed = True
            if changed:
                self._write_status()

    def _watch(self) -> None:
        while not self._stopping.wait(self.poll_s):
            try:
                self.check()
            except Exception:  # noqa: BLE001 - the supervisor must outlive whatever went wrong once
                log.exception("demo supervisor: check failed")

    # -- helpers
    def _spawn(self, child: Child) -> None:
        child.proc = subprocess.Popen(  # noqa: S603 - our own interpreter and arguments
            child.argv, env=child.env,
            preexec_fn=_die_with(os.getpid()) if _PRCTL is not None else None,  # noqa: PLW1509
        )
        child.starts += 1
        child.started_at = self.clock()
        if child.starts > 1:
            self._say(f"{child.name} started again (pid {child.proc.pid}, start {child.starts})")

    def status(self) -> dict:
        return {c.name: {"pid": c.proc.pid if c.proc is not None and c.proc.poll() is None else None,
                         "starts": c.starts, "exits": list(c.exits)} for c in self.children}

    def _write_status(self) -> None:
        if self.status_path is None:
            return
        tmp = self.status_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.status(), indent=1))
        os.replace(tmp, self.status_path)

    def _say(self, message: str) -> None:
        print(f"demo: {message}", file=self.out, flush=True)
