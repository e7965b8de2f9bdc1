"""The calendar on the client: GPU bookings, maintenance windows, and the week as the reader may see it
(docs/bookings.md).

Mixed into ``Client``; every call goes through its retrying ``_json``. Times are ISO 8601 text or aware
``datetime``s (a naive one is refused: the portal would read it as UTC, which is seldom what a notebook meant)."""

from __future__ import annotations

import builtins
from datetime import date, datetime
from typing import Any


def _time(value: str | datetime | date) -> str:
    if isinstance(value, datetime):
        if value.tzinfo is None:
            raise ValueError(f"{value!r} has no time zone: give an aware datetime (e.g. tzinfo=UTC).")
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    return str(value)


def _id(obj: int | str | dict) -> int:
    return int(obj["id"]) if isinstance(obj, dict) else int(obj)


class CalendarMixin:
    _json: Any  # Client._json
    _send: Any  # Client._send

    def bookings(self) -> builtins.list[dict]:
        """``GET /bookings``: your department's bookings (every department's for platform admins), the latest
        window first, cancelled ones included (``cancelled``)."""
        return self._json("GET", "bookings")

    def booking(self, booking: int | str | dict) -> dict:
        return self._json("GET", f"bookings/{_id(booking)}")

    def booking_create(self, *, flavor: str, gpus: int, start: str | datetime, end: str | datetime, purpose: str,
                       department: str | None = None, team: str | None = None, cluster: str | None = None,
                       users: builtins.list[str] | None = None) -> dict:
        """``POST /bookings``: ``gpus`` GPUs of ``flavor`` from ``start`` to ``end`` for your department (a
        platform admin names ``department``), or for one of its teams (``team``) or some of its members
        (``users``). A conflict with other bookings, maintenance or the installed capacity, or a department
        admin's booking beyond the quota, raises ``ValidationError`` naming what is in the way."""
        body: dict[str, Any] = {"flavor": flavor, "gpus": gpus, "start": _time(start), "end": _time(end),
                                "purpose": purpose}
        for name, value in (("department", department), ("team", team), ("cluster", cluster), ("users", users)):
            if value is not None:
                body[name] = value
        return self._json("POST", "bookings", json=body)

    def booking_update(self, booking: int | str | dict, *, comment: str = "", **changes) -> dict:
        """``PATCH /bookings/{id}``: change ``gpus``, ``start``, ``end``, ``purpose`` or ``users`` (checked again
        as a new booking; ``comment`` goes to the audit log)."""
        body = {k: _time(v) if k in ("start", "end") else v for k, v in changes.items()}
        if comment:
            body["comment"] = comment
        return self._json("PATCH", f"bookings/{_id(booking)}", json=body)

    def booking_cancel(self, booking: int | str | dict) -> None:
        """``DELETE /bookings/{id}``; cancelling a cancelled booking again is harmless."""
        self._send("DELETE", f"bookings/{_id(booking)}").close()

    def maintenance_windows(self) -> builtins.list[dict]:
        """``GET /maintenance``: every maintenance window (each with its ``affected_nodes``), the latest first."""
        return self._json("GET", "maintenance")

    def maintenance_create(self, *, start: str | datetime, end: str | datetime, reason: str,
                           nodes: builtins.list[str] | None = None, selector: dict[str, str] | None = None,
                           cluster: str | None = None) -> dict:
        """``POST /maintenance`` (platform admins): the nodes named, the nodes carrying every label of
        ``selector`` (a rack), or with neither the whole cluster, out of service from ``start`` to ``end``."""
        body: dict[str, Any] = {"start": _time(start), "end": _time(end), "reason": reason}
        for name, value in (("nodes", nodes), ("selector", selector), ("cluster", cluster)):
            if value is not None:
                body[name] = value
        return self._json("POST", "maintenance", json=body)

    def maintenance_cancel(self, window: int | str | dict) -> None:
        """``DELETE /maintenance/{id}`` (platform admins)."""
        self._send("DELETE", f"maintenance/{_id(window)}").close()

    def calendar(self, *, start: str | date | datetime | None = None, days: int | None = None) -> dict:
        """``GET /calendar``: the bookings and maintenance windows overlapping ``days`` days (1-31, default 7)
        from ``start`` (default today, UTC); another department's booking shows only its size and window."""
        params: dict[str, Any] = {}
        if start is not None:
            params["start"] = _time(start)
        if days is not None:
            params["days"] = days
        return self._json("GET", "calendar", params=params or None)
