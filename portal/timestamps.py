"""Datetimes <-> the POSIX seconds the pure scheduling core and the cluster backends speak.

Also the time stamps of log lines (below).

The core takes ``now`` and every instant as float seconds (it never reads a clock or a timezone); the
database keeps aware datetimes. These two functions are the only conversion between them, both None-safe.
"""

from __future__ import annotations

import re
from datetime import UTC, datetime


def to_epoch(dt: datetime | None) -> float | None:
    """An aware datetime as POSIX seconds (None stays None)."""
    return None if dt is None else dt.timestamp()


def from_epoch(seconds: float | None) -> datetime | None:
    """POSIX seconds as an aware UTC datetime (None stays None)."""
    return None if seconds is None else datetime.fromtimestamp(seconds, tz=UTC)


# A log line's time stamp, as Kubernetes writes it with ``timestamps=true``: RFC 3339 with up to nine digits of
# fraction and a "Z" ("2026-12-05T23:59:00.123456789Z"), then one space, then the line. Go drops a fraction's
# trailing zeros, so stamps are compared as integer nanoseconds, never as text.
_STAMP = re.compile(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d{1,9}))?(Z|[+-]\d\d:\d\d) ")


def log_stamp(dt: datetime) -> str:
    """``dt`` as a log line's time stamp (microseconds: what a datetime holds)."""
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def split_log_stamp(line: str) -> tuple[int | None, str]:
    """A stamped log line as (nanoseconds since the epoch, the line without its stamp); (None, line) when the
    line does not start with a stamp."""
    match = _STAMP.match(line)
    if match is None:
        return None, line
    whole, fraction, zone = match.groups()
    try:
        base = datetime.fromisoformat(whole + ("+00:00" if zone == "Z" else zone))
    except ValueError:
        return None, line
    return int(base.timestamp()) * 1_000_000_000 + int((fraction or "0").ljust(9, "0")), line[match.end():]


def parse_log_stamp(text: str) -> int | None:
    """A time stamp alone (a ``since_time``) as nanoseconds since the epoch; None when it is not one."""
    nanos, rest = split_log_stamp(text.strip() + " ")
    return nanos if rest == "" else None
