"""Notification tasks: thin, idempotent, stable names (``notifications.*``). The logic is in
notifications.services.delivery; beat runs the sweep (portal/settings.py, CELERY_BEAT_SCHEDULE)."""

from __future__ import annotations

from celery import shared_task

from notifications.services import delivery


@shared_task(name="notifications.deliver", time_limit=120, soft_time_limit=110, ignore_result=True)
def deliver(event_ids: list[int] | None = None) -> dict:
    """Deliver the events a transaction just committed (queued after commit by ``notifications.services.emit``,
    one message per transaction)."""
    return delivery.deliver(event_ids=event_ids)


@shared_task(name="notifications.sweep", time_limit=300, soft_time_limit=280, ignore_result=True)
def sweep() -> dict:
    """Events no message announced (the broker was down), retries that are due, claims of dead workers."""
    return delivery.sweep()


@shared_task(name="notifications.cleanup", time_limit=600, soft_time_limit=550, ignore_result=True)
def cleanup() -> int:
    """Events and deliveries past NOTIFY_RETENTION_DAYS with nothing left to send."""
    return delivery.cleanup()
