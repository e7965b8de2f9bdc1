"""Resizable jobs in the simulator: admitted at the size that fits, grown into idle GPUs and shrunk for a job
that needs them, each resize at the job's checkpoint (on demand within its notice), its work going at its size's
speed (0.9 per doubling); ``trace.resizable`` makes a share of the training jobs resizable."""

from __future__ import annotations

from dataclasses import replace

import pytest

from simulator import policies
from simulator.jobs import prepare, resizable
from simulator.scenario import ScenarioError
from simulator.simulator import simulate
from simulator.trace import TraceRow

from .helpers import rows, small_scenario
from .test_simulator import Checked


def _run(rs, make, **sim):
    sc = small_scenario(simulation={"tick_s": 300, "preemption_grace_s": 30, "checkpoint_interval_s": 600,
                                    "strict": True, **sim})
    sc, jobs, _ = prepare(sc, rows=rs, load=None)
    jobs = [make(j) for j in jobs]
    res = simulate(scenario=sc, jobs=jobs, policy=Checked(policies.make("portal")))
    assert res.invalid == {"admission": 0, "preemption": 0, "idle": 0}
    return {r.spec.key: r for r in res.jobs}


def _resizable(key, low, notice=120.0):
    def make(j):
        if j.key != key:
            return j
        return replace(j, pods=j.total_gpus, gpus_per_pod=1, min_pods=low, notice_s=notice)
    return make


def test_it_starts_small_grows_when_the_gpus_free_up_and_finishes_sooner_than_at_its_minimum():
    # b and c hold 6 of the 8 GPUs until 1000; a (8 GPUs at most, 1 at least) starts on 1 of the 2 left (the
    # other is the realtime headroom while b and c are in their cooldown), then grows when they end.
    by = _run([TraceRow("b", 0, 1000, 4, "b", tier="elastic"), TraceRow("c", 0, 1000, 2, "b", tier="elastic"),
               TraceRow("a", 10, 4000, 8, "a", tier="elastic")], _resizable("a", 1))
    a = by["a"]
    assert a.first_start == 10 and a.runs[0][0] == 10
    assert a.grows >= 1 and a.shrinks == 0
    assert a.state == "done"
    # 1000 s or so at 1 of 8 pods (speed 1.8 ** -3 of its full one), the rest at 8 once grown (an answer in 60 s)
    done_small = (a.runs[0][1] - 10) / 1.8 ** 3
    assert a.finish == pytest.approx(a.runs[0][1] + 4000 - done_small, abs=1)


def test_it_shrinks_for_a_realtime_job_instead_of_being_preempted():
    by = _run([TraceRow("a", 0, 20000, 8, "a", tier="elastic"), TraceRow("r", 3000, 600, 4, "b", tier="realtime")],
              _resizable("a", 2))
    a, r = by["a"], by["r"]
    assert a.preemptions == 0 and a.shrinks >= 1 and a.lost_gpu_s == 0
    assert r.first_start - 3000 <= 300  # within realtime's 5 minutes: the shrink waited for a 60 s answer


def test_the_share_of_resizable_training_jobs_and_its_bad_values():
    sc = small_scenario()
    _, jobs, _ = prepare(sc, rows=rows(200, seed=3), load=None)
    made = resizable(jobs, {"share": 0.3}, seed=1)
    train = [j for j in jobs if j.tier == "elastic"]
    sized = [j for j in made if j.min_pods is not None]
    assert sized and all(j.tier == "elastic" and j.gpus_per_pod == 1 and 1 <= j.min_pods < j.pods for j in sized)
    assert abs(len(sized) / len(train) - 0.3) < 0.12
    assert resizable(jobs, {"share": 0.3}, seed=1) == made  # seeded
    for bad in ({"share": 1.5}, {"min_share": 0}, {"notice_s": -1}, {"efficiency": 0}):
        with pytest.raises(ScenarioError):
            resizable(jobs, bad, seed=1)


def test_its_credits_follow_its_size_lot_by_lot():
    # a starts on 1 of its 1..8 GPUs inside a's quota, then grows into the GPUs b and c free at 1000 (borrowed,
    # at the base price: nobody bids). Its hold is for the size it started at, its grow holds more, and it is
    # charged each lot from its own start.
    from billing.money import cost_of

    from .test_credits import Spy
    depts = {"a": {"quotas": {"a100": {"nominal": 4}}, "budget": 10**8, "members": {"alice": "pi"}},
             "b": {"quotas": {"a100": {"nominal": 4}}, "budget": 10**8, "members": {"bob": "senior"}}}
    sc = small_scenario(departments=depts, prices={"a100": {"elastic": 1000}},
                        simulation={"tick_s": 300, "preemption_grace_s": 30, "checkpoint_interval_s": 600,
                                    "strict": True})
    sc, jobs, _ = prepare(sc, rows=[TraceRow("b", 0, 1000, 4, "b", tier="elastic"),
                                    TraceRow("c", 0, 1000, 2, "b", tier="elastic"),
                                    TraceRow("a", 10, 4000, 8, "a", tier="elastic")], load=None)
    jobs = [_resizable("a", 1)(j) for j in jobs]
    a_spec = next(j for j in jobs if j.key == "a")
    spy = Spy(policies.make("portal"))
    res = simulate(scenario=sc, jobs=jobs, policy=spy)
    a = next(r for r in res.jobs if r.spec.key == "a")
    assert a.grows == 1 and a.state == "done" and len(a.runs) == 2
    after_start = next(s for s in spy.snaps if s.now > 10)
    assert 10**8 - after_start.credits["a"] == cost_of(1000, 1 * a_spec.max_runtime_s)  # 1 GPU held, not 8
    (t0, t1), (_, end) = a.runs
    import math
    assert res.spend["a"]["charged"] == (cost_of(1000, math.ceil(t1 - t0)) + cost_of(1000, math.ceil(end - t1))
                                         + cost_of(1000, 7 * math.ceil(end - t1)))
    assert res.spend["a"]["refunded"] == 0
