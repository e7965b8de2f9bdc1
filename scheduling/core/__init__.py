"""The pure scheduling core: frozen snapshot in, decisions out. No Django, Kubernetes, Celery or clock.

``schedule(snapshot) -> CycleResult`` is the portal's admission policy; the simulator calls the same function.
"""

from .fifo import fifo_schedule
from .types import (
    Admission,
    CycleResult,
    DisruptionBudget,
    Node,
    PendingJob,
    PendingReason,
    Policy,
    Preemption,
    Quota,
    RunningJob,
    Snapshot,
)

schedule = fifo_schedule

__all__ = [
    "Admission",
    "CycleResult",
    "DisruptionBudget",
    "Node",
    "PendingJob",
    "PendingReason",
    "Policy",
    "Preemption",
    "Quota",
    "RunningJob",
    "Snapshot",
    "fifo_schedule",
    "schedule",
]
