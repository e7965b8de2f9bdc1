"""Baseline policies, each a small callable ``Snapshot -> CycleResult`` (the engine's interface).

``make(name)`` returns a fresh instance; ``DEFAULT`` is the comparison set in report order. Baselines ignore
``Snapshot.credits`` and job holds (budgets are the portal's); the simulator still settles what they admit at
the base price (0 unless the scenario sets ``prices``).
"""

from __future__ import annotations

from .k8s import FCFS, QuotaPriority, StrictFCFS
from .kueue import Kueue
from .lasrtf import SRTF, Tiresias
from .portal import CoreFifo, Portal, PortalNoBand
from .slurm import EasyBackfill
from .volcano import VolcanoDRF

REGISTRY = {
    "fcfs": FCFS,
    "fcfs-strict": StrictFCFS,
    "k8s-quota-priority": QuotaPriority,
    "volcano-drf": VolcanoDRF,
    "kueue": Kueue,
    "slurm-easy": EasyBackfill,
    "tiresias": Tiresias,
    "srtf-oracle": SRTF,
    "portal": Portal,
    "portal-noband": PortalNoBand,
    "core-fifo": CoreFifo,
}

DEFAULT = ("fcfs", "fcfs-strict", "k8s-quota-priority", "volcano-drf", "kueue", "slurm-easy", "tiresias", "srtf-oracle", "portal")

DESCRIPTIONS = {
    "fcfs": "FCFS skipping ahead: each job in arrival order starts if it fits, no preemption, no quotas "
            "(Kubernetes default scheduler)",
    "fcfs-strict": "strict head-of-line FCFS per flavor: nothing starts ahead of a blocked head",
    "k8s-quota-priority": "static quotas (ResourceQuota = nominal) + PriorityClass preemption",
    "volcano-drf": "queue + DRF proportion with reclaim (kube-batch/Volcano-like)",
    "kueue": "cohort borrowing + priority preemption (Kueue-like)",
    "slurm-easy": "FIFO + EASY backfill on max runtime (Slurm-like)",
    "tiresias": "Tiresias discretised 2D-LAS (attained GPU-service queues) with its starvation guard",
    "srtf-oracle": "SRTF with known durations (ideal reference, oracle)",
    "portal": "the portal's engine engine.schedule, default policy",
    "portal-noband": "the portal's engine with the priority band off (priority_band_weight 0: high and "
                     "critical work waits behind starving routine work)",
    "core-fifo": "engine.fifo_schedule placeholder (strict FIFO within nominal)",
}


def kind(name: str) -> str:
    """"portal" for any policy that runs the portal's engine (whatever its report name), else the name."""
    cls = REGISTRY.get(name)
    return "portal" if cls is not None and issubclass(cls, Portal) else name


def make(name: str):
    try:
        return REGISTRY[name]()
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(REGISTRY)}") from None


__all__ = ["DEFAULT", "DESCRIPTIONS", "REGISTRY", "kind", "make"]
