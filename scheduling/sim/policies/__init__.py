"""Baseline policies, each a small callable ``Snapshot -> CycleResult`` (the engine's interface).

``make(name)`` returns a fresh instance; ``DEFAULT`` is the comparison set of issue 6 in report order.
"""

from __future__ import annotations

from .k8s import FCFS, QuotaPriority
from .kueue import Kueue
from .lasrtf import SRTF, Tiresias
from .portal import CoreFifo, Portal
from .slurm import EasyBackfill
from .volcano import VolcanoDRF

REGISTRY = {
    "fcfs": FCFS,
    "k8s-quota-priority": QuotaPriority,
    "volcano-drf": VolcanoDRF,
    "kueue": Kueue,
    "slurm-easy": EasyBackfill,
    "tiresias": Tiresias,
    "srtf-oracle": SRTF,
    "portal": Portal,
    "core-fifo": CoreFifo,
}

DEFAULT = ("fcfs", "k8s-quota-priority", "volcano-drf", "kueue", "slurm-easy", "tiresias", "srtf-oracle", "portal")

DESCRIPTIONS = {
    "fcfs": "FCFS, no preemption, no quotas (Kubernetes default scheduler)",
    "k8s-quota-priority": "static quotas (ResourceQuota = nominal) + PriorityClass preemption",
    "volcano-drf": "queue + DRF proportion with reclaim (kube-batch/Volcano-like)",
    "kueue": "cohort borrowing + priority preemption (Kueue-like)",
    "slurm-easy": "FIFO + EASY backfill on max runtime (Slurm-like)",
    "tiresias": "Tiresias discretised 2D-LAS (attained GPU-service queues)",
    "srtf-oracle": "SRTF with known durations (ideal reference, oracle)",
    "portal": "the portal's engine scheduling.core.schedule, default policy",
    "core-fifo": "scheduling.core.fifo_schedule placeholder (strict FIFO within nominal)",
}


def make(name: str):
    try:
        return REGISTRY[name]()
    except KeyError:
        raise KeyError(f"unknown policy {name!r}; known: {', '.join(REGISTRY)}") from None


__all__ = ["DEFAULT", "DESCRIPTIONS", "REGISTRY", "make"]
