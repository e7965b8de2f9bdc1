"""Database helpers shared by the apps: retrying a whole transaction that lost a lock race.

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
from collections.abc import Callable
from typing import TypeVar

from django.db import OperationalError, connection

log = logging.getLogger(__name__)

T = TypeVar("T")

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
