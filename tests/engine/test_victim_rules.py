"""Table tests of who may be a victim of whom, one rule per kind of preemption (pure functions)."""

from __future__ import annotations

import pytest
from core_builders import NOW, run

from engine.preemption import Preemptor, at_risk_s, drain_victim, priority_victim, reclaim_victim
from engine.quota import QuotaBook
from engine.types import Quota

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
        # a realtime job that borrows still takes other departments' lower tiers, within their nominal quota
        # too (the quota check of the search bounds it by their lending limit)
        (victim(), Preemptor("A", "a100", 1, 0, borrows=True), (), True),
        (victim(tier="backfill"), Preemptor("A", "a100", 1, 0, borrows=True), (), True),
        (victim(gpus=1, borrowed=True), Preemptor("A", "a100", 1, 0, borrows=True), (run(98, dept="B", gpus=4),), True),
        # ... and its own department's lower tiers when it then fits in nominal
        (victim(dept="A", gpus=2), Preemptor("A", "a100", 1, 0, borrows=True), (run(98, dept="A", gpus=3),), True),
        # but not when the victim would come straight back inside nominal, ahead of it
        (victim(dept="A", gpus=1), Preemptor("A", "a100", 2, 0, borrows=True), (run(98, dept="A", gpus=3),), False),
        # never another department's realtime work
        (victim(tier="realtime"), Preemptor("A", "a100", 1, 0, borrows=True), (), False),
        # never its own department's work of the same tier
        (victim(dept="A", tier="realtime"), Preemptor("A", "a100", 1, 0, borrows=False), (), False),
    ],
)
def test_priority_victims(v, p, others, ok):
    assert priority_victim(v, p, book(v, *others), {}) is ok


@pytest.mark.parametrize(
    ("v", "p", "first", "ok"),
    [
        (victim(gpus=5, borrowed=True), Preemptor("A", "a100", 1, ELASTIC, borrows=False), False, True),
        # not a borrower, or its department back within nominal: no
        (victim(gpus=4), Preemptor("A", "a100", 1, ELASTIC, borrows=False), False, False),
        (victim(gpus=4, borrowed=True), Preemptor("A", "a100", 1, ELASTIC, borrows=False), False, False),
        # dev/test never evicts training; training may evict dev/test
        (victim(gpus=5, borrowed=True), Preemptor("A", "a100", 1, BACKFILL, borrows=False), False, False),
        (victim(gpus=5, borrowed=True, tier="backfill"), Preemptor("A", "a100", 1, ELASTIC, borrows=False), False, True),
        # a job that would queue ahead of its preemptor would take its GPUs back
        (victim(gpus=5, borrowed=True), Preemptor("A", "a100", 1, ELASTIC, borrows=False), True, False),
        # never its own department
        (victim(dept="A", gpus=5, borrowed=True), Preemptor("A", "a100", 1, ELASTIC, borrows=False), False, False),
    ],
)
def test_reclaim_victims(v, p, first, ok):
    assert reclaim_victim(v, p, book(v), {}, first=first) is ok


@pytest.mark.parametrize(
    ("v", "p", "first", "ok"),
    [
        (victim(tier="backfill"), Preemptor("A", "a100", 8, ELASTIC, borrows=True), False, True),  # lower tier
        (victim(dept="A"), Preemptor("A", "a100", 8, ELASTIC, borrows=True), False, True),  # its own department
        # others' training within their nominal quota is safe until the head starves
        (victim(), Preemptor("A", "a100", 8, ELASTIC, borrows=True), False, False),
        (victim(), Preemptor("A", "a100", 8, ELASTIC, borrows=True, starving=True), False, True),
        (victim(gpus=5, borrowed=True), Preemptor("A", "a100", 8, ELASTIC, borrows=True), False, True),
        # never a higher tier, never a job that would queue ahead of the head
        (victim(), Preemptor("A", "a100", 8, BACKFILL, borrows=True, starving=True), False, False),
        (victim(dept="A"), Preemptor("A", "a100", 8, ELASTIC, borrows=True), True, False),
        (victim(tier="backfill"), Preemptor("A", "a100", 8, ELASTIC, borrows=True), True, False),
        # a realtime head takes what a realtime preemptor may: others' lower tiers, borrowing or not
        (victim(), Preemptor("A", "a100", 1, 0, borrows=True), False, True),
        (victim(tier="realtime"), Preemptor("A", "a100", 1, 0, borrows=True), False, False),
    ],
)
def test_drain_victims(v, p, first, ok):
    assert drain_victim(v, p, book(v), {}, first=first) is ok


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
