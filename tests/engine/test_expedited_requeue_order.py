"""Expedited requeue: which lost attempts qualify, the back-off and the per-job cap (``retries.expedite``), and
where an expedited job sits in the pending order (first in its tier, never ahead of a higher tier)."""

from __future__ import annotations

import pytest
from core_builders import NOW, Result, Snap, job

from engine import reasons, schedule
from engine.ordering import Scorer
from engine.policy import PolicyError, policy_from_dict, policy_to_dict
from engine.retries import BACKOFF_MAX_S, expedite
from engine.types import Policy


@pytest.mark.parametrize(
    ("reason", "done", "limit", "expedited", "backoff"),
    [
        ("NodeLost", 0, 3, True, 30.0),
        ("NodeShutdown", 1, 3, True, 60.0),
        ("NodeLost", 2, 3, True, 120.0),
        ("NodeLost", 3, 3, False, 0.0),  # the cap per job
        ("NodeLost", 0, 0, False, 0.0),  # off
        ("NodeLost", 9, 20, True, BACKOFF_MAX_S),  # the back-off is bounded
        # not a node failure: a preemption, the kubelet's eviction (node pressure may be the job's own), the
        # job's own error, a placement kube-scheduler could not bind, pods someone deleted
        ("Preempted", 0, 3, False, 0.0),
        ("Evicted", 0, 3, False, 0.0),
        ("Error", 0, 3, False, 0.0),
        ("OOMKilled", 0, 3, False, 0.0),
        ("Unschedulable", 0, 3, False, 0.0),
        ("PodsLost", 0, 3, False, 0.0),
    ],
)
def test_which_requeues_are_expedited(reason, done, limit, expedited, backoff):
    e = expedite(reason, done=done, limit=limit, first_backoff_s=30.0, tier="elastic")
    assert (e.expedited, e.backoff_s) == (expedited, backoff)
    if expedited:
        assert e.number == done + 1 and f"{done + 1} of {limit}" in e.detail and "elastic" in e.detail
    elif reason in ("NodeLost", "NodeShutdown"):  # a node failure that is not expedited says why on the timeline
        assert "normal place" in e.detail


def _order(snap: Snap) -> list[int]:
    s = snap.build()
    scorer = Scorer(s)
    return [j.id for j in sorted(s.pending, key=scorer.order_key)]


def test_an_expedited_job_goes_ahead_of_its_tier_the_band_and_starving_jobs_included():
    snap = Snap().node("n0").quota("A", 8).policy(starvation_s=3600.0).pending(
        job(1, urgency="critical", user_tier="pi", submitted_at=NOW - 20000),  # in the priority band
        job(2, submitted_at=NOW - 50000),  # starving
        job(3, submitted_at=NOW - 10, urgency="low", expedited_since=NOW - 5),
        job(4, submitted_at=NOW - 10, expedited_since=NOW - 60),  # requeued earlier: first
        job(5, tier="realtime", submitted_at=NOW),  # a higher tier still goes first
        job(6, tier="backfill", submitted_at=NOW - 10, expedited_since=NOW - 600),  # first of its own tier only
        job(7, tier="backfill", submitted_at=NOW - 90000),
    )
    assert _order(snap) == [5, 4, 3, 1, 2, 6, 7]


def test_the_order_key_with_other_use_ratios_keeps_the_expedited_place():
    snap = Snap().node("n0").quota("A", 8).quota("B", 8).pending(
        job(1, submitted_at=NOW - 9000), job(2, dept="B", submitted_at=NOW - 1, expedited_since=NOW - 1))
    s = snap.build()
    scorer = Scorer(s)
    ratios = {"A": 0.1, "B": 4.0}
    keys = sorted(s.pending, key=lambda j: scorer.order_key(j, ratios))
    assert [j.id for j in keys] == [2, 1]


def test_an_expedited_job_takes_the_free_gpus_before_older_work_and_says_why_while_it_waits():
    snap = Snap().node("n0", gpus=4).quota("A", 8).pending(
        job(1, gpus=4, submitted_at=NOW - 9000), job(2, gpus=4, submitted_at=NOW - 1, expedited_since=NOW - 1),
        job(3, gpus=8, submitted_at=NOW - 2, expedited_since=NOW - 2))
    res = Result(schedule(snap.build()))
    assert 2 in res.admitted and 1 not in res.admitted
    # job 3 can never fit a 4-GPU node; it still says it is expedited
    assert res.reason[3].detail["expedited_since"] == NOW - 2
    assert "expedited requeue" in res.reason[3].message
    assert "expedited_since" not in res.reason[1].detail


def test_an_expedited_job_in_its_back_off_keeps_its_gpus_from_longer_work_behind_it():
    # job 2 would run past the back-off's end on the GPUs job 1 starts on then; job 3 ends before it
    snap = Snap().node("n0", gpus=4).quota("A", 8).pending(
        job(1, gpus=4, attempt=2, expedited_since=NOW, not_before=NOW + 30), job(2, gpus=4),
        job(3, gpus=4, max_runtime_s=20.0, submitted_at=NOW + 1))
    res = Result(schedule(snap.build()))
    assert res.code(1) == reasons.RETRY_BACKOFF and 2 not in res.admitted and 3 in res.admitted
    assert res.reason[1].detail["reserved_from"] == NOW + 30
    assert res.reason[1].estimated_start == NOW + 30


def test_a_plain_retry_in_its_back_off_reserves_nothing():
    snap = Snap().node("n0", gpus=4).quota("A", 8).pending(
        job(1, gpus=4, attempt=2, not_before=NOW + 30, submitted_at=NOW - 100), job(2, gpus=4))
    res = Result(schedule(snap.build()))
    assert 2 in res.admitted and "reserved_from" not in res.reason[1].detail


def test_the_policy_carries_the_cap_and_back_off_and_rejects_bad_values():
    p = policy_from_dict({"expedited_requeues": 5, "expedited_backoff_s": 10})
    assert (p.expedited_requeues, p.expedited_backoff_s) == (5, 10.0)
    assert policy_from_dict(policy_to_dict(p)) == p
    assert Policy().expedited_requeues == 3
    with pytest.raises(PolicyError) as e:
        policy_from_dict({"expedited_requeues": -1, "expedited_backoff_s": "x"})
    assert set(e.value.errors) == {"expedited_requeues", "expedited_backoff_s"}
