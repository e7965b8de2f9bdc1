"""Rows that change rarely (the policy in force, the default cluster, the cluster list), kept for one task run.

A pod-worker task that handles a cycle's admissions builds a pod set for every job, and each pod set needs the
policy (its PriorityClass names) and the job's cluster: read per job, they were a third of the task's queries.
Inside ``per_run()`` the first read is kept and the rest of the run reuses it; outside it every read goes to
the database, as before. A run lasts seconds, and an edit made during it takes effect on the next run, as a
policy edit takes effect on the next cycle. Nothing that decides a job's state is cached: each job is still
re-read (and compare-and-set) on its own."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import TypeVar

T = TypeVar("T")

_run: ContextVar[dict | None] = ContextVar("scheduling_run_cache", default=None)


@contextmanager
def per_run() -> Iterator[None]:
    """Keep what ``cached`` reads until the block ends (a nested block shares its outer run's rows)."""
    if _run.get() is not None:
        yield
        return
    token = _run.set({})
    try:
        yield
    finally:
        _run.reset(token)


def cached(key: str, load: Callable[[], T]) -> T:
    """``load()``, once per run under ``key``; every time outside a run."""
    store = _run.get()
    if store is None:
        return load()
    if key not in store:
        store[key] = load()
    return store[key]


def prime(key: str, value) -> None:
    """Keep ``value`` under ``key`` for the rest of the run (read together with other rows, for a whole
    message); nothing outside a run."""
    store = _run.get()
    if store is not None:
        store[key] = value


def peek(key: str, default=None):
    """What the run keeps under ``key`` (primed or cached), else ``default``: the caller then reads for itself."""
    store = _run.get()
    return default if store is None else store.get(key, default)
