"""The one way services send side effects: Celery tasks named by their stable names, after commit.

Services never import task modules: a task module imports the services it runs, so the reverse import made
every service part of an import circle. A service names the task instead (``"scheduling.pods.create"``) and
this module finds it in the Celery app's registry, where each app's ``tasks`` module registers its tasks when
Django loads the app (``AppConfig.ready``).

* ``after_commit(name, *args)``: send once the current transaction commits (at once outside a transaction).
  What the task will do is already decided and stored, so an unreachable broker is logged, not raised
  (``portal.broker.send``): the request still succeeds and the reconciler sends what was lost.
* ``send_now(name, *args)``: send at once, and let a broker failure raise (the reconciler's own repairs: its
  next run tries again).
* ``after_commit_batched(name, item)``: like ``after_commit``, but one message per transaction carrying the
  list of every item added in it (a cycle admitting a hundred jobs sends one message, not a hundred).
* ``coalesced()``: a block of many short transactions (the pod sync commits each job on its own) whose
  batched items are kept as each transaction commits and sent together when the block ends: one message per
  task name for the whole block, not one per transaction.

An unknown name fails at the call, inside the caller's transaction, not later after commit.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from contextvars import ContextVar

from celery import Task
from django.db import transaction

from portal import broker
from portal.celery import app

# The items of committed transactions that ``coalesced`` holds back until its block ends, by task name.
_held: ContextVar[dict[str, list] | None] = ContextVar("portal_dispatch_held", default=None)


def task(name: str) -> Task:
    """The registered task called ``name`` (KeyError when no tasks module registers it)."""
    try:
        return app.tasks[name]
    except KeyError:
        raise KeyError(f"no Celery task is registered as {name!r}; is its app's tasks module loaded?") from None


def after_commit(name: str, *args) -> None:
    found = task(name)
    transaction.on_commit(lambda: broker.send(found, *args))


def send_now(name: str, *args):
    return task(name).delay(*args)


def after_commit_batched(name: str, item) -> None:
    """Send ``name`` once the current transaction commits, with the list of every ``item`` given to it for
    ``name`` during that transaction. Outside a transaction, at once with ``[item]``.

    The pending batch is remembered on the connection and found again only while its callback is still
    waiting there: a rollback discards the callback (and the batch with it), and a sent batch is never
    extended."""
    found = task(name)
    connection = transaction.get_connection()
    if not connection.in_atomic_block:
        _send_batch(found, [item])
        return
    batches = connection.__dict__.setdefault("_portal_dispatch_batches", {})
    batch = batches.get(name)
    if batch is not None and not batch["sent"] and any(f is batch["send"] for _, f, *_ in connection.run_on_commit):
        batch["items"].append(item)
        return
    batch = {"items": [item], "sent": False}

    def send():
        batch["sent"] = True
        _send_batch(found, batch["items"])

    batch["send"] = send
    batches[name] = batch
    transaction.on_commit(send)


def _send_batch(found: Task, items: list) -> None:
    """Send a committed batch now, or keep it for the end of the enclosing ``coalesced`` block."""
    held = _held.get()
    if held is None:
        broker.send(found, items)
    else:
        held.setdefault(found.name, []).extend(items)


@contextmanager
def coalesced() -> Iterator[None]:
    """Keep the batches (``after_commit_batched``) of every transaction that commits inside the block and send
    them when it ends, one message per task name. For loops of short transactions, such as the reconciler's
    (a job each) or the sync's (a batch of jobs each): a message per transaction was a broker round trip for
    the loop and a task run for a worker, per transaction. What committed is sent even when the block raises; what rolled back never is. A
    nested block belongs to its outer one."""
    if _held.get() is not None:
        yield
        return
    held: dict[str, list] = {}
    token = _held.set(held)
    try:
        yield
    finally:
        _held.reset(token)
        for name, items in held.items():
            broker.send(task(name), items)
