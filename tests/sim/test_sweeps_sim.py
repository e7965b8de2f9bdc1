"""The simulator replays arrays and dependencies from the trace's columns: a sweep of 16 one-GPU tasks with a
throttle, then an evaluation that waits for the whole sweep, then an export after it. The throttle holds at
every instant, nothing starts before what it waits for ended, and a change of the throttle (the policy a lab
would tune) is measured on the same trace."""

from __future__ import annotations

import io
from dataclasses import replace

import pytest

from engine import schedule
from engine.fifo import fifo_schedule
from simulator import metrics
from simulator.errors import ScenarioError
from simulator.jobs import prepare
from simulator.simulator import simulate
from simulator.trace import TraceError, parse_rows, write_csv

from .helpers import small_scenario

TRACE = """job_id,submit_time_s,duration_s,gpus,department,array,array_throttle,after
{sweep}
eval,5,600,1,a,,,afterok:@sweep
export,6,60,1,a,,,afterany:eval
alert,7,60,1,a,,,afternotok:eval
other,10,1800,4,b,,,
"""


def trace(throttle: int) -> str:
    sweep = "\n".join(f"t{i},0,1000,1,a,sweep,{throttle if i == 0 else ''}," for i in range(16))
    return TRACE.format(sweep=sweep)


def replay(throttle: int, policy=schedule, strict=True):
    rows = parse_rows(io.StringIO(trace(throttle)))
    sc, jobs, _ = prepare(small_scenario(), rows=rows, load=None)
    return simulate(scenario=sc, jobs=jobs, policy=policy, options=replace(sc.options, strict=strict)), sc


def most_at_once(runs):
    edges = sorted([(s, 1) for s, _ in runs] + [(e, -1) for _, e in runs])
    at, best = 0, 0
    for _, d in edges:
        at += d
        best = max(best, at)
    return best


@pytest.mark.parametrize("throttle", [1, 3, 8])
def test_the_throttle_holds_and_nothing_starts_before_what_it_waits_for(throttle):
    res, _ = replay(throttle)
    by_key = {r.spec.key: r for r in res.jobs}
    sweep = [r for r in res.jobs if r.spec.array == "sweep"]
    assert most_at_once([run for r in sweep for run in r.runs]) <= throttle
    assert all(r.state == "done" for r in sweep)
    assert by_key["eval"].first_start >= max(r.finish for r in sweep)
    assert by_key["export"].first_start >= by_key["eval"].finish
    assert by_key["alert"].state == "cancelled" and by_key["alert"].first_start is None  # eval succeeded
    assert res.invalid == {"admission": 0, "preemption": 0, "idle": 0}


def test_a_throttle_change_is_measured_on_the_same_trace():
    slow, _ = replay(2)
    fast, _ = replay(8)
    end = {name: max(r.finish for r in res.jobs if r.finish is not None) for name, res in (("2", slow), ("8", fast))}
    assert end["8"] < end["2"]  # 16 tasks of 1000 s: 2 at once take 8000 s, 8 at once 2000 s
    waits = metrics.compute(slow, rho=0.5), metrics.compute(fast, rho=0.5)
    assert waits[1]["queued"]["avg"] < waits[0]["queued"]["avg"]


def test_a_policy_that_ignores_the_gates_has_its_admissions_refused_by_the_simulator():
    res, _ = replay(2, policy=fifo_schedule, strict=False)
    assert res.invalid["admission"] > 0
    sweep = [r for r in res.jobs if r.spec.array == "sweep"]
    assert most_at_once([run for r in sweep for run in r.runs]) <= 2


def test_the_columns_round_trip_and_bad_ones_are_refused():
    rows = parse_rows(io.StringIO(trace(3)))
    out = io.StringIO()
    write_csv(rows, out)
    assert parse_rows(io.StringIO(out.getvalue())) == rows
    assert rows[16].after == (("afterok", ("@sweep",)),)
    for bad in ("x,0,1,1,a,,,afterwards:t0", "x,0,1,1,a,,,afterok", "x,0,1,1,a,,0,", "x,0,1,1,a,,2,"):
        with pytest.raises(TraceError):
            parse_rows(io.StringIO("job_id,submit_time_s,duration_s,gpus,department,array,array_throttle,after\n"
                                   + bad + "\n"))
    unknown = parse_rows(io.StringIO("job_id,submit_time_s,duration_s,gpus,department,after\nx,0,1,1,a,afterok:nope\n"))
    with pytest.raises(ScenarioError, match="nope"):
        prepare(small_scenario(), rows=unknown, load=None)
