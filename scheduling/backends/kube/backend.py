"""``KubernetesBackend``: the portal's jobs as gated pods on a real cluster, within the API server's rules
(unique pod names, scheduling gates only removed, affinity only narrowed while gated, evictions through the
Eviction API; the full list is at the top of tests/fakes/k8s_api.py).

The backend is stateless apart from its HTTP client: every method reads what it needs from the API server and
is safe to run twice (Celery retries, worker crashes). It imports nothing from Django; the portal wires it in
(``SCHEDULING_BACKEND=kubernetes``) and calls the methods of :class:`scheduling.backends.base.ClusterBackend`
plus :meth:`KubernetesBackend.watch_pods`, :meth:`KubernetesBackend.list_pods` and
:meth:`KubernetesBackend.disruption_budgets`.
"""

from __future__ import annotations

from scheduling.backends.base import ClusterBackend

from .checkpoints import CheckpointCleaning
from .creation import PodCreation
from .eviction import PodEviction
from .inventory import InventoryReader
from .logs import PodLogs
from .priority_classes import PriorityClasses
from .resize import PodResizing
from .secrets import OwnedSecrets
from .watch import PodWatching


class KubernetesBackend(PodResizing, PodCreation, PodEviction, InventoryReader, PodLogs, PriorityClasses, PodWatching,
                        CheckpointCleaning, OwnedSecrets, ClusterBackend):
    """One Kubernetes cluster behind the portal's ``ClusterBackend`` interface.

    The portal creates a job's pods when it admits the job (:meth:`start`), never while it is queued: a gated
    pod counts against its namespace's ResourceQuota, so a long queue would fill the quota (docs/kubernetes.md).

    Configuration (first match): ``api_client`` (any configured ``kubernetes.client.ApiClient``), ``host``
    (plain URL, no auth: tests), ``kubeconfig`` path (+ ``context``), in-cluster service account,
    ``$KUBECONFIG``/``~/.kube/config``.

    ``flavors`` maps (resource name, node labels) to portal flavor names for the inventory; without rules a
    flavor is derived from the node's ``gpu-type`` label (``a100`` or ``a100-mig-3g.40gb``).

    Each part lives in its own module: reading nodes and pods (``inventory``), disruption budgets
    (``pdbs``), creating and starting pods (``creation``), evictions and deletions (``eviction``), resizing a
    running attempt (``resize``), namespace
    quotas (``quotas``), logs, priority classes and the pod watch; ``connection`` holds what they share.
    """

    creates_pods_at_admission = True
    overlapping_starts = True  # HTTP only, through one thread-safe client and rate limit per process
