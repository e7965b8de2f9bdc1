"""The pure scheduling core: frozen snapshot in, decisions out. No Django, Kubernetes, Celery or clock.

``schedule(snapshot) -> CycleResult`` is the portal's admission policy; the simulator calls the same function.
"""

from .engine import engine_schedule
from .fifo import fifo_schedule
from .policy import DEFAULT_POLICY, PolicyError, policy_from_dict, policy_to_dict
from .types import (
    Admission,
    ClusterInfo,
    CycleResult,
    Dependency,
    DisruptionBudget,
    NamespaceQuotaLimit,
    Node,
    PendingJob,
    PendingReason,
    Policy,
    Preemption,
    Quota,
    RunningJob,
    Snapshot,
    UserLimit,
)

schedule = engine_schedule

__all__ = [
    "DEFAULT_POLICY",
    "Admission",
    "ClusterInfo",
    "CycleResult",
    "Dependency",
    "DisruptionBudget",
    "NamespaceQuotaLimit",
    "Node",
    "PendingJob",
    "PendingReason",
    "Policy",
    "Preemption",
    "Quota",
    "RunningJob",
    "PolicyError",
    "Snapshot",
    "UserLimit",
    "engine_schedule",
    "fifo_schedule",
    "policy_from_dict",
    "policy_to_dict",
    "schedule",
]
