"""Kubernetes cluster backend (``SCHEDULING_BACKEND=kubernetes``). See ``docs/kubernetes.md``."""

from scheduling.backends.base import LogsUnavailable

from .backend import KubernetesBackend
from .client import ApiError, TokenBucket, build_api_client
from .connection import FlavorRule
from .errors import GangIncomplete, PodNameTaken, PriorityClassNotOwned
from .inventory import pod_request
from .podspec import ADMISSION_GATE, PORTAL_SELECTOR, admission_patch, pdb_manifest, pod_manifest
from .status import pod_state
from .watch import PodWatch

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
