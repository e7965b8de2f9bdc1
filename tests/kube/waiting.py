"""Polling for the real-cluster suites: a real API server settles in its own time."""

from __future__ import annotations

import time


def wait_for(predicate, timeout=120.0, step=1.0, what="condition"):
    """``predicate()``'s first truthy value, asked every ``step`` seconds for at most ``timeout``."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")
