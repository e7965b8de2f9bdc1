"""A scenario's calendar (``bookings:``, ``maintenance:``): parsed with a clear error per bad entry, and a replay
in which no attempt of another department runs on booked GPUs across a booking's start, the owners' jobs get
the booking, and no attempt runs on a node inside its maintenance window."""

from __future__ import annotations

import pytest

from simulator import policies
from simulator.jobs import prepare
from simulator.scenario import ScenarioError
from simulator.simulator import simulate

from .helpers import rows, small_scenario

HOUR = 3600.0


def test_bookings_and_windows_are_parsed():
    sc = small_scenario(bookings=[{"gpus": 4, "start_h": 2, "end_h": 3, "purpose": "course", "departments": ["b"]}],
                        maintenance=[{"start_h": 5, "end_h": 6, "nodes": ["n-1"], "reason": "fw"}])
    (b,) = sc.bookings
    assert (b.gpus, b.flavor, b.cluster, b.start, b.end, b.departments) == (4, "a100", "default", 2 * HOUR, 3 * HOUR,
                                                                            ("b",))
    assert sc.maintenance[0].nodes == ("n-1",)


@pytest.mark.parametrize("bad,message", [
    ({"bookings": [{"gpus": 4, "start_h": 3, "end_h": 2, "departments": ["b"]}]}, "before end_h"),
    ({"bookings": [{"gpus": 4, "start_h": 1}]}, "start_h and end_h"),
    ({"bookings": [{"gpus": 9, "start_h": 1, "end_h": 2, "departments": ["b"]}]}, "gpus must be 1..8"),
    ({"bookings": [{"gpus": 4, "start_h": 1, "end_h": 2}]}, "name its owners"),
    ({"bookings": [{"gpus": 4, "flavor": "h100", "start_h": 1, "end_h": 2, "departments": ["b"]}]}, "flavor"),
    ({"maintenance": [{"start_h": 1, "end_h": 2, "selector": ["rack"]}]}, "selector"),
    ({"maintenance": ["n-1"]}, "mapping"),
])
def test_bad_calendar_entries_are_refused(bad, message):
    with pytest.raises(ScenarioError, match=message):
        small_scenario(**bad)


def test_a_replay_keeps_the_calendar():
    start = 4 * HOUR
    sc = small_scenario(bookings=[{"gpus": 4, "start_h": 4, "end_h": 7, "purpose": "course", "departments": ["b"]}],
                        maintenance=[{"start_h": 9, "end_h": 12, "nodes": ["n-1"], "reason": "fw"}])
    sc, jobs, _ = prepare(sc, rows=rows(80, seed=3), load=None)
    res = simulate(scenario=sc, jobs=jobs, policy=policies.make("portal"), name="portal")
    assert res.invalid == {"admission": 0, "preemption": 0, "idle": 0}
    t0 = res.window[0]
    # every attempt of department a that ran across the booking's start left 4 GPUs to it: a's GPUs in use at
    # the start are at most the 4 not booked
    across = [r for r in res.jobs if r.spec.department == "a"
              for s, e in [*r.runs, *([(r.start, r.finish)] if r.start is not None and r.finish else [])]
              if s < t0 + start < e]
    assert sum(r.spec.total_gpus for r in across) <= 4
    assert all(r.first_start is not None for r in res.jobs if r.state == "done")
