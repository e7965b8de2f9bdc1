"""Starting admitted jobs' pods has a queue of its own, read first by every worker that reads the pod queue, so
a start never waits behind the clean-up of ended attempts (removals and kept logs, thousands after a busy hour)
while the admitted job holds its GPUs."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from portal.celery import app

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(("task", "queue"), [
    ("scheduling.pods.admit", "starts"),
    ("scheduling.pods.admit_many", "starts"),
    ("scheduling.pods.remove", "pods"),
    ("scheduling.pods.remove_many", "pods"),
    ("scheduling.pods.keep_logs", "pods"),
    ("scheduling.pods.create_many", "pods"),
    ("scheduling.pods.evict", "pods"),
    ("scheduling.cycle.run", "cycle"),
])
def test_each_pod_task_goes_to_its_queue(task, queue):
    assert app.amqp.router.route({}, task)["queue"].name == queue


def _queue_lists():
    """Every worker command line the project ships (deployment, compose, the demo, the benchmark, the docs)."""
    found = []
    for path in [ROOT / "deploy/base/worker.yaml", ROOT / "docker-compose.yml", ROOT / "lab/management/commands/demo.py",
                 ROOT / "benchmarks/e2e.py", *sorted((ROOT / "docs").glob("*.md"))]:
        for match in re.finditer(r'(?:--queues=|-Q[ ",]+)([a-z,]+)', path.read_text()):
            found.append((path.name, match.group(1).split(",")))
    return found


def test_every_worker_that_reads_the_pod_queue_reads_the_starts_first():
    lists = [(name, queues) for name, queues in _queue_lists() if "pods" in queues]
    assert len(lists) >= 6, lists
    for name, queues in lists:
        assert queues[0] == "starts", (name, queues)
