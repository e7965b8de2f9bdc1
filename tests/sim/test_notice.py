"""Notice before preemption in the simulator (``SimOptions.notice_s`` / a job's ``notice_s``, ``notice_answer``):
a victim keeps running through its notice with its GPUs promised to the preemptor; a job that answers writes a
checkpoint then and is evicted at once (losing only its grace period); one that does not is evicted at the
notice's end and keeps its periodic checkpoints only."""

from __future__ import annotations

import pytest

from simulator import metrics, policies
from simulator.jobs import prepare
from simulator.scenario import ScenarioError
from simulator.simulator import simulate
from simulator.trace import TraceRow, read_csv, write_csv

from .helpers import rows, small_scenario
from .test_simulator import Checked

SIM = {"tick_s": 300, "preemption_grace_s": 30, "checkpoint_interval_s": 600, "strict": True}


def _preempted(notice=None, answer=0.5, row_notice=None):
    """a (elastic, 8 GPUs, both nodes) runs from 0; the realtime b (4 GPUs) arrives at 1000 and preempts it."""
    sim = dict(SIM, **({} if notice is None else {"notice_s": notice}), notice_answer=answer)
    sc = small_scenario(simulation=sim)
    rs = [TraceRow("a", 0, 5000, 8, "a", tier="elastic", notice_s=row_notice),
          TraceRow("b", 1000, 600, 4, "b", tier="realtime")]
    sc, jobs, _ = prepare(sc, rows=rs, load=None)
    res = simulate(scenario=sc, jobs=jobs, policy=Checked(policies.make("portal")))
    assert res.invalid == {"admission": 0, "preemption": 0, "idle": 0}
    return res, {r.spec.key: r for r in res.jobs}


def test_without_notice_the_victim_loses_its_work_since_the_last_periodic_checkpoint():
    _, by = _preempted()
    a, b = by["a"], by["b"]
    assert a.preemptions == 1 and a.notices == 0
    assert a.runs[0] == (0, 1030) and b.first_start == 1030
    assert a.lost_gpu_s == pytest.approx((1030 - 600) * 8)


def test_a_victim_that_answers_in_half_its_notice_loses_only_its_grace_period():
    _, by = _preempted(notice=300)
    a, b = by["a"], by["b"]
    assert (a.notices, a.answered) == (1, 1)
    assert a.runs[0] == (0, 1180)  # answered at 1150, evicted then: 30 s of grace
    assert a.lost_gpu_s == pytest.approx(30 * 8)
    assert a.progress_s >= 1150 or a.state == "done"
    assert b.first_start == 1180  # the preemptor waits for the answer, within realtime's 5 minutes


def test_a_victim_that_does_not_answer_is_evicted_at_its_notices_end():
    _, by = _preempted(notice=300, answer=None)
    a, b = by["a"], by["b"]
    assert (a.notices, a.answered) == (1, 0)
    assert a.runs[0] == (0, 1330) and b.first_start == 1330
    assert a.lost_gpu_s == pytest.approx((1330 - 1200) * 8)  # its last periodic checkpoint was at 1200


def test_a_jobs_own_notice_replaces_the_scenarios_and_zero_means_none():
    _, by = _preempted(notice=300, row_notice=0)
    assert by["a"].notices == 0 and by["a"].runs[0] == (0, 1030)
    _, by = _preempted(row_notice=120)
    assert by["a"].notices == 1 and by["a"].runs[0] == (0, 1090)


def test_a_job_that_never_checkpoints_does_not_answer():
    sc = small_scenario(simulation=dict(SIM, notice_s=300))
    rs = [TraceRow("a", 0, 5000, 8, "a", tier="elastic", checkpoint_interval_s=0),
          TraceRow("b", 1000, 600, 4, "b", tier="realtime")]
    sc, jobs, _ = prepare(sc, rows=rs, load=None)
    a = next(r for r in simulate(scenario=sc, jobs=jobs, policy=policies.make("portal")).jobs if r.spec.key == "a")
    assert (a.notices, a.answered) == (1, 0) and a.runs[0] == (0, 1330)
    assert a.lost_gpu_s == pytest.approx(1330 * 8)


def test_notice_saves_lost_work_on_a_busy_trace_and_every_job_finishes_once():
    figures = {}
    for notice in (0, 300):
        sc = small_scenario(simulation=dict(SIM, notice_s=notice))
        sc, jobs, info = prepare(sc, rows=rows(80, seed=3), load=1.0)
        res = simulate(scenario=sc, jobs=jobs, policy=Checked(policies.make("portal")))
        assert res.invalid == {"admission": 0, "preemption": 0, "idle": 0}
        assert all(r.state == "done" for r in res.jobs)
        figures[notice] = metrics.compute(res, rho=info["rho"], keep_samples=False)
    assert figures[0]["preemptions"] > 0 and figures[300]["notices"] > 0
    assert figures[300]["gpu_hours_lost_preemption"] < figures[0]["gpu_hours_lost_preemption"]


def test_the_trace_round_trips_the_notice_and_refuses_a_negative_one(tmp_path):
    path = tmp_path / "t.csv"
    write_csv([TraceRow("a", 0, 100, 1, "a", notice_s=120.0), TraceRow("b", 0, 100, 1, "a")], path)
    assert [r.notice_s for r in read_csv(path)] == [120.0, None]
    header, first, second = path.read_text().splitlines()
    at = header.split(",").index("notice_s")
    cells = first.split(",")
    assert cells[at] in ("120", "120.0")
    cells[at] = "-1"
    path.write_text("\n".join([header, ",".join(cells), second]) + "\n")
    with pytest.raises(ValueError, match="notice"):
        read_csv(path)


@pytest.mark.parametrize(("sim", "message"), [({"notice_s": -1}, "notice_s"), ({"notice_answer": 1.5}, "notice_answer")])
def test_bad_notice_options_are_refused(sim, message):
    with pytest.raises(ScenarioError, match=message):
        small_scenario(simulation=dict(SIM, **sim))
