"""What the cycle decided for one pending job: an explicit outcome instead of an early return that means
nothing (Kueue gives each entry one too). The reason's message and detail stay in the cycle's pending
reasons; the outcome says which way the job went.

* ``Admitted``: it starts now (its placement is the cycle's admission).
* ``Waiting(code)``: it stays pending for that reason code (``engine.reasons``).
* ``Evicting(victims, reason)``: it waits for these victims to leave, chosen now ("priority", "reclaim",
  "drain") or already leaving ("in_flight").
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Admitted:
    pass


@dataclass(frozen=True, slots=True)
class Waiting:
    code: str


@dataclass(frozen=True, slots=True)
class Evicting:
    victims: tuple[int, ...]
    reason: str


Outcome = Admitted | Waiting | Evicting

ADMITTED = Admitted()
