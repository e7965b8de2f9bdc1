"""The simulator checks every cycle that no GPU stays idle while a job that fits it and may start waits, other
than for a documented reason: a job told there is no room (no capacity, no fitting node) fits none of the GPUs
left free, and one kept back for the realtime headroom would leave less than the headroom free."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine import PendingReason, reasons, schedule
from engine.types import CycleResult
from simulator.jobs import prepare
from simulator.simulator import SimulationError, simulate

from .helpers import rows, small_scenario


def replay(policy, strict=True):
    sc, jobs, _ = prepare(small_scenario(), rows=rows(80, seed=3), load=None)
    return simulate(scenario=sc, jobs=jobs, policy=policy, options=replace(sc.options, strict=strict))


def holding_back(code: str, detail: dict):
    """The engine, except that its last admission of every cycle is told ``code`` instead of starting."""

    def decide(snap) -> CycleResult:
        res = schedule(snap)
        if not res.admissions:
            return res
        *kept, held = res.admissions
        why = PendingReason(held.job_id, code, reasons.CODES[code], dict(detail))
        return replace(res, admissions=tuple(kept), pending=(*res.pending, why))

    return decide


def test_the_engine_leaves_no_gpu_idle_without_a_documented_reason():
    assert replay(schedule).invalid["idle"] == 0


@pytest.mark.parametrize(("code", "detail"), [(reasons.NO_CAPACITY, {}), (reasons.NO_FITTING_NODE, {}),
                                              (reasons.REALTIME_HEADROOM, {"headroom_gpus": 1})])
def test_a_job_that_fits_the_idle_gpus_told_there_is_no_room_is_caught(code, detail):
    res = replay(holding_back(code, detail), strict=False)
    assert res.invalid["idle"] > 0
    with pytest.raises(SimulationError, match="waits with"):
        replay(holding_back(code, detail))
