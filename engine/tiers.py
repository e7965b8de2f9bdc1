"""The tier table: every fact about a tier (queue) has its home here, and every other site asks it.

A tier's ``rank`` orders admission (0 first) and, reversed, eviction; ``preemptible`` says whether its running
jobs may ever be victims (realtime is never preempted); ``priority_value`` and ``priority_class`` are the
Kubernetes PriorityClass baseline its pods run under (the policy may rename the class, never the value);
``premium`` tiers must be priced above every other tier of a flavor; ``label`` is what a person reads in a
choice list, and ``preemption_hint`` the advice given to a job of the tier that was preempted again and again.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class Tier:
    name: str
    rank: int
    preemptible: bool
    priority_value: int
    priority_class: str
    premium: bool
    label: str
    preemption_hint: str = ""


REALTIME = Tier(
    name="realtime",
    rank=0,
    preemptible=False,
    priority_value=1_000_000,
    priority_class="ai-realtime",
    premium=True,
    label="Realtime (starts within 5 minutes, never preempted)",
)
ELASTIC = Tier(
    name="elastic",
    rank=1,
    preemptible=True,
    priority_value=100_000,
    priority_class="ai-elastic",
    premium=False,
    label="Elastic (interruptible batch training)",
    preemption_hint="Elastic jobs give way to realtime work and reclaims: realtime is never preempted.",
)
BACKFILL = Tier(
    name="backfill",
    rank=2,
    preemptible=True,
    priority_value=1_000,
    priority_class="ai-backfill",
    premium=False,
    label="Backfill (dev/test, lowest)",
    preemption_hint="Backfill is the first tier to be preempted: submit as elastic if the work matters.",
)

# In rank order.
TABLE: tuple[Tier, ...] = (REALTIME, ELASTIC, BACKFILL)
BY_NAME: Mapping[str, Tier] = MappingProxyType({t.name: t for t in TABLE})
NAMES: tuple[str, ...] = tuple(t.name for t in TABLE)
DEFAULT = ELASTIC.name  # the tier of a submission that names none

# An unknown tier ranks after every known one.
LOWEST_RANK = len(TABLE)


def rank(name: str) -> int:
    tier = BY_NAME.get(name)
    return LOWEST_RANK if tier is None else tier.rank


def preemptible(name: str) -> bool:
    """Whether running jobs of tier ``name`` may be evicted at all (by any rule); only a known tier that says
    so is exempt."""
    tier = BY_NAME.get(name)
    return tier is None or tier.preemptible


def is_preemptible(name: str, own: bool | None) -> bool:
    """Whether a job of tier ``name`` may be evicted: its own choice (``own``, which the lab's limits allowed at
    submission) when it made one, else its tier's."""
    return preemptible(name) if own is None else own


def is_premium(name: str) -> bool:
    """Whether tier ``name`` must be priced above every other tier of a flavor (an unknown tier is not)."""
    tier = BY_NAME.get(name)
    return tier is not None and tier.premium


def is_realtime(name: str) -> bool:
    """The tier that is admitted first, preempts for its start target and keeps headroom (rank 0)."""
    return name == REALTIME.name
