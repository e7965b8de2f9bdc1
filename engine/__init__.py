"""The pure scheduling core: frozen snapshot in, decisions out. No Django, Kubernetes, Celery or clock.

``schedule(snapshot) -> CycleResult`` is the portal's admission policy; the simulator calls the same function.
"""

from .cycle import engine_schedule
from .fifo import fifo_schedule
from .policy import DEFAULT_POLICY, PolicyError, policy_from_dict, policy_to_dict
from .types import (
    Admission,
    Booking,
    ClusterInfo,
    CycleResult,
    Dependency,
    DisruptionBudget,
    MaintenanceWindow,
    NamespaceQuotaLimit,
    Node,
    PendingJob,
    PendingReason,
    Policy,
    Preemption,
    Quota,
    Resize,
    Role,
    RunningJob,
    Snapshot,
    TeamQuota,
    UserLimit,
)

schedule = engine_schedule

__all__ = [
    "DEFAULT_POLICY",
    "Admission",
    "Booking",
    "ClusterInfo",
    "CycleResult",
    "Dependency",
    "DisruptionBudget",
    "MaintenanceWindow",
    "NamespaceQuotaLimit",
    "Node",
    "PendingJob",
    "PendingReason",
    "Policy",
    "Preemption",
    "Quota",
    "Resize",
    "Role",
    "RunningJob",
    "PolicyError",
    "Snapshot",
    "TeamQuota",
    "UserLimit",
    "engine_schedule",
    "fifo_schedule",
    "policy_from_dict",
    "policy_to_dict",
    "schedule",
]
