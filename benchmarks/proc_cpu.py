"""CPU time of a process and its descendants, from /proc (Linux): what a benchmark's stack spent per process,
which does not depend on what else the machine runs."""

from __future__ import annotations

import os
import threading
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # the fields after the command name, which may hold spaces


def own_cpu_ms(pid: int) -> float | None:
    """User + system CPU of ``pid`` itself (not its children), in ms; None when it is gone."""
    fields = _stat(pid)
    return None if fields is None else sum(int(f) for f in fields[11:13]) * 1000 / TICK


def cpu_ms(pid: int) -> float:
    """User + system CPU of ``pid``, its waited-for children and its live descendants, in ms (0 when gone)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and (fields := _stat(int(entry.name))) is not None:
            children.setdefault(int(fields[1]), []).append(int(entry.name))
    total, todo = 0, [pid]
    while todo:
        p = todo.pop()
        fields = _stat(p)
        if fields is None:
            continue
        total += sum(int(f) for f in fields[11:15])  # utime, stime, cutime, cstime
        todo += children.get(p, [])
    return total * 1000 / TICK


class DatabaseBackends:
    """The CPU of the PostgreSQL backends serving one database on this machine (their command line names it),
    sampled every ``interval`` seconds from a thread while the block runs: a backend's last reading counts
    after it exits, so a connection closed between two samples loses at most one interval. Zero when the
    server's processes cannot be read (another machine, another user)."""

    def __init__(self, database: str, interval: float = 1.0):
        self.marker = f" {database} "
        self.interval = interval
        self.seen: dict[int, float] = {}  # pid -> its latest CPU ms
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> DatabaseBackends:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
        self.sample()

    def _run(self) -> None:
        while not self._stop.wait(self.interval):
            self.sample()

    def sample(self) -> None:
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                cmdline = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                continue
            if cmdline.startswith("postgres:") and self.marker in cmdline:
                ms = own_cpu_ms(int(entry.name))
                if ms is not None:
                    self.seen[int(entry.name)] = ms

    def cpu_ms(self) -> float:
        return sum(self.seen.values())
