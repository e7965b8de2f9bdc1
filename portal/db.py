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


def update_each(model, rows: list[dict[str, Any]], *, fields: list[str], same: dict[str, Any] | None = None,
                where: dict[str, Any] | None = None, where_each: tuple[str, ...] = (),
                batch_size: int = 500) -> list[Any]:
    """Give each row its own values in one UPDATE per ``batch_size`` rows (``WITH v AS (VALUES ...) UPDATE ...
    FROM v``), and answer the primary keys of the rows it changed.

    ``rows``: dicts with the primary key (``"pk"``), a value for each of ``fields`` (set) and for each of
    ``where_each`` (compared: the row changes only where its column still holds that value); ``same``: values
    set on every row; ``where``: columns every changed row must still hold (a compare-and-set, as a filtered
    ``update`` is). Values are prepared as a model's ``save`` prepares them. Unlike ``bulk_update`` it tells
    which rows it changed, and it builds no ``CASE`` per row and column. PostgreSQL and SQLite (3.35 and
    later: ``UPDATE ... FROM`` and ``RETURNING``)."""
    if not rows:
        return []
    same, where = same or {}, where or {}
    if not _update_from_supported():
        return _update_one_by_one(model, rows, fields=fields, same=same, where=where, where_each=where_each)
    meta, qn, pg = model._meta, connection.ops.quote_name, connection.vendor == "postgresql"
    table, pk = qn(meta.db_table), meta.pk
    keys = (*fields, *where_each)  # field names or attnames (``cluster_id``: the row gives the id)
    each = [meta.get_field(k) for k in keys]

    def cast(field, expr: str) -> str:  # PostgreSQL types a VALUES column from its values: say which it is
        return f"CAST({expr} AS {field.db_type(connection)})" if pg else expr

    names = ["pk", *(f"c{i}" for i in range(len(each)))]
    sets = [f"{qn(f.column)} = {cast(f, f'v.c{i}')}" for i, f in enumerate(each[:len(fields)])]
    sets += [f"{qn(meta.get_field(name).column)} = %s" for name in same]
    conds = [f"{table}.{qn(pk.column)} = {cast(pk, 'v.pk')}"]
    conds += [f"{table}.{qn(f.column)} = {cast(f, f'v.c{len(fields) + i}')}"
              for i, f in enumerate(each[len(fields):])]
    conds += [f"{table}.{qn(meta.get_field(name).column)} = %s" for name in where]
    fixed = [meta.get_field(n).get_db_prep_save(v, connection) for n, v in (*same.items(), *where.items())]
    changed: list[Any] = []
    for start in range(0, len(rows), batch_size):
        chunk = rows[start:start + batch_size]
        values = ", ".join(["(" + ", ".join(["%s"] * len(names)) + ")"] * len(chunk))
        params = [p for row in chunk for p in (
            pk.get_db_prep_save(row["pk"], connection),
            *(f.get_db_prep_save(row[k], connection) for k, f in zip(keys, each, strict=True)))]
        # the names are the model's, quoted; every value is a parameter
        sql = (f"WITH v ({', '.join(names)}) AS (VALUES {values}) UPDATE {table} SET {', '.join(sets)} "  # noqa: S608
               f"FROM v WHERE {' AND '.join(conds)} RETURNING {table}.{qn(pk.column)}")
        with connection.cursor() as cur:
            cur.execute(sql, [*params, *fixed])
            changed += [r[0] for r in cur.fetchall()]
    return changed


def _update_from_supported() -> bool:
    """Whether the database takes ``UPDATE ... FROM ... RETURNING``: PostgreSQL, and SQLite from 3.35 (a
    Python on an older distribution links an older SQLite, and the embedded default must run there too)."""
    if connection.vendor != "sqlite":
        return True
    import sqlite3

    return sqlite3.sqlite_version_info >= (3, 35)


def _update_one_by_one(model, rows: list[dict[str, Any]], *, fields: list[str], same: dict[str, Any],
                       where: dict[str, Any], where_each: tuple[str, ...]) -> list[Any]:
    """``update_each`` as one filtered UPDATE per row: the same compare-and-set, the same answer."""
    changed = []
    for row in rows:
        match = {**where, **{k: row[k] for k in where_each}}
        if model._default_manager.filter(pk=row["pk"], **match).update(**{f: row[f] for f in fields}, **same):
            changed.append(row["pk"])
    return changed
