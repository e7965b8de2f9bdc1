"""At a worker's start, the tiers' PriorityClasses are ensured only by the workers that create pods."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from scheduling import tasks


def consumer(*queues):
    return SimpleNamespace(task_consumer=SimpleNamespace(queues=[SimpleNamespace(name=q) for q in queues]))


@pytest.mark.parametrize(("queues", "ensured"), [
    (("starts", "pods", "default"), True),  # the pod workers
    (("pods",), True),
    (("notifications",), False),  # the notifier creates no pod: no Kubernetes client at its start
    (("cycle",), False),
    ((), True),  # queues unknown: as before
])
def test_only_a_worker_that_creates_pods_ensures_the_priority_classes(monkeypatch, queues, ensured):
    calls = []
    monkeypatch.setattr(tasks.podsets, "ensure_priority_classes", lambda: calls.append(1) or [])
    tasks._prepare_cluster(sender=consumer(*queues))
    assert bool(calls) is ensured
