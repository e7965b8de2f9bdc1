"""An event's words: subject, body and link, from its kind's templates and its data."""

from __future__ import annotations

import string
from dataclasses import dataclass

from django.conf import settings

from notifications.kinds import BY_NAME
from portal.money import format_credits

# The amounts (in mcr) an event's data may carry; each is also offered to the templates as ``<key>_credits``.
MONEY_KEYS = ("balance", "threshold", "used", "limit", "cost")


class _Lenient(dict):
    def __missing__(self, key):
        return "?"


class _Formatter(string.Formatter):
    def get_value(self, key, args, kwargs):
        return kwargs[key] if isinstance(key, str) else super().get_value(key, args, kwargs)


@dataclass(frozen=True)
class Message:
    subject: str
    body: str
    url: str


def fill(template: str, data: dict) -> str:
    try:
        return _Formatter().vformat(template, (), _Lenient(data))
    except (ValueError, IndexError, AttributeError):  # a malformed template must not stop a delivery
        return template


def message_for(event, extra: dict | None = None) -> Message:
    """``extra``: values made at sending that the event must not keep (an essential kind's link token)."""
    kind = BY_NAME.get(event.kind)
    if kind is None:  # a kind removed since the event was written
        return Message(subject=event.kind, body=str(event.data), url=settings.PORTAL_URL + "/")
    data = {**event.data, **(extra or {})}
    # Events keep amounts in mcr, as the API does; what a person reads is in credits.
    for key in MONEY_KEYS:
        if isinstance(data.get(key), int):
            data.setdefault(f"{key}_credits", format_credits(data[key]))
    return Message(subject=fill(kind.subject, data)[:200], body=fill(kind.body, data).strip(),
                   url=settings.PORTAL_URL + fill(kind.link, data))
