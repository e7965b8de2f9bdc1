"""The portal's engine, looked up at call time so the simulator always runs whatever
``scheduling.core.schedule`` is now (the FIFO placeholder or the real engine)."""

from __future__ import annotations

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


class CoreFifo:
    """``scheduling.core.fifo_schedule``: strict FIFO within nominal quota (the walking skeleton's placeholder)."""

    name = "core-fifo"
    time_dependent = False  # needs periodic cycles even without events

    def __call__(self, snap):
        core = importlib.import_module("scheduling.core")
        return core.fifo_schedule(snap)
