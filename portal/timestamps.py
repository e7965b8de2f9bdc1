"""Datetimes <-> the POSIX seconds the pure scheduling core and the cluster backends speak.

The core takes ``now`` and every instant as float seconds (it never reads a clock or a timezone); the
database keeps aware datetimes. These two functions are the only conversion between them, both None-safe.
"""

from __future__ import annotations

from datetime import UTC, datetime


def to_epoch(dt: datetime | None) -> float | None:
    """An aware datetime as POSIX seconds (None stays None)."""
    return None if dt is None else dt.timestamp()


def from_epoch(seconds: float | None) -> datetime | None:
    """POSIX seconds as an aware UTC datetime (None stays None)."""
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)
