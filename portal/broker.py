"""Sending Celery tasks from a committed transaction without making the request depend on the broker."""

from __future__ import annotations

import logging

from kombu.exceptions import OperationalError as BrokerUnavailable

log = logging.getLogger(__name__)


def send(task, *args) -> bool:
    """``task.delay(*args)``, except that an unreachable broker is logged instead of raised.

    Used after commit, where what the task would do is already decided and stored: a job is accepted, a cancel
    is recorded. Raising there turned an accepted job into a 500, and the client's retry into a duplicate. The
    reconciler sends what was lost once the broker is back (missing pods created, gated pods admitted, pods of
    dead attempts deleted). Only publish failures are swallowed: an eager task's own error still propagates.
    Returns whether the message was sent."""
    try:
        task.delay(*args)
    except BrokerUnavailable:
        log.warning("broker unreachable: %s%r not sent; the reconciler will repair it", task.name, args,
                    exc_info=True)
        return False
    return True
