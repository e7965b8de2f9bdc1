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

An unknown name fails at the call, inside the caller's transaction, not later after commit.
"""

from __future__ import annotations

from celery import Task
from django.db import transaction

from portal import broker
from portal.celery import app


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
