"""Node failures in the simulator (``SimOptions.node_failure_every_s``): the attempts on a failed node lose their
work since the last checkpoint and are requeued, expedited (first in their tier after a back-off) while the
policy's cap allows; the node takes nothing until it is repaired; every job still finishes exactly once."""

from __future__ import annotations

import pytest

from simulator import policies
from simulator.jobs import prepare
from simulator.scenario import ScenarioError
from simulator.simulator import simulate
from simulator.trace import TraceRow

from .helpers import rows, small_scenario
from .test_simulator import Checked

SIM = {"tick_s": 300, "preemption_grace_s": 30, "checkpoint_interval_s": 600, "strict": True,
       "node_failure_every_s": 1000, "node_repair_s": 300}


def _two_big_jobs(**policy):
    """a (8 GPUs, both nodes) runs from 0; b (8 GPUs, critical) waits from 100; at 1000 node n-0 fails under a
    and comes back at 1300."""
    sc = small_scenario(simulation=SIM, policy=policy)
    rs = [TraceRow("a", 0, 5000, 8, "a", tier="elastic"),
          TraceRow("b", 100, 1000, 8, "b", tier="elastic", urgency="critical")]
    sc, jobs, _ = prepare(sc, rows=rs, load=None)
    res = simulate(scenario=sc, jobs=jobs, policy=policies.make("portal"))
    return res, {r.spec.key: r for r in res.jobs}


def test_a_job_on_a_failed_node_loses_its_work_since_the_checkpoint_and_returns_first_in_its_tier():
    res, by = _two_big_jobs()
    a, b = by["a"], by["b"]
    assert res.node_failures >= 1 and a.node_failures >= 1 and a.expedited >= 1
    assert a.runs[0] == (0, 1000)
    assert a.failure_lost_gpu_s >= 400 * 8  # ran 1000 s, kept the 600 s checkpoint
    # back on both nodes at 1300 (the repair), ahead of b, which had waited longer at a higher urgency
    assert a.runs[1][0] == pytest.approx(1300)
    assert b.first_start > a.runs[1][0]


def test_without_expedited_requeue_the_job_waits_in_its_normal_place():
    res, by = _two_big_jobs(expedited_requeues=0)
    a, b = by["a"], by["b"]
    assert a.node_failures >= 1 and a.expedited == 0
    assert b.first_start == pytest.approx(1300)  # b goes first once the node is back
    assert a.runs[1][0] >= b.first_start + 1000


@pytest.mark.parametrize("name", ["portal", "fcfs"])
def test_every_job_still_finishes_once_and_no_node_is_overcommitted(name):
    sc = small_scenario(simulation=SIM)
    sc, jobs, _ = prepare(sc, rows=rows(60), load=0.8)
    pol = Checked(policies.make(name))
    res = simulate(scenario=sc, jobs=jobs, policy=pol)
    assert res.invalid == {"admission": 0, "preemption": 0, "idle": 0} and res.node_failures > 5
    assert sum(r.node_failures for r in res.jobs) > 0
    for r in res.jobs:
        assert r.finish is not None and r.progress_s == pytest.approx(r.spec.duration_s)
        assert r.failure_lost_gpu_s <= r.lost_gpu_s


@pytest.mark.parametrize("bad", [{"node_failure_every_s": 0}, {"node_failure_every_s": -5}, {"node_repair_s": 0}])
def test_bad_failure_options_are_refused(bad):
    with pytest.raises(ScenarioError):
        small_scenario(simulation={**SIM, **bad})


def test_a_jobs_own_preemptibility_is_replayed_and_read_from_the_trace(tmp_path):
    """A protected elastic job is no victim of a realtime arrival in the replay; the trace column round-trips."""
    from simulator.trace import read_csv, write_csv

    sc = small_scenario(cluster={"node_groups": [{"name": "n", "count": 1, "gpus_per_node": 8, "flavor": "a100"}]},
                        simulation={**SIM, "node_failure_every_s": None})
    rs = [TraceRow("p", 0, 9000, 4, "b", tier="elastic", preemptible=False),
          TraceRow("e", 0, 9000, 4, "b", tier="elastic"),
          TraceRow("rt", 3000, 600, 4, "a", tier="realtime")]
    path = tmp_path / "t.csv"
    write_csv(rs, path)
    back = read_csv(path)
    assert [r.preemptible for r in back] == [False, None, None]
    sc, jobs, _ = prepare(sc, rows=back, load=None)
    res = simulate(scenario=sc, jobs=jobs, policy=policies.make("portal"))
    by = {r.spec.key: r for r in res.jobs}
    assert by["p"].preemptions == 0 and by["e"].preemptions == 1 and res.realtime_preempted == 0
