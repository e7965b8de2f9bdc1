"""The one way an event is reported: ``emit`` writes an outbox row in the caller's transaction.

Emitters (scheduling's and quotas' services) never send anything and never import a task: the row commits or
rolls back with the change it reports, and after commit ``portal.dispatch`` asks a worker to deliver it (one
message for all the events of a transaction). When
the broker is down the row stays pending, and the periodic sweep (``notifications.sweep``) delivers it once
the broker is back. Nothing here reads preferences or recipients' addresses: that is the delivery's job, so an
event costs its emitter one INSERT.
"""

from __future__ import annotations

from collections.abc import Iterable

from notifications.kinds import BY_NAME
from notifications.models import Event
from portal import dispatch
from portal.db import insert_later


def emit(*, kind: str, department_id: int, users: Iterable[int] = (), admins: bool = False,
         data: dict | None = None, dedupe_key: str | None = None) -> Event | None:
    """Report ``kind`` to ``users`` (ids) and, with ``admins``, to the department's admins.

    ``data`` must be JSON: it fills the kind's subject and body and is sent as is to webhooks. With a
    ``dedupe_key``, an event already emitted with that key makes this a no-op (None returned)."""
    if kind not in BY_NAME:
        raise ValueError(f"unknown notification kind {kind!r}; add it to notifications.kinds.KINDS")
    event = Event(kind=kind, department_id=department_id, user_ids=sorted({int(u) for u in users if u}),
                  to_admins=admins, data=data or {}, dedupe_key=dedupe_key)
    if dedupe_key is None:
        if insert_later(event, then=_announce):  # inside ``portal.db.inserted_together``: at its end
            return event
        event.save(force_insert=True)
    else:
        # ON CONFLICT DO NOTHING: a duplicate must not abort the caller's transaction (PostgreSQL would). The
        # row found is this one or the earlier one; delivering an event again sends nothing twice.
        Event.objects.bulk_create([event], ignore_conflicts=True)
        event = Event.objects.filter(dedupe_key=dedupe_key).first()
        if event is None:
            return None
    _announce(event)
    return event


def _announce(event: Event) -> None:
    dispatch.after_commit_batched("notifications.deliver", event.pk)  # one message per transaction
