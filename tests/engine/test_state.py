"""The cycle's state as results, pricing and verdicts read it (``engine.state.CycleState``) is the cycle's
own: every attribute the Protocol names is one a cycle has, with nothing of a cycle's working state left out,
and a fork (pricing's replays) is one too."""

from __future__ import annotations

import typing

from core_builders import Snap, job

from engine import pricing
from engine.cycle import Cycle
from engine.state import CycleState, Resizing


def _declared() -> set[str]:
    return set(typing.get_type_hints(CycleState))


def _a_cycle() -> Cycle:
    snap = Snap().nodes(2, gpus=4).quota("A", 4, borrow=4).quota("B", 4).pending(
        job(1, "A", gpus=4), job(2, "A", gpus=4, bid=300), job(3, "B", gpus=8), job(4, "B", gpus=2)).build()
    cycle = Cycle(snap)
    cycle.run()
    return cycle


def test_the_protocol_names_every_attribute_of_a_cycle_and_nothing_else():
    cycle = _a_cycle()
    assert _declared() == set(vars(cycle))
    assert _declared() == pricing.SHARED | pricing.REPLACED  # what a fork shares or copies, by the same names


def _methods(protocol: type) -> set[str]:
    return {name for name, value in vars(protocol).items() if callable(value) and not name.startswith("_")}


def test_a_cycle_and_a_fork_have_the_methods_the_modules_call():
    cycle = _a_cycle()
    assert _methods(CycleState) == {"consider", "judge", "price_of", "across_quota", "pend", "cpu_quota"}
    for state in (cycle, pricing.fork(cycle)):
        assert all(callable(getattr(state, name)) for name in _methods(CycleState))
        assert set(vars(state)) == _declared()


def test_the_cycle_s_resizer_does_what_the_state_names_it_for():
    resizer = _a_cycle().resizer
    assert _methods(Resizing) == {"held", "settle"}
    assert all(callable(getattr(resizer, name)) for name in _methods(Resizing))
