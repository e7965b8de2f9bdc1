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


class PortalNoBand(Portal):
    """The portal's engine with the priority band off (``priority_band_weight`` 0, whatever the scenario sets):
    one band, so high and critical work goes first only by its score and by starving sooner. Beside ``portal``
    in one run, it shows a lab what the band trades on its own trace."""

    name = "portal-noband"

    def __call__(self, snap):
        if snap.policy.priority_band_weight != 0:
            snap = dataclasses.replace(snap, policy=dataclasses.replace(snap.policy, priority_band_weight=0.0))
        return super().__call__(snap)


class CoreFifo:
    """``scheduling.core.fifo_schedule``: strict FIFO within nominal quota (the walking skeleton's placeholder)."""

    name = "core-fifo"
    time_dependent = False  # needs periodic cycles even without events

    def __call__(self, snap):
        core = importlib.import_module("scheduling.core")
        return core.fifo_schedule(snap)
