"""Database helpers shared by the apps: retrying a whole transaction that lost a lock race, and inserting the
rows a loop records together (``inserted_together``).

PostgreSQL ends one of two transactions that wait on each other with SQLSTATE 40P01 (deadlock detected), and
a serializable or repeatable-read transaction that cannot be ordered with 40001. Both roll the whole
transaction back, so running it again from the start is safe as long as nothing left the process before the
commit (the portal's side effects wait for ``transaction.on_commit``, which a rollback discards). The lock
order documented in docs/architecture.md makes deadlocks impossible between the portal's own transactions;
the retry covers what no ordering controls (an operator's ad-hoc SQL, a future code path that slips).
"""

from __future__ import annotations

import logging
import random
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any, TypeVar

from django.db import OperationalError, connection

log = logging.getLogger(__name__)

T = TypeVar("T")

# The rows ``insert_later`` keeps for the end of the enclosing ``inserted_together`` block, each with what to do
# once it is inserted.
_later: ContextVar[list[tuple[Any, Callable[[Any], None] | None]] | None] = ContextVar("portal_db_later", default=None)

RETRYABLE_SQLSTATES = frozenset({"40P01", "40001"})
# How many times a transaction runs at most (tests set 1 to see every lock conflict instead of its retry).
ATTEMPTS = 3


def sqlstate(exc: BaseException) -> str | None:
    """The SQLSTATE of a database error (psycopg keeps it on the wrapped driver exception), else None."""
    for e in (exc, getattr(exc, "__cause__", None)):
        state = getattr(e, "sqlstate", None) or getattr(getattr(e, "diag", None), "sqlstate", None)
        if state:
            return state
    return None


def is_lock_conflict(exc: BaseException) -> bool:
    return isinstance(exc, OperationalError) and sqlstate(exc) in RETRYABLE_SQLSTATES


def retry_on_conflict(fn: Callable[[], T], *, attempts: int | None = None, what: str = "transaction") -> T:
    """Run ``fn`` (which opens its own outermost transaction) again when PostgreSQL aborts it with a
    deadlock or serialization failure. Inside an enclosing transaction a retry could not start over (the
    outer transaction is already aborted), so there the error propagates to whoever owns that transaction."""
    attempts = attempts or ATTEMPTS
    for attempt in range(1, attempts + 1):
        try:
            return fn()
        except OperationalError as exc:
            if not is_lock_conflict(exc) or connection.in_atomic_block or attempt == attempts:
                raise
            log.warning("%s aborted by PostgreSQL (%s); retrying (%d/%d)", what, sqlstate(exc), attempt,
                        attempts - 1)
            time.sleep(random.uniform(0.005, 0.05) * attempt)  # noqa: S311 - jitter, not a secret
    raise AssertionError("unreachable")  # pragma: no cover


def insert_later(obj: Any, then: Callable[[Any], None] | None = None) -> bool:
    """Inside an ``inserted_together`` block: keep the unsaved model instance ``obj`` for the block's end (and
    call ``then(obj)`` once it has its primary key) and answer True; outside one, False (the caller saves it)."""
    pending = _later.get()
    if pending is None:
        return False
    pending.append((obj, then))
    return True


@contextmanager
def inserted_together() -> Iterator[None]:
    """Inside one transaction: the rows recorded through ``insert_later`` in the block are inserted when it ends,
    one statement per model (and per 500 rows), in the order recorded, then each one's ``then`` runs. For a
    loop that records a few rows per item, such as the cycle's admissions (a timeline event and a
    notification each): an INSERT each was a round trip each. A block that raises inserts nothing; a nested
    block belongs to its outer one."""
    if _later.get() is not None:
        yield
        return
    pending: list[tuple[Any, Callable[[Any], None] | None]] = []
    token = _later.set(pending)
    try:
        yield
    finally:
        _later.reset(token)
    by_model: dict[type, list] = {}
    for obj, _ in pending:
        by_model.setdefault(type(obj), []).append(obj)
    for model, objs in by_model.items():
        model.objects.bulk_create(objs, batch_size=500)
    for obj, then in pending:
        if then is not None:
            then(obj)
