"""Table tests of who may be a victim of whom, one rule per kind of preemption (pure functions)."""

from __future__ import annotations

import pytest
from core_builders import NOW, run

from scheduling.core.preemption import Preemptor, at_risk_s, drain_victim, priority_victim, reclaim_victim
from scheduling.core.quota import QuotaBook
from scheduling.core.types import Quota

HOUR = 3600.0
ELASTIC, BACKFILL = 1, 2


def book(*running):
    # A and B: nominal 4 each of an 8-GPU flavor
    return QuotaBook((Quota("A", "a100", 4), Quota("B", "a100", 4)), running)


def victim(dept="B", gpus=1, tier="elastic", borrowed=False, **kw):
    return run(99, dept=dept, gpus=gpus, tier=tier, borrowed=borrowed, **kw)


@pytest.mark.parametrize(
    ("v", "p", "others", "ok"),
    [
        # another department's lower tier, the realtime job within its quota
        (victim(), Preemptor("A", "a100", 1, 0, borrows=False), (), True),
        # a realtime job that borrows takes only borrowers above their nominal quota ...
        (victim(), Preemptor("A", "a100", 1, 0, borrows=True), (), False),
        (victim(gpus=1, borrowed=True), Preemptor("A", "a100", 1, 0, borrows=True), (run(98, dept="B", gpus=4),), True),
        # ... or its own department's lower tiers when it then fits in nominal
        (victim(dept="A", gpus=2), Preemptor("A", "a100", 1, 0, borrows=True), (run(98, dept="A", gpus=3),), True),
        # never its own department's work of the same tier
        (victim(dept="A", tier="realtime"), Preemptor("A", "a100", 1, 0, borrows=False), (), False),
    ],
)
def test_priority_victims(v, p, others, ok):
    assert priority_victim(v, p, book(v, *others), {}) is ok


@pytest.mark.parametrize(
    ("v", "p", "starved", "ok"),
    [
        (victim(gpus=5, borrowed=True), Preemptor("A", "a100", 1, ELASTIC, borrows=False), False, True),
        # not a borrower, or its department back within nominal: no
        (victim(gpus=4), Preemptor("A", "a100", 1, ELASTIC, borrows=False), False, False),
        (victim(gpus=4, borrowed=True), Preemptor("A", "a100", 1, ELASTIC, borrows=False), False, False),
        # dev/test never evicts training; training may evict dev/test
        (victim(gpus=5, borrowed=True), Preemptor("A", "a100", 1, BACKFILL, borrows=False), False, False),
        (victim(gpus=5, borrowed=True, tier="backfill"), Preemptor("A", "a100", 1, ELASTIC, borrows=False), False, True),
        # a job that had starved before it started would starve again
        (victim(gpus=5, borrowed=True), Preemptor("A", "a100", 1, ELASTIC, borrows=False), True, False),
        # never its own department
        (victim(dept="A", gpus=5, borrowed=True), Preemptor("A", "a100", 1, ELASTIC, borrows=False), False, False),
    ],
)
def test_reclaim_victims(v, p, starved, ok):
    assert reclaim_victim(v, p, book(v), {}, started_starved=starved) is ok


@pytest.mark.parametrize(
    ("v", "p", "starved", "ok"),
    [
        (victim(tier="backfill"), Preemptor("A", "a100", 8, ELASTIC, borrows=True), False, True),  # lower tier
        (victim(dept="A"), Preemptor("A", "a100", 8, ELASTIC, borrows=True), False, True),  # its own department
        # others' training within their nominal quota is safe until the head starves
        (victim(), Preemptor("A", "a100", 8, ELASTIC, borrows=True), False, False),
        (victim(), Preemptor("A", "a100", 8, ELASTIC, borrows=True, starving=True), False, True),
        (victim(gpus=5, borrowed=True), Preemptor("A", "a100", 8, ELASTIC, borrows=True), False, True),
        # never a higher tier, never a job of its tier that had starved before it started
        (victim(), Preemptor("A", "a100", 8, BACKFILL, borrows=True, starving=True), False, False),
        (victim(dept="A"), Preemptor("A", "a100", 8, ELASTIC, borrows=True), True, False),
        (victim(tier="backfill"), Preemptor("A", "a100", 8, ELASTIC, borrows=True), True, True),
    ],
)
def test_drain_victims(v, p, starved, ok):
    assert drain_victim(v, p, book(v), {}, started_starved=starved) is ok


@pytest.mark.parametrize(
    ("ran", "interval", "at_risk"),
    [
        (5000.0, None, 5000.0),  # no checkpoint declared: everything since the start
        (5000.0, 1800.0, 1400.0),  # since the last of two checkpoints
        (3600.0, 1800.0, 0.0),  # right at a checkpoint
        (0.0, 1800.0, 0.0),
    ],
)
def test_work_at_risk(ran, interval, at_risk):
    job = run(1, ran=ran, checkpoint_interval_s=interval)
    assert at_risk_s(job, NOW) == pytest.approx(at_risk)
