"""A reason's message says one true thing: its headline and its note never contradict each other."""

from __future__ import annotations

from core_builders import NOW, Snap, job, run

from engine import reasons


def test_a_quota_wait_with_some_idle_in_the_cohort_does_not_say_nothing_can_be_borrowed():
    # A uses its 4 and borrows 2 of B's 4; B runs 1: 1 GPU of B's is idle in the cohort, A asks for 2 more
    res = (
        Snap().nodes(2).quota("A", 4).quota("B", 4)
        .running(run(8, "A", gpus=6), run(9, "B", on="n1", gpus=1)).pending(job(1, "A", gpus=2)).decide()
    )  # fmt: skip
    r = res.reason[1]
    assert r.code == reasons.QUOTA_EXHAUSTED and r.detail["cohort_idle"] == 1
    assert "nothing can be borrowed" not in r.message and "1 idle in the cohort" in r.message, r.message


def test_a_department_that_may_not_borrow_is_told_so():
    res = Snap().nodes(1).quota("A", 2, borrow=0).quota("B", 4).running(run(8, "A", gpus=2)).pending(job(1, "A")).decide()
    r = res.reason[1]
    assert r.code == reasons.QUOTA_EXHAUSTED and "borrowing limit is 0" in r.message, r.message
    assert "idle in the cohort" not in r.message


def test_gpus_held_by_jobs_past_their_expected_end_are_not_reserved_in_0_s():
    # the running job has overrun its max runtime: the engine expects its GPUs back now, not "in 0 s"
    res = (
        Snap().nodes(1, gpus=4).quota("A", 8)
        .running(run(8, "A", gpus=4, ran=7200.0, max_runtime_s=3600))
        .pending(job(1, "A", gpus=4, submitted_at=NOW - 60)).decide()
    )  # fmt: skip
    r = res.reason[1]
    assert r.detail.get("reserved_from") == NOW, r
    assert "in 0 s" not in r.message and "past their expected end" in r.message, r.message


def test_the_reported_realtime_headroom_case_starts_one_of_the_two_jobs():
    # 4 of 8 A100s free, the largest free block 3, two 2-GPU jobs pending, headroom 1: the first starts (2 stay
    # free, more than the headroom); the second no longer fits any node, and says so, not the headroom
    res = (
        Snap().nodes(2, gpus=4).quota("A", 8)
        .running(run(8, "A", on="n0", gpus=1, ran=60.0, max_runtime_s=7200),
                 run(9, "A", on="n1", gpus=3, ran=60.0, max_runtime_s=7200))
        .pending(job(1, "A", gpus=2), job(2, "A", gpus=2)).policy(realtime_headroom_gpus=1).decide()
    )  # fmt: skip
    assert res.code(1) == "admitted"
    assert res.code(2) != reasons.REALTIME_HEADROOM
