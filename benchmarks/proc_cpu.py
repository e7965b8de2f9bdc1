"""CPU time of a process and its descendants, from /proc (Linux): what a benchmark's stack spent per process,
which does not depend on what else the machine runs."""

from __future__ import annotations

import os
from pathlib import Path

TICK = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100


def _stat(pid: int) -> list[str] | None:
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return text[text.rindex(")") + 2:].split()  # the fields after the command name, which may hold spaces


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
