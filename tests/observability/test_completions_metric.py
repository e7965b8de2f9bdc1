"""portal_job_completions_total: attempts ended by outcome, read from the jobs' timelines at scrape time."""

from __future__ import annotations

import re
from datetime import timedelta

import pytest

pytestmark = pytest.mark.django_db


def _completions(client) -> dict[str, float]:
    text = client.get("/metrics").content.decode()
    return {m[0]: float(m[1]) for m in re.findall(r'^portal_job_completions_total\{outcome="(\w+)"\} (\S+)$', text,
                                                   re.M)}


def _run_and_finish(go):
    from scheduling.backends import get_backend
    from scheduling.services.cycle import run_cycle
    from scheduling.services.inventory import sync_cluster

    go(run_cycle)
    go(sync_cluster)
    clock = get_backend().clock  # the simulated cluster's: a day passes, every pod reaches its end
    clock.set(clock.now() + timedelta(days=1))
    go(sync_cluster)


def test_completions_count_each_outcome_once_and_never_go_down(lab, submit, client, go):
    from scheduling.models import Job
    from scheduling.services.jobs import job_cancel
    from scheduling.services.lifecycle import requeue

    assert _completions(client) == {"succeeded": 0, "failed": 0, "cancelled": 0, "preempted": 0}
    go(submit, lab.alice, name="fine")
    go(submit, lab.alice, name="crash", env={"SIM_EXIT_CODE": "2"})
    _run_and_finish(go)
    job_cancel(user=lab.alice, job=submit(lab.alice, name="unwanted"))
    seen = _completions(client)
    assert seen == {"succeeded": 1, "failed": 1, "cancelled": 1, "preempted": 0}

    from scheduling.services.cycle import run_cycle
    from scheduling.services.inventory import sync_cluster

    victim = go(submit, lab.alice, name="victim", tier="backfill")
    go(run_cycle)
    go(sync_cluster)
    assert requeue(job=Job.objects.get(pk=victim.pk), outcome="preempted", reason="preempted", message="test")
    after = _completions(client)
    assert after == {**seen, "preempted": 1}  # preempted and queued again: one attempt ended
    assert all(after[k] >= seen[k] for k in seen) and _completions(client) == after
