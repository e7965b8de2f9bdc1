"""The portal's engine. ``engine.schedule`` is read at each call (an attribute of the module), so a replay runs
whatever ``engine.schedule`` is when it runs, a stand-in set by a test included."""

from __future__ import annotations

import dataclasses

import engine


class Portal:
    name = "portal"
    time_dependent = True  # needs periodic cycles even without events

    def __call__(self, snap):
        return engine.schedule(snap)

    @staticmethod
    def engine_name() -> str:
        fn = engine.schedule
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
    """``engine.fifo_schedule``: strict FIFO within nominal quota (the walking skeleton's placeholder)."""

    name = "core-fifo"
    time_dependent = False  # decides the same between events: no periodic cycles

    def __call__(self, snap):
        return engine.fifo_schedule(snap)
