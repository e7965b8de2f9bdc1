"""Deadlines: the engine checks whether a waiting job can still meet its deadline, and, with
``deadline_edf_horizon_s`` set, orders the jobs at risk earliest deadline first within their tier."""

from __future__ import annotations

from engine import reasons
from engine.types import RunningJob
from tests.engine.core_builders import NOW, Snap, job


def _full(until: float) -> RunningJob:
    """A job holding the one 8-GPU node until ``until``."""
    return RunningJob(id=900, department="B", flavor="a100", tier="elastic", placement=("n0",), gpus_per_pod=8,
                      started_at=NOW - 600, max_runtime_s=until - NOW + 600)


def test_a_job_that_will_miss_its_deadline_says_so():
    # GPUs free in 2 h, the job runs 1 h, its deadline is in 90 min: it would end 90 min late
    res = (Snap().nodes(1, gpus=8).quota("A", 8).running(_full(NOW + 7200))
           .pending(job(1, gpus=8, max_runtime_s=3600, deadline=NOW + 5400)).decide())  # fmt: skip
    r = res.reason[1]
    assert r.estimated_start == NOW + 7200
    miss = r.detail["deadline_miss"]
    assert miss["estimated_end"] == NOW + 10800 and miss["late_s"] == 5400 and miss["estimated"] is True
    assert r.message.endswith("at its estimated start it would end 90 min after its deadline.")


def test_a_job_that_can_still_make_it_says_nothing_and_one_past_saving_says_so_without_an_estimate():
    snap = Snap().nodes(1, gpus=8).quota("A", 8).running(_full(NOW + 7200))
    res = snap.pending(job(1, gpus=8, max_runtime_s=3600, deadline=NOW + 3 * 3600)).decide()
    assert "deadline_miss" not in res.reason[1].detail and "deadline" not in res.reason[1].message
    # a flavor no node has: no estimate, but even starting now it would end 30 min late
    res = Snap().nodes(1, gpus=8).quota("A", 8).pending(
        job(2, flavor="h100", max_runtime_s=3600, deadline=NOW + 1800)).decide()
    assert res.code(2) == reasons.UNKNOWN_FLAVOR
    assert res.reason[2].detail["deadline_miss"]["estimated"] is False
    assert "even if it started now it would end 30 min after its deadline" in res.reason[2].message


def test_the_predicted_run_time_decides_when_it_is_known():
    # max runtime 4 h would miss the 3 h deadline; its owner's jobs take 1 h: it makes it
    snap = Snap().nodes(1, gpus=8).quota("A", 8).running(_full(NOW + 3600))
    res = snap.pending(job(1, gpus=8, max_runtime_s=4 * 3600, deadline=NOW + 3 * 3600,
                           predicted_runtime_s=3600)).decide()
    assert "deadline_miss" not in res.reason[1].detail


def test_earliest_deadline_first_among_jobs_at_risk_behind_the_knob():
    # three 8-GPU jobs for one 8-GPU node: 1 has the best score (critical) and no deadline, 2 a late
    # deadline, 3 a deadline at risk (slack 30 min)
    pending = (job(1, gpus=8, urgency="critical", max_runtime_s=3600),
               job(2, gpus=8, max_runtime_s=3600, deadline=NOW + 20 * 3600),
               job(3, gpus=8, max_runtime_s=3600, deadline=NOW + 5400))
    off = Snap().nodes(1, gpus=8).quota("A", 8).pending(*pending).decide()
    assert set(off.admitted) == {1}
    on = Snap().nodes(1, gpus=8).quota("A", 8).policy(deadline_edf_horizon_s=3600).pending(*pending).decide()
    assert set(on.admitted) == {3}
    # a job past saving by its predicted run time (slack < 0) is not moved ahead, nor one past its deadline
    hopeless = job(4, gpus=8, max_runtime_s=3600, predicted_runtime_s=3600, deadline=NOW + 1800)
    passed = job(5, gpus=8, max_runtime_s=3600, deadline=NOW - 60)
    for other in (hopeless, passed):
        on = (Snap().nodes(1, gpus=8).quota("A", 8).policy(deadline_edf_horizon_s=3600)
              .pending(pending[0], other).decide())  # fmt: skip
        assert set(on.admitted) == {1}
    # without a prediction, max_runtime_s is only an upper bound: a negative slack by it still counts as at risk
    maybe = job(6, gpus=8, max_runtime_s=3600, deadline=NOW + 1800)
    on = Snap().nodes(1, gpus=8).quota("A", 8).policy(deadline_edf_horizon_s=3600).pending(pending[0], maybe).decide()
    assert set(on.admitted) == {6}
