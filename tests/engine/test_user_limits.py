"""Per-member GPU limits in the engine (``engine.user_limits``), and the pending order the queue shows."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from engine import reasons, schedule
from engine.ordering import Scorer
from engine.types import UserLimit
from tests.engine.core_builders import NOW, Snap, job, run
from tests.engine.test_properties import DEPTS, SETTINGS, snapshots

LIMIT = reasons.USER_GPU_LIMIT


@pytest.mark.parametrize(
    ("limits", "held", "asks", "expected"),
    [
        # (limits as (user or None, GPUs), GPUs amy holds, GPUs her job asks, its outcome)
        ([("amy", 4)], 0, 4, "admitted"),
        ([("amy", 4)], 2, 2, "admitted"),
        ([("amy", 4)], 2, 3, LIMIT),
        ([(None, 4)], 2, 3, LIMIT),  # the department's limit for every member
        ([(None, 4), ("amy", 8)], 2, 3, "admitted"),  # her own row replaces the department's
        ([(None, 8), ("amy", 4)], 2, 3, LIMIT),  # ... lower too
        ([("bob", 1)], 6, 2, "admitted"),  # a colleague's limit is not hers
        ([], 6, 2, "admitted"),  # no limit at all
    ],
)
def test_a_member_is_admitted_only_within_their_limit(limits, held, asks, expected):
    snap = Snap().nodes(2, gpus=8).quota("A", 16)
    for user, gpus in limits:
        snap.limit("A", gpus, user=user)
    if held:
        snap.running(run(50, on=("n0",), gpus=held, user="amy"))
    r = snap.pending(job(1, gpus=asks, user="amy")).decide()
    assert r.code(1) == expected
    if expected == LIMIT:
        detail = r.reason[1].detail
        assert dict(detail) == {"user": "amy", "limit": dict(limits).get("amy", dict(limits).get(None)), "held": held,
                                "requested": asks}
        assert f"amy holds {held} of" in r.reason[1].message


def test_the_cycle_counts_its_own_admissions_against_the_limit():
    r = (Snap().nodes(2, gpus=8).quota("A", 16).limit("A", 4, user="amy")
         .pending(job(1, gpus=3, user="amy"), job(2, gpus=3, user="amy"), job(3, gpus=3, user="bob")).decide())
    assert r.code(1) == "admitted" and r.code(3) == "admitted"
    assert r.code(2) == LIMIT and r.reason[2].detail["held"] == 3


def test_a_lowered_limit_evicts_nothing_and_keeps_new_jobs_out():
    r = (Snap().nodes(2, gpus=8).quota("A", 16).limit("A", 2, user="amy")
         .running(run(50, on=("n0",), gpus=6, user="amy"))
         .pending(job(1, gpus=1, user="amy", tier="realtime")).decide())
    assert r.code(1) == LIMIT and r.victims == set() and r.raw.preemptions == ()


def test_a_job_larger_than_the_limit_never_starts_and_has_no_estimate():
    r = Snap().nodes(1, gpus=8).quota("A", 8).limit("A", 2, user="amy").pending(job(1, gpus=4, user="amy")).decide()
    p = r.reason[1]
    assert p.code == LIMIT and p.detail["never"] is True and p.estimated_start is None
    assert "more than the 2 one member may hold" in p.message


def test_the_estimate_waits_for_the_member_s_own_jobs_of_any_flavor_to_end():
    """Plenty of GPUs are free: only amy's own running jobs (one on another flavor) keep her job out, until
    enough of them end."""
    r = (Snap().nodes(2, gpus=8).nodes(1, flavor="h100", gpus=8, prefix="h").quota("A", 16).quota("A", 8, "h100")
         .limit("A", 4, user="amy")
         .running(run(50, on=("n0",), gpus=2, user="amy", ran=600, max_runtime_s=3600),
                  run(51, on=("h0",), gpus=2, flavor="h100", user="amy", ran=600, max_runtime_s=7200))
         .pending(job(1, gpus=2, user="amy"), job(2, gpus=3, user="amy")).decide())
    assert r.code(1) == r.code(2) == LIMIT
    assert r.reason[1].estimated_start == NOW - 600 + 3600  # the first of her jobs to end gives back enough
    assert r.reason[2].estimated_start == NOW - 600 + 7200  # ... and 3 more only once both have ended


def test_jobs_of_no_user_are_never_limited():
    r = Snap().nodes(1, gpus=8).quota("A", 8).limit("A", 1).pending(job(1, gpus=4)).decide()
    assert r.code(1) == "admitted"


def test_other_departments_have_their_own_limits():
    r = (Snap().nodes(2, gpus=8).quota("A", 8).quota("B", 8).limit("A", 1)
         .pending(job(1, gpus=2, user="amy"), job(2, "B", gpus=2, user="amy")).decide())
    assert r.code(1) == LIMIT and r.code(2) == "admitted"


# ------------------------------------------------------------------------------------------ properties

USERS = ("u1", "u2", "")


@st.composite
def limited_snapshots(draw):
    """The random snapshots of the other properties, with owners on every job and limits for some members."""
    snap = draw(snapshots())
    running = tuple(replace(j, user=draw(st.sampled_from(USERS))) for j in snap.running)
    pending = tuple(replace(j, user=draw(st.sampled_from(USERS))) for j in snap.pending)
    limits = []
    for dept in DEPTS:
        for user in (None, "u1", "u2"):
            if draw(st.integers(0, 2)) == 0:
                limits.append(UserLimit(dept, user, draw(st.integers(0, 8))))
    return replace(snap, running=running, pending=pending, user_limits=tuple(limits))


def _limit(snap, dept, user):
    own = {(x.department, x.user): x.max_gpus for x in snap.user_limits}
    if not user:
        return None
    return own.get((dept, user), own.get((dept, None)))


@SETTINGS
@given(limited_snapshots())
def test_no_member_holds_more_than_their_limit_after_a_cycle_except_what_already_ran(snap):
    """A member whose job the cycle admits (or evicts for) holds at most their limit afterwards; what they held
    before a lowered limit is never taken from them."""
    result = schedule(snap)
    held, added = defaultdict(int), defaultdict(int)
    for j in snap.running:
        held[(j.department, j.user)] += j.total_gpus
    pending = {j.id: j for j in snap.pending}
    started = [a.job_id for a in result.admissions] + [p.preemptor_id for p in result.preemptions]
    for job_id in started:
        j = pending[job_id]
        added[(j.department, j.user)] += j.total_gpus
    for (dept, user), gpus in added.items():
        limit = _limit(snap, dept, user)
        assert limit is None or held[(dept, user)] + gpus <= limit
    assert {v for p in result.preemptions for v in p.victim_ids} <= {j.id for j in snap.running}
    for p in result.pending:
        if p.code == LIMIT:
            j = pending[p.job_id]
            assert p.detail["held"] + j.total_gpus > p.detail["limit"] == _limit(snap, j.department, j.user)
            assert p.estimated_start is None or p.estimated_start >= snap.now
            if p.detail.get("never"):
                assert p.estimated_start is None


@SETTINGS
@given(snapshots())
def test_the_pending_jobs_come_out_in_the_engine_s_order(snap):
    """The queue the portal shows is the result's pending order: the engine's own order, never a second one."""
    result = schedule(snap)
    scorer = Scorer(snap)
    by_id = {j.id: j for j in snap.pending}
    keys = [scorer.order_key(by_id[p.job_id]) for p in result.pending]
    assert keys == sorted(keys)


def test_a_limited_member_never_takes_a_colleagues_remembered_verdict():
    # jobs of one shape on a full node, no reservations: bob's wait for capacity, and the cycle remembers that
    # verdict for the shape; amy is at her limit, so hers must say so instead of reusing bob's
    r = (Snap().nodes(1, gpus=8).quota("A", 16).limit("A", 2, user="amy").policy(reservation_depth=0)
         .running(run(50, on=("n0",), gpus=6, user="carl"), run(51, on=("n0",), gpus=2, user="amy"))
         .pending(job(1, gpus=1, user="bob", urgency="critical"), job(3, gpus=1, user="bob", urgency="high"),
                  job(2, gpus=1, user="amy")).decide())
    assert r.code(1) == r.code(3) == reasons.NO_CAPACITY
    assert r.code(2) == LIMIT
