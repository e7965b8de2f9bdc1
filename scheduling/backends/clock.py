"""The simulated cluster's clock: where its kubelet reads the time pods start, run and end by.

By default that is real time. ``settings.SIM_CLOCK`` may name another clock object (the tests set a
``ManualClock`` for every test), so a test moves the simulated pods by advancing time itself and nothing it
checks depends on how fast the machine runs it.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Protocol


class Clock(Protocol):
    def now(self) -> datetime:
        """The current time, timezone-aware."""


class WallClock:
    """Real time (what ``django.utils.timezone.now()`` returns with ``USE_TZ``)."""

    def now(self) -> datetime:
        return datetime.now(UTC)


class ManualClock:
    """A clock that stands still until told to move: ``advance(seconds)`` or ``set(when)``. Thread-safe (a
    live server's request threads read it while the test advances it); it never goes backwards."""

    def __init__(self, start: datetime | None = None):
        self._now = start or datetime.now(UTC)
        if self._now.tzinfo is None:
            raise ValueError("ManualClock needs a timezone-aware start")
        self._lock = threading.Lock()

    def now(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, seconds: float) -> datetime:
        if seconds < 0:
            raise ValueError("a clock does not go backwards")
        with self._lock:
            self._now += timedelta(seconds=seconds)
            return self._now

    def set(self, when: datetime) -> datetime:
        with self._lock:
            if when < self._now:
                raise ValueError("a clock does not go backwards")
            self._now = when
            return self._now


def sim_clock() -> Clock:
    """The clock a simulated cluster built now uses: ``settings.SIM_CLOCK``, else real time."""
    from django.conf import settings

    return getattr(settings, "SIM_CLOCK", None) or WallClock()
