"""Preemptibility apart from the tier: a job's own choice (``own_preemptible``) decides whether it may be a victim;
a non-preemptible job of a preemptible tier borrows nothing; a preemptible realtime job (a session the lab lets
yield) is a victim of realtime work that is not preemptible itself, never of its like."""

from __future__ import annotations

import pytest
from core_builders import NOW, Result, Snap, job, run

from engine import reasons, schedule
from engine.tiers import is_preemptible


@pytest.mark.parametrize(("tier", "own", "expected"), [
    ("elastic", None, True), ("elastic", False, False), ("backfill", False, False),
    ("realtime", None, False), ("realtime", True, True), ("realtime", False, False)])
def test_the_own_choice_wins_over_the_tier(tier, own, expected):
    assert is_preemptible(tier, own) is expected


def _full(victim_own, victim_tier="elastic", preemptor_own=None):
    """One 4-GPU node held by department B's job 1; a realtime job 2 of A needs it."""
    return (Snap().node("n0", gpus=4).quota("A", 4).quota("B", 4)
            .running(run(1, dept="B", gpus=4, tier=victim_tier, own_preemptible=victim_own, ran=7200))
            .pending(job(2, gpus=4, tier="realtime", own_preemptible=preemptor_own)))


@pytest.mark.parametrize(("victim_tier", "victim_own", "preemptor_own", "evicted"), [
    ("elastic", None, None, True),
    ("elastic", False, None, False),  # a protected elastic job is never a victim
    ("realtime", None, None, False),  # realtime work is not preempted ...
    ("realtime", True, None, True),  # ... unless it chose (or the lab chose for a session) to be
    ("realtime", True, True, False),  # and never for its like: they would evict each other in turn
])
def test_who_is_a_priority_victim(victim_tier, victim_own, preemptor_own, evicted):
    res = Result(schedule(_full(victim_own, victim_tier, preemptor_own).build()))
    assert (1 in res.victims) is evicted
    if not evicted:
        assert res.code(2) != reasons.PREEMPTION_IN_PROGRESS


def test_a_protected_job_is_no_reclaim_or_drain_victim_either():
    # B borrows 4 GPUs of A's nominal with a protected job (it was admitted within nominal before a quota
    # change, say); A's head waits past the reclaim delay: nothing is evicted for it
    snap = (Snap().node("n0", gpus=4).quota("A", 4).quota("B", 0, borrow=4)
            .running(run(1, dept="B", gpus=4, own_preemptible=False, borrowed=True, ran=7200, max_runtime_s=36000))
            .pending(job(2, gpus=4, submitted_at=NOW - 7200)))
    res = Result(schedule(snap.build()))
    assert not res.victims
    plain = (Snap().node("n0", gpus=4).quota("A", 4).quota("B", 0, borrow=4)
             .running(run(1, dept="B", gpus=4, borrowed=True, ran=7200, max_runtime_s=36000))
             .pending(job(2, gpus=4, submitted_at=NOW - 7200)))
    assert Result(schedule(plain.build())).victims == {1}  # (the same without protection is reclaimed)


def test_a_non_preemptible_elastic_job_starts_only_within_nominal():
    snap = (Snap().node("n0", gpus=8).quota("A", 2, borrow=6).quota("B", 6)
            .pending(job(1, gpus=4, own_preemptible=False), job(2, gpus=2, own_preemptible=False),
                     job(3, gpus=4)))
    res = Result(schedule(snap.build()))
    assert res.code(1) == reasons.NON_PREEMPTIBLE_NOMINAL
    assert 2 in res.admitted and not res.admitted[2].borrowed  # within its nominal 2
    assert 3 in res.admitted  # a preemptible job borrows as before
    assert res.reason[1].detail["requested"] == 4


def test_a_realtime_job_may_borrow_whatever_its_choice():
    snap = Snap().node("n0", gpus=8).quota("A", 2, borrow=6).quota("B", 6).pending(job(1, gpus=4, tier="realtime",
                                                                         own_preemptible=False))
    assert 1 in Result(schedule(snap.build())).admitted
