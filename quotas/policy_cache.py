"""The rows every submission checks that change rarely, kept per process while nothing changed them: a
department's approval rule, its members' queued-jobs limits, its quota ceilings, a user's allowance.

Each submission read them again: three queries, a fifth of a single POST /api/v1/jobs's CPU. Now any save or
delete of those models (their services, the admin, the lab file, a cascade) replaces a token in the shared
cache once its transaction commits, and a process reads its rows again as soon as the token it kept them
under is no longer the cache's. A submission reads the token once (``pinned``). A read made before a change
commits is kept under the token of before, so it is never used after the change is seen. The token is random,
not a counter: a flushed cache cannot bring back a token some process still holds rows under.

Nothing is kept without a shared cache (the local-memory cache is one process's: another process's change
would never reach it) or while the cache is unreachable: every read then goes to the database, as before.
As a backstop against a change whose token could not be written (the cache down at that moment), rows are
kept at most ``MAX_AGE_S``. A write that bypasses the ORM's signals (``QuerySet.update``, ``bulk_create``,
raw SQL) must call ``changed()``."""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

from django.conf import settings
from django.core.cache import cache
from django.db import transaction
from django.db.models.signals import post_delete, post_save

T = TypeVar("T")
log = logging.getLogger(__name__)

KEY = "quotas:submission-rows"
MAX_AGE_S = 60.0
MAX_ROWS = 20_000  # departments x members x flavors of a large lab, with room; past it nothing more is kept
LOCAL_CACHES = ("django.core.cache.backends.locmem.LocMemCache", "django.core.cache.backends.dummy.DummyCache")

_lock = threading.Lock()
_rows: dict[tuple, tuple[float, object]] = {}
_kept_under: list[str | None] = [None]  # the token the rows were read under
_pinned: ContextVar[str | None] = ContextVar("quotas_policy_token", default=None)
_MISSING = object()


def enabled() -> bool:
    """Whether the cache is shared by every process (only then can a change in one reach the others)."""
    return settings.CACHES["default"]["BACKEND"] not in LOCAL_CACHES


def _token() -> str | None:
    pinned = _pinned.get()
    if pinned is not None or not enabled():
        return pinned
    try:
        token = cache.get(KEY)
        if token is None:  # first use, or the cache lost it: any new token makes every process read again
            cache.add(KEY, uuid.uuid4().hex, timeout=None)
            token = cache.get(KEY)
    except Exception:  # noqa: BLE001 - Redis down, timeout: read the database, as without a shared cache
        log.warning("submission rows: the cache is unreachable; reading the database", exc_info=True)
        return None
    return token


@contextmanager
def pinned() -> Iterator[None]:
    """Read the token once for the block (one submission, or one batch): its reads share it."""
    if _pinned.get() is not None:
        yield
        return
    reset = _pinned.set(_token())
    try:
        yield
    finally:
        _pinned.reset(reset)


def cached(kind: str, key: tuple, load: Callable[[], T]) -> T:
    """``load()``, or what it returned under the current token (at most MAX_AGE_S ago). Inside a transaction
    that changed a kept row, always ``load()``: it must see its own change, which no other process may see."""
    token = _token()
    if token is None or _changed_in_this_transaction():
        return load()
    now = time.monotonic()
    with _lock:
        if _kept_under[0] != token:
            _rows.clear()
            _kept_under[0] = token
        at, value = _rows.get((kind, key), (0.0, _MISSING))
    if value is not _MISSING and now - at < MAX_AGE_S:
        return value  # type: ignore[return-value]
    value = load()
    with _lock:
        if _kept_under[0] == token and len(_rows) < MAX_ROWS:  # a newer token came meanwhile: not kept
            _rows[(kind, key)] = (now, value)
    return value


def _changed_in_this_transaction() -> bool:
    return any(callback[1] is _new_token for callback in transaction.get_connection().run_on_commit)


def changed(**_) -> None:
    """A kept row changed: a new token once the change commits (before, another process could read the old
    row again and keep it under the new token)."""
    if enabled() and not _changed_in_this_transaction():
        transaction.on_commit(_new_token)


def _new_token() -> None:
    try:
        cache.set(KEY, uuid.uuid4().hex, timeout=None)
    except Exception:  # noqa: BLE001 - the change is committed; other processes see it within MAX_AGE_S
        log.error("submission rows: could not record a change in the cache; other processes may use the "
                  "rows of before for up to %s s", MAX_AGE_S, exc_info=True)
    with _lock:  # this process reads again at once, whatever the cache did
        _rows.clear()


def connect() -> None:
    """Listen to every save and delete of the kept models (once, from the app's ``ready``; the models named,
    not imported, so that the app's config can import this module before the models are loaded)."""
    for model in ("quotas.ApprovalRule", "quotas.UserLimit", "quotas.Quota", "quotas.Allowance"):
        post_save.connect(changed, sender=model, dispatch_uid=f"policy_cache.save.{model}")
        post_delete.connect(changed, sender=model, dispatch_uid=f"policy_cache.delete.{model}")
