"""Notifications' use cases. Other apps' services call ``emit`` (outbox.py) inside their own transactions."""

from notifications.services.outbox import emit

__all__ = ["emit"]
