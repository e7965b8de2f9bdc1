"""The portal's engine, looked up at call time so the simulator always runs whatever
``scheduling.core.schedule`` is now (the FIFO placeholder or the real engine)."""

from __future__ import annotations

import dataclasses
import importlib


class Portal:
    name = "portal"
    time_dependent = True  # needs periodic cycles even without events

    def __call__(self, snap):
        core = importlib.import_module("scheduling.core")
        return core.schedule(snap)

    @staticmethod
    def engine_name() -> str:
        core = importlib.import_module("scheduling.core")
        fn = core.schedule
        return f"{fn.__module__}.{fn.__name__}"


class PortalBand(Portal):
    """The portal's engine with the opt-in priority band on (unless the scenario sets its own): jobs of weight
    ``BAND_WEIGHT`` or more, high and critical work with the default weights, go ahead of starving routine
    work. Beside ``portal`` in one run, it shows a lab what the band would trade on its own trace."""

    name = "portal-band"
    BAND_WEIGHT = 2.0

    def __call__(self, snap):
        if snap.policy.priority_band_weight <= 0:
            snap = dataclasses.replace(
                snap, policy=dataclasses.replace(snap.policy, priority_band_weight=self.BAND_WEIGHT)
            )
        return super().__call__(snap)


class CoreFifo:
    """``scheduling.core.fifo_schedule``: strict FIFO within nominal quota (the walking skeleton's placeholder)."""

    name = "core-fifo"
    time_dependent = False  # needs periodic cycles even without events

    def __call__(self, snap):
        core = importlib.import_module("scheduling.core")
        return core.fifo_schedule(snap)
