"""This installation's identity: what tells its objects on a shared cluster from another installation's.

The operator sets it (``PORTAL_INSTALLATION_ID``), or the portal generates one the first time it is asked and
keeps it in the database (one ``Installation`` row), so every process, and every restart, uses the same. It must
never change while the portal has pods on a cluster: pods without it are not the portal's.
"""

from __future__ import annotations

import secrets
import threading

from django.conf import settings
from django.db import IntegrityError, transaction

from portal.models import Installation

_lock = threading.Lock()
_cached: str | None = None


def installation_id() -> str:
    """The identity in force: the setting, else the stored one (made on first use)."""
    global _cached
    if settings.PORTAL_INSTALLATION_ID:
        return settings.PORTAL_INSTALLATION_ID
    if _cached is not None:
        return _cached
    with _lock:
        if _cached is None:
            _cached = _stored()
        return _cached


def _stored() -> str:
    row = Installation.objects.order_by("pk").first()
    if row is not None:
        return row.key
    try:
        with transaction.atomic():
            # pk 1: two processes starting at once make one row, and the loser reads the winner's
            return Installation.objects.create(pk=1, key=f"portal-{secrets.token_hex(6)}").key
    except IntegrityError:
        return Installation.objects.get(pk=1).key


def forget() -> None:
    """Drop the process's copy (tests that change the setting or the row)."""
    global _cached
    with _lock:
        _cached = None
