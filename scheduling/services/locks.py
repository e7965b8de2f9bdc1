"""One admission cycle at a time, across any number of processes and hosts.

PostgreSQL: a session-level advisory lock (``pg_try_advisory_lock``), held from snapshot to apply. SQLite (the
embedded single-machine default): an exclusive ``flock`` on a file under DATA_DIR/locks.
"""

from __future__ import annotations

import contextlib
import fcntl
import zlib

from django.conf import settings
from django.db import connection


def _key(name: str) -> int:
    return zlib.crc32(f"gpu-portal:{name}".encode()) & 0x7FFFFFFF


@contextlib.contextmanager
def exclusive(name: str):
    """Yields True when this process holds the lock named ``name``, False when another one does."""
    if connection.vendor == "postgresql":
        key = _key(name)
        with connection.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s)", [key])
            acquired = bool(cur.fetchone()[0])
        try:
            yield acquired
        finally:
            if acquired:
                with connection.cursor() as cur:
                    cur.execute("SELECT pg_advisory_unlock(%s)", [key])
        return
    path = settings.LOCK_DIR / f"{name}.lock"
    with open(path, "a+") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)
