"""The cycle's shortcuts change no decision: its remembered verdicts (``engine.cycle.Verdicts``) give the same result,
byte for byte, as judging every job in full, and the order key of its sort is the general one."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st
from test_properties import NOW, SETTINGS, snapshots

from engine import cycle
from engine.cycle import Cycle
from engine.ordering import Scorer
from engine.policy import DEFAULT_POLICY
from engine.types import Node, PendingJob, Quota, Snapshot


def _with_repeats(snap: Snapshot, copies: int, data) -> Snapshot:
    """The snapshot with each pending job repeated: same shape, another id, submission, bid and hold, so that
    most jobs of the queue are repeats of a job judged earlier in the cycle, as in a deep queue."""
    pending = list(snap.pending)
    next_id = 500
    for job in snap.pending:
        for _ in range(copies):
            pending.append(
                replace(
                    job,
                    id=next_id,
                    submitted_at=job.submitted_at - data.draw(st.sampled_from([0, 1, 600, 40_000])),
                    bid=data.draw(st.integers(0, 500)),
                    hold=data.draw(st.sampled_from([0, 0, 100, 1000, 1900])),
                )
            )
            next_id += 1
    return replace(snap, pending=tuple(pending))


@SETTINGS
@given(snapshots(), st.integers(1, 4), st.data())
def test_remembered_verdicts_decide_as_the_full_checks(snap, copies, data):
    snap = _with_repeats(snap, copies, data)
    assert Cycle(snap).run() == Cycle(snap, memo=False).run()


@SETTINGS
@given(snapshots(federated=True), st.integers(1, 3), st.data())
def test_remembered_verdicts_decide_as_the_full_checks_across_clusters(snap, copies, data):
    snap = _with_repeats(snap, copies, data)
    assert Cycle(snap).run() == Cycle(snap, memo=False).run()


def test_a_repeat_with_nothing_changed_is_not_judged_again(monkeypatch):
    # One full 8-GPU node: forty identical 8-GPU jobs of one department wait for the same reason. The first
    # reserves the node as the pool's head (a change), the second is judged in full and waits behind it; every
    # later one takes its verdict.
    snap = Snapshot(
        now=NOW,
        nodes=(Node("n1", "a100", 8, used_by_others=8),),
        pending=tuple(PendingJob(i, "A", "a100", pods=1, gpus_per_pod=8, submitted_at=NOW - i) for i in range(1, 41)),
        quotas=(Quota("A", "a100", 8),),
    )
    judged = []
    full = Cycle.judge

    def counting(self, job):
        judged.append(job.id)
        return full(self, job)

    monkeypatch.setattr(cycle.Cycle, "judge", counting)
    result = Cycle(snap).run()
    assert len(result.pending) == 40
    assert len(judged) < 5
    assert len({(p.code, p.message, dict(p.detail).get("free")) for p in result.pending[1:]}) == 1
    judged.clear()
    assert Cycle(snap, memo=False).run() == result
    assert len(judged) == 40


def test_a_change_between_two_repeats_makes_the_second_judged_again():
    # A 1-GPU job of B sits between the 4-GPU jobs of A (ordered by age alone here) and takes a free GPU: the A
    # job behind it must see one GPU fewer than the A job before it.
    snap = Snapshot(
        now=NOW,
        policy=replace(DEFAULT_POLICY, size_weight=0.0, fair_share_weight=0.0),
        nodes=(Node("n1", "a100", 4, used_by_others=1),),
        pending=(
            PendingJob(1, "A", "a100", gpus_per_pod=4, submitted_at=NOW - 9000),
            PendingJob(2, "A", "a100", gpus_per_pod=4, submitted_at=NOW - 8000),
            PendingJob(3, "B", "a100", gpus_per_pod=1, submitted_at=NOW - 7000),
            PendingJob(4, "A", "a100", gpus_per_pod=4, submitted_at=NOW - 6000),
        ),
        quotas=(Quota("A", "a100", 4), Quota("B", "a100", 4)),
    )
    result = Cycle(snap).run()
    assert result == Cycle(snap, memo=False).run()
    assert [a.job_id for a in result.admissions] == [3]
    free = {p.job_id: dict(p.detail).get("free") for p in result.pending}
    assert free[2] == 3 and free[4] == 2


@SETTINGS
@given(snapshots(), st.integers(0, 3), st.data())
def test_the_cycle_s_order_key_is_the_general_one_with_this_cycle_s_ratios(snap, copies, data):
    # (the general key, asked with use ratios, computes every term per job; the cycle's sort looks up the
    # terms of each urgency, user tier, department and size once)
    snap = _with_repeats(snap, copies, data)
    scorer = Scorer(snap)
    for job in snap.pending:
        assert scorer.order_key(job) == scorer.order_key(job, scorer.ratios)


def test_a_deadline_miss_is_told_only_to_the_job_whose_deadline_it_is():
    # Five jobs of one shape wait on the same full node; one has a deadline an hour's run cannot meet. The others
    # take the first one's remembered verdict, and with it its detail: the miss must be written into the
    # deadline job's own copy, not into the detail they share (its owner is told; theirs must not be).
    jobs = [PendingJob(i, "A", "a100", pods=1, gpus_per_pod=8, submitted_at=NOW - 100 + i, max_runtime_s=3600)
            for i in range(1, 6)]
    jobs[3] = replace(jobs[3], deadline=NOW + 60)
    snap = Snapshot(now=NOW, nodes=(Node("n1", "a100", 8, used_by_others=8),), pending=tuple(jobs))
    result = Cycle(snap).run()
    missed = sorted(p.job_id for p in result.pending if "deadline_miss" in p.detail)
    assert missed == [4]
    assert result == Cycle(snap, memo=False).run()
