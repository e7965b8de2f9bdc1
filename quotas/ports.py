"""What quotas needs to know of the scheduling above it, as one small port that scheduling implements.

Quotas stands below scheduling and never imports it (pyproject.toml's contracts check it): it holds flavors,
quotas and the money. The few facts of jobs, nodes and clusters it still needs come through here, as values:

* ``installed_gpus(flavor_id=..., cluster_id=...)``: the GPUs of a flavor on schedulable nodes (every
  cluster's, or one cluster's), what the nominal quotas must fit in;
* ``gpus_in_use()``: GPUs held by admitted and running jobs by (department, flavor, cluster), a quota's use;
* ``cluster_named(name)``: the cluster a per-cluster quota names (None: no such cluster);
* ``queued_costs(owner_id=..., wallet_id=...)``: the cost inputs of a user's queued jobs, what their
  allowance has committed before any hold exists;
* ``attempts(job_ids)``: where each job's attempt stands, for the repair of holds whose hook failed.

Scheduling registers its implementation in ``SchedulingConfig.ready()`` (``scheduling.services.quota_facts``).
Until then (quotas alone, a test without scheduling) the default answers as an empty cluster: no GPUs, no
jobs, no clusters, so nothing is charged or repaired on facts that are not there.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Protocol


@dataclass(frozen=True)
class CostInputs:
    """What a quote of one attempt reads (``pricing.estimated_cost``): flavor, tier, size, runtime, bid, and
    the surcharge a job pays for asking not to be preempted."""

    flavor_id: int
    tier: str
    gpus_per_pod: int
    pods: int
    max_runtime_s: int
    bid: int | None = None
    price_surcharge_pct: int = 0
    share_milli: int = 0  # a fraction of a GPU per pod (0: whole GPUs)

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_pod * self.pods

    @property
    def gpu_share(self) -> float:
        return self.pods * self.share_milli / 1000 if self.share_milli else float(self.total_gpus)


@dataclass(frozen=True)
class AttemptState:
    """Where a job's current attempt stands, as settlement reads it: ``pk`` and ``attempt`` name the attempt,
    ``state`` is the job's state (``active``: admitted or running, its hold still in use), and the times say
    when it ended (finished, or last preempted)."""

    pk: int
    attempt: int
    state: str
    active: bool
    finished_at: datetime | None = None
    last_preempted_at: datetime | None = None


class SchedulingFacts(Protocol):
    def installed_gpus(self, *, flavor_id: int, cluster_id: int | None = None) -> int: ...

    def gpus_in_use(self) -> dict[tuple[int, int, int | None], int]: ...

    def cluster_named(self, name: str): ...

    def cpu_in_use(self) -> dict[tuple[int, int], tuple[int, int]]: ...

    def queued_costs(self, *, owner_id: int, wallet_id: int) -> list[CostInputs]: ...

    def attempts(self, job_ids) -> dict[int, AttemptState]: ...


class NoScheduling:
    """The default: an empty cluster (no GPUs, no jobs, no clusters)."""

    def installed_gpus(self, *, flavor_id: int, cluster_id: int | None = None) -> int:
        return 0

    def gpus_in_use(self) -> dict[tuple[int, int, int | None], int]:
        return {}

    def cluster_named(self, name: str):
        return None

    def cpu_in_use(self) -> dict[tuple[int, int], tuple[int, int]]:
        return {}

    def queued_costs(self, *, owner_id: int, wallet_id: int) -> list[CostInputs]:
        return []

    def attempts(self, job_ids) -> dict[int, AttemptState]:
        return {}


_facts: SchedulingFacts = NoScheduling()


def register(facts: SchedulingFacts) -> None:
    """Install scheduling's implementation (once, from its AppConfig.ready; a test may swap it)."""
    global _facts
    _facts = facts


def facts() -> SchedulingFacts:
    return _facts


# ---------------------------------------------------------------- measured GPU use (observability, above)


class MeasuredUse(Protocol):
    def held_and_used(self, attempts) -> dict[tuple[int, int], tuple[float, float]]:
        """(GPU-hours held, GPU-hours used) of each measured (job id, attempt) of ``attempts``; an attempt
        without a measurement is left out (its efficiency is unknown, never zero)."""
        ...


class NotMeasured:
    """The default, until observability registers: nothing is measured."""

    def held_and_used(self, attempts) -> dict[tuple[int, int], tuple[float, float]]:
        return {}


_measured: MeasuredUse = NotMeasured()


def register_measured(measured: MeasuredUse) -> None:
    """Install observability's measurements (from its AppConfig.ready): the usage report reads them for its
    efficiency, and quotas never imports observability."""
    global _measured
    _measured = measured


def measured() -> MeasuredUse:
    return _measured
