"""Liveness for processes that serve no HTTP: a file whose modification time the process keeps fresh.

    python -m portal.heartbeat PATH MAX_AGE_S   # exit 0 when a file named PATH (or PATH.*) changed lately

Beat rewrites its schedule file after every task it sends (CELERY_BEAT_SYNC_EVERY = 1), so a beat that stops
sending, because it hangs or cannot reach the broker, goes stale and is restarted. The pod watcher touches
DATA_DIR/watcher.alive from its loop (``touch``). Pure standard library: a probe must start fast.
"""

from __future__ import annotations

import glob
import os
import sys
import time


def touch(path: str) -> None:
    with open(path, "a"):
        os.utime(path, None)


def age_s(path: str) -> float | None:
    """Seconds since the newest of PATH and PATH.* changed (shelve may add a suffix); None if none exists."""
    times = [os.stat(p).st_mtime for p in [path, *glob.glob(glob.escape(path) + ".*")] if os.path.exists(p)]
    return time.time() - max(times) if times else None


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m portal.heartbeat PATH MAX_AGE_S", file=sys.stderr)
        return 2
    age = age_s(argv[0])
    if age is None or age > float(argv[1]):
        print(f"{argv[0]}: {'missing' if age is None else f'{age:.0f} s old'}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
