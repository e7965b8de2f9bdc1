"""Read-side queries: a user's recent notifications with their delivery status."""

from __future__ import annotations

from notifications.models import Delivery
from notifications.services.render import message_for


def recent_notifications(*, user, limit: int | None = None):
    """The user's deliveries, newest first, through the tenancy gate (their own only), with the event."""
    qs = Delivery.objects.restrict(user).filter(user=user).select_related("event", "event__department")
    return qs[:limit] if limit else qs


def describe(delivery: Delivery) -> dict:
    msg = message_for(delivery.event)
    return {"id": delivery.pk, "kind": delivery.event.kind, "subject": msg.subject, "url": msg.url,
            "channel": delivery.channel, "status": delivery.status, "attempts": delivery.attempts,
            "last_error": delivery.last_error, "created_at": delivery.created_at,
            "next_attempt_at": delivery.next_attempt_at if delivery.status == Delivery.Status.PENDING else None,
            "sent_at": delivery.sent_at, "data": delivery.event.data}
