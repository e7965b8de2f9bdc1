"""Polling for the real-cluster suites: a real API server settles in its own time."""

from __future__ import annotations

import os
import time

# How often to ask: a real cluster settles in seconds, and asking it more often only loads its API server.
# The fake API server (tests/fakes/test_real_cluster_suite_on_fake.py) settles within its stand-in kubelet's
# tick (0.1 s) and sets a shorter interval, so that a worker of the suite is not held asleep.
POLL_S = float(os.environ.get("KUBE_TEST_POLL_S") or 1.0)


def wait_for(predicate, timeout=120.0, step=None, what="condition"):
    """``predicate()``'s first truthy value, asked every ``step`` seconds (``POLL_S``) for at most ``timeout``."""
    step = POLL_S if step is None else step
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(step)
    raise AssertionError(f"timed out waiting for {what}")
