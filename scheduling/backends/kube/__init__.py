"""Kubernetes cluster backend (``SCHEDULING_BACKEND=kubernetes``). See ``docs/kubernetes.md``."""

from .backend import (
    FlavorRule,
    GangIncomplete,
    KubernetesBackend,
    LogsUnavailable,
    PodNameTaken,
    PodWatch,
    PriorityClassNotOwned,
    pod_request,
)
from .client import ApiError, TokenBucket, build_api_client
from .podspec import ADMISSION_GATE, PORTAL_SELECTOR, admission_patch, pdb_manifest, pod_manifest
from .status import pod_state

__all__ = [
    "ADMISSION_GATE",
    "PORTAL_SELECTOR",
    "ApiError",
    "FlavorRule",
    "GangIncomplete",
    "KubernetesBackend",
    "LogsUnavailable",
    "PodNameTaken",
    "PodWatch",
    "PriorityClassNotOwned",
    "TokenBucket",
    "admission_patch",
    "build_api_client",
    "pdb_manifest",
    "pod_manifest",
    "pod_request",
    "pod_state",
]
