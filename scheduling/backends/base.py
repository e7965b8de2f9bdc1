"""The small interface every cluster backend implements (simulated, Kubernetes).

Backends know nothing of Django models: the portal hands them plain frozen values (``PodSet``) and reads back
``PodState`` / ``engine.Node`` values. Every method is idempotent, because Celery tasks may run twice:
creating pods that exist adopts them, admitting an ungated pod is a no-op, evicting a gone pod reports "gone".
"""

from __future__ import annotations

import abc
from collections.abc import Collection, Iterator, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path

from engine.types import DisruptionBudget, Node
from workloads.podsecrets import NO_SECRETS, PodSecrets
from workloads.values import PodWorkload

MANAGED_BY = "gpu-portal"


class BackendError(Exception):
    """A backend call failed for a reason the caller may retry later."""


class ClusterUnavailable(BackendError):
    """The cluster API cannot be reached (5xx, timeouts, connection refused): retry with back-off."""


class InvalidPodSpec(BackendError):
    """The cluster refused the pod as invalid (4xx other than conflicts): do not retry as is."""


class LogsUnavailable(BackendError):
    """No log to show: no pod, its container has not started, or the node's kubelet does not answer."""


class QuotaExceeded(BackendError):
    """A namespace ResourceQuota refused the pod (403 "exceeded quota"): retry with back-off once pods end.

    ``quota_version`` names the namespace's quotas as read right after the refusal (``name@resourceVersion``,
    sorted; "" when they could not be read): the refusal holds until that changes. ``quotas``: their
    ``{name: {"hard": ..., "used": ...}}`` as read, for the job's timeline."""

    def __init__(self, message: str = "", *, namespace: str = "", quota_version: str = "",
                 quotas: dict | None = None):
        super().__init__(message)
        self.namespace = namespace
        self.quota_version = quota_version
        self.quotas = quotas or {}


# Notice before preemption: the pod annotation the portal sets on a victim's pods, and where a downward-API
# volume shows it in the container (the kubelet updates the file of a running pod; environment variables are
# fixed at start).
NOTICE_ANNOTATION = "gpu-portal.io/preemption-notice"
NOTICE_DIR = "/etc/gpu-portal/notice"
NOTICE_FILE = f"{NOTICE_DIR}/preemption"
# A resizable job's size now, told to its running pods the same way (environment variables cannot change in a
# running container): the annotation, shown as the file ``SIZE_FILE`` (JSON: pods, world size, per-worker batch
# and accumulation steps).
SIZE_ANNOTATION = "gpu-portal.io/size"
SIZE_FILE = f"{NOTICE_DIR}/size"


@dataclass(frozen=True, slots=True)
class PodRole:
    """One role of a job of several (docs/workloads.md, "Shapes"): its pods' own image, command and size, and
    where they run (a role without GPUs: its CPU pool's node labels)."""

    name: str
    pods: int
    image: str
    command: tuple[str, ...]
    gpus_per_pod: int
    cpu_millicores: int
    memory_mib: int
    shm_mb: int = 0
    node_labels: tuple[tuple[str, str], ...] = ()
    restart_pod: bool = False  # failure policy restart-pod: a failed pod is replaced alone


@dataclass(frozen=True, slots=True)
class PodSet:
    """Everything a backend needs to materialise one attempt of one job as gated pods."""

    job_id: int
    attempt: int
    namespace: str
    department: str
    job_name: str
    owner: str
    image: str
    command: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    pods: int
    gpus_per_pod: int
    gpu_resource: str  # e.g. "nvidia.com/gpu" or "nvidia.com/mig-3g.40gb"
    node_labels: tuple[tuple[str, str], ...]  # the flavor's node labels, e.g. (("gpu-type", "a100"),)
    cpu_millicores: int
    memory_mib: int
    tier: str
    priority_class: str
    urgency: str = "normal"
    task_type: str = "train"
    user_tier: str = "standard"
    deadline: str | None = None  # ISO 8601
    bid: int = 0
    max_runtime_s: int = 3600
    termination_grace_s: int = 30
    checkpoint_interval_s: int | None = None
    pdb_min_available: int | None = None  # ask for a PodDisruptionBudget covering the job's pods
    cluster: str = "default"
    # Data source mounts, the checkpoint directory and /dev/shm, resolved for this attempt's cluster.
    workload: PodWorkload = PodWorkload()
    # Department secrets as env, files and image pull secrets (names and keys; values only of the portal's own
    # Secrets, which the backend writes first and never prints).
    secrets: PodSecrets = NO_SECRETS
    # Sessions and services (docs/sessions.md): "batch", "session" or "service"; the container port their
    # route reaches and the path that answers once the app is ready (the pod's readiness probe).
    kind: str = "batch"
    port: int | None = None
    readiness_path: str = "/"
    # Notice before preemption (0: none): the pods get the notice file and, to answer "checkpoint written",
    # the URL and the attempt's own credential (never printed).
    notice_s: int = 0
    notice_answer_url: str = ""
    notice_token: str = field(default="", repr=False)

    # A task of a job array: the array's id, this task's index and the array's number of tasks (None: no array).
    array_id: int | None = None
    array_index: int | None = None
    array_count: int | None = None
    # The roles of a job of several, in order: its pods are numbered role by role (``pods`` is all of them).
    # Empty: every pod is the job's own (one role).
    roles: tuple[PodRole, ...] = ()
    # A fraction of one GPU per GPU pod (docs/fractions.md): the flavor's mechanism ("hami" or "replicas"; blank:
    # whole GPUs), what a pod asks for (GPU memory MiB and compute per cent, or replicas of
    # ``shared_resource``), and once admitted the shared GPU (the engine's device index) of each GPU pod.
    sharing: str = ""
    gpu_memory_mib: int = 0
    gpu_cores: int = 0
    gpu_replicas: int = 0
    shared_resource: str = ""
    gpu_devices: tuple[int, ...] = ()
    # A resizable job (docs/workloads.md, "Resizable jobs"): its smallest size in pods (``pods`` is its size now)
    # and largest, and the global batch size its workers keep across sizes (None: not declared).
    min_pods: int | None = None
    max_pods: int | None = None
    global_batch_size: int | None = None
    # CPU work on GPU nodes (docs/workloads.md, "CPU work on GPU nodes"): the indices of the CPU pods the portal
    # placed on a GPU node's spare CPU. Such a pod is pinned to its node alone, without its CPU pool's labels
    # (which the GPU node does not carry), and asks for no GPU.
    on_gpu_nodes: tuple[int, ...] = ()

    def role_of(self, index: int) -> tuple[PodRole | None, int]:
        """The role of pod ``index`` and its rank in the role (None, index for a job of one role)."""
        at = 0
        for role in self.roles:
            if index < at + role.pods:
                return role, index - at
            at += role.pods
        return None, index

    def role_start(self, name: str) -> int:
        """The index of a role's first pod."""
        at = 0
        for role in self.roles:
            if role.name == name:
                return at
            at += role.pods
        raise KeyError(name)

    def for_pod(self, index: int) -> PodSet:
        """The pod set as pod ``index`` is made: its role's image (the job's when blank), command, GPUs, CPU,
        memory, /dev/shm and node labels."""
        role, _ = self.role_of(index)
        if index in self.on_gpu_nodes:  # pinned to a GPU node by name: no CPU pool labels to match
            own = replace(self, node_labels=())
            return own if role is None else own.for_pod_of(replace(role, node_labels=()))
        return self if role is None else self.for_pod_of(role)

    def for_pod_of(self, role: PodRole) -> PodSet:
        """The pod set as a pod of ``role`` is made."""
        workload = self.workload if role.shm_mb == self.workload.shm_mb else replace(self.workload, shm_mb=role.shm_mb)
        return replace(self, image=role.image or self.image, command=role.command or self.command,
                       gpus_per_pod=role.gpus_per_pod, cpu_millicores=role.cpu_millicores,
                       memory_mib=role.memory_mib, node_labels=role.node_labels or self.node_labels,
                       workload=workload)

    @property
    def has_route(self) -> bool:
        return self.kind in ("session", "service") and bool(self.port)

    def pod_name(self, index: int) -> str:
        base = f"job-{self.job_id}-a{self.attempt}"
        # (a resizable job's pods keep their names whatever its size: always numbered)
        return base if self.pods == 1 and self.max_pods is None else f"{base}-{index}"

    @property
    def pod_names(self) -> tuple[str, ...]:
        return tuple(self.pod_name(i) for i in range(self.pods))


@dataclass(frozen=True, slots=True)
class PodState:
    """What the cluster says about one of the portal's pods.

    ``phase``: Pending / Running / Succeeded / Failed / Unknown. ``reason`` carries the cause that matters to
    the job: ``OOMKilled``, ``ErrImagePull``, ``ImagePullBackOff``, ``Unschedulable``, ``Evicted``,
    ``Preempted``, ``DeadlineExceeded``, ``NodeLost``, ...
    """

    job_id: int
    attempt: int
    index: int
    name: str
    namespace: str
    phase: str
    gated: bool
    node: str | None = None
    exit_code: int | None = None
    reason: str = ""
    message: str = ""
    started_at: float | None = None
    finished_at: float | None = None
    deleting: bool = False
    # When the pod must be gone by (Kubernetes' deletionTimestamp: the deletion request + its grace period).
    # Until then a terminating pod keeps its node's GPUs.
    deletion_deadline: float | None = None
    # Since when ``reason`` has held, for a scheduling failure (PodScheduled's lastTransitionTime).
    since: float | None = None
    # The GPUs it requests (0 where the backend does not say) and of which resource (e.g. nvidia.com/gpu).
    gpus: int = 0
    gpu_resource: str = ""
    # The pod's Ready condition (its readiness probe passes): what a session's or service's page shows.
    ready: bool = False

    def holds_node(self, now: float) -> bool:
        """Still occupies its node's resources: not finished, and not past its deletion deadline."""
        if self.phase in ("Succeeded", "Failed"):
            return False
        return not (self.deleting and self.deletion_deadline is not None and now >= self.deletion_deadline)


@dataclass(frozen=True, slots=True)
class AttemptObjects:
    """What an attempt has on its cluster besides its pods, as its job says: a Service (a gang's headless one,
    or a session's or service's route), a route (its Ingress, where the cluster has an ingress controller)
    and its own PodDisruptionBudget. Clearing the attempt deletes only those, instead of asking for each kind
    and being told 404. The default (everything) is for an attempt whose job is not known any more."""

    service: bool = True
    route: bool = True
    budget: bool = True


EVERY_OBJECT = AttemptObjects()


@dataclass(frozen=True, slots=True)
class EvictionOutcome:
    """``status``: "accepted" (eviction created), "blocked" (429: a PodDisruptionBudget forbids it),
    "gone" (no such pod any more); a resize's: "done", "pending" (pods on their way) or "blocked"."""

    status: str
    pods: tuple[str, ...] = ()
    message: str = ""
    # "blocked" after some of the attempt's pods were already evicted (or were terminating): the gang is
    # broken, so the caller keeps asking for the rest (with back-off) instead of choosing again.
    partial: bool = False


@dataclass(frozen=True, slots=True)
class Inventory:
    nodes: tuple[Node, ...] = ()
    pods: tuple[PodState, ...] = field(default=())


@dataclass(frozen=True, slots=True)
class PdbCoverage:
    """The cluster's disruption budgets over the portal's pods, read for one admission cycle.

    ``pdbs``: one per budget that covers at least one of the portal's evictable pods (for Kubernetes every
    PodDisruptionBudget, whoever created it, named ``namespace/name``), with the disruptions it allows now.
    ``jobs``: ``(job_id, attempt)`` -> the names of the budgets covering that attempt's evictable pods. A job
    absent from ``jobs`` has no pod a budget guards.
    """

    pdbs: tuple[DisruptionBudget, ...] = ()
    jobs: dict[tuple[int, int], tuple[str, ...]] = field(default_factory=dict)


class ClusterBackend(abc.ABC):
    """One cluster. ``name`` is the Cluster row's name."""

    name: str = "default"
    # True when inventory() is the truth about nodes and the portal must store them; False for a backend
    # whose nodes already live in the portal's database (the simulated cluster reads the Node table).
    owns_inventory: bool = True
    # True when a job's pods are created only when it is admitted (``start``), not when it is queued: gated
    # pods of queued jobs would count against namespace ResourceQuotas (see docs/kubernetes.md).
    creates_pods_at_admission: bool = False
    # True when ``start`` touches no database and may run on several threads at once (a worker overlaps the
    # API calls of a message's admissions); False runs each start on the calling thread, one after another.
    overlapping_starts: bool = False
    # Seconds of a job's runtime that pass per wall-clock second on this cluster: 1 on a real cluster, the
    # simulated cluster's SIM_SPEEDUP in the demo. Estimates in runtime seconds are shown divided by it.
    speedup: float = 1.0

    @abc.abstractmethod
    def inventory(self, *, namespaces: Collection[str] | None = None) -> Inventory:
        """Nodes (GPU capacity per flavor, incl. GPUs used by pods the portal does not own) and the portal's
        pods, in a bounded number of API calls (lists, not per-object gets). ``namespaces``: the portal's
        namespaces on the cluster; a pod anywhere else is never the portal's (None: no such limit)."""

    def sync_inventory(self, *, namespaces: Collection[str] | None = None) -> Inventory:
        """What the sync reads (``inventory.sync_cluster``): the nodes, and at least the pods of every job the
        portal holds as admitted or running, all of their attempts. The sync moves only those jobs, so a
        backend that can leave out the rest (the simulated cluster: the gated pods of every waiting job, the
        pods of jobs that ended) reads a cluster whose cost does not grow with the queue. By default: the
        whole inventory."""
        return self.inventory(namespaces=namespaces)

    @abc.abstractmethod
    def ensure_pods(self, podset: PodSet) -> None:
        """Create the attempt's pods gated; adopt pods that already exist (409 AlreadyExists)."""

    @abc.abstractmethod
    def admit(self, podset: PodSet, placement: tuple[str, ...]) -> None:
        """Narrow each gated pod to its node and remove the portal's scheduling gate (all pods or none of
        a gang: only once every pod exists). A pod already ungated counts as done."""

    @abc.abstractmethod
    def evict(self, *, job_id: int, attempt: int, namespace: str) -> EvictionOutcome:
        """Evict the attempt's pods through the Eviction API (never a plain DELETE)."""

    def notify(self, *, job_id: int, attempt: int, namespace: str, annotations: Mapping[str, str]) -> tuple[str, ...]:
        """Set ``annotations`` on the attempt's pods (a running container sees them in its downward-API file:
        how a job is told of its preemption without a restart). Returns the pods told. Backends whose pods
        have no annotations tell none."""
        return ()

    @abc.abstractmethod
    def delete_pods(self, *, job_id: int, attempt: int, namespace: str,
                    objects: AttemptObjects = EVERY_OBJECT) -> None:
        """Delete the attempt's pods (cancellation by the job's owner or an admin), and the ``objects`` it has
        besides. Missing pods are fine."""

    def delete_pod(self, *, job_id: int, attempt: int, namespace: str, index: int) -> bool:
        """Delete pod ``index`` of the attempt (a missing one is fine); True when it is gone already, False
        while it is still terminating."""
        raise NotImplementedError(f"{type(self).__name__} cannot delete one pod of an attempt")

    def replace_pod(self, podset: PodSet, index: int, placement: tuple[str, ...]) -> bool:
        """Replace the failed pod ``index`` of a running attempt alone (failure policy ``restart-pod``): delete
        it, and once it is gone make it again, with the same name (its host name in the Service stays), on its
        node. False while the old one is still terminating: the caller asks again later."""
        if not self.delete_pod(job_id=podset.job_id, attempt=podset.attempt, namespace=podset.namespace,
                               index=index):
            return False
        self.start(podset, placement, fresh=False)
        return True

    def remove_pods(self, *, job_id: int, attempt: int, namespace: str, failed: bool = False,
                    objects: AttemptObjects = EVERY_OBJECT) -> EvictionOutcome:
        """Clear the pods of an attempt that has ended (requeued, failed, orphaned) without bypassing a
        PodDisruptionBudget: pods that no longer run are deleted, pods that still run go through the Eviction
        API (a 429 stops there and is reported ``blocked``, for the caller to ask again later). ``failed``: one
        of its pods failed (the attempt's own budget, if any, no longer guards anything). Backends without
        disruption budgets simply delete."""
        self.delete_pods(job_id=job_id, attempt=attempt, namespace=namespace, objects=objects)
        return EvictionOutcome("gone")

    def resize(self, podset: PodSet, before: tuple[str, ...], after: tuple[str, ...]) -> EvictionOutcome:
        """Take a running resizable attempt from the pods on ``before`` to the pods on ``after`` (``podset``: the
        attempt at its new size). A grow makes the new pods (ranks ``len(before)`` on) gated, ungates them only
        once all of them exist, on their nodes, with the tier's PriorityClass, and widens the attempt's
        PodDisruptionBudget; a shrink narrows the budget first, then evicts the highest ranks through the
        Eviction API. Answers "done" once every pod of the new size runs and every removed one is gone,
        "pending" while some are on their way, "blocked" when an eviction was refused (429: asked again later,
        never deleted around). Idempotent: a pod already made or already gone counts as done."""
        raise BackendError(f"{type(self).__name__} cannot resize an attempt")

    def namespace_quota_version(self, namespace: str) -> str:
        """The namespace's ResourceQuotas as ``name@resourceVersion`` (sorted, comma-separated): what a quota
        refusal is compared with to see whether the quota changed since. "" for backends without quotas."""
        return ""

    def start(self, podset: PodSet, placement: tuple[str, ...], *, fresh: bool = True) -> None:
        """Make the admitted attempt's pods run on ``placement``: create what is missing and ungate. ``fresh``:
        the first try for this admission (a backend may then skip reading what exists)."""
        self.ensure_pods(podset)
        self.admit(podset, placement)

    def attempt_pods(self, *, job_id: int, attempt: int, namespace: str) -> tuple[PodState, ...]:
        """The current states of one attempt's pods (what a watcher re-reads after a pod is deleted)."""
        return tuple(p for p in self.inventory().pods if p.job_id == job_id and p.attempt == attempt)

    def route_upstream(self, *, job_id: int, attempt: int) -> str:
        """Where the running pod of a session's or service's attempt answers (``host:port``), for the portal's
        own session proxy; "" where the cluster routes to the job's Service itself (an ingress) or no pod of
        the attempt runs yet."""
        return ""

    def logs(
        self, *, job_id: int, attempt: int, namespace: str, tail_lines: int | None = 200, follow: bool = False,
        pod: int = 0, timestamps: bool = False, since: datetime | None = None,
    ) -> Iterator[str]:
        """Lines of the log of the attempt's pod of index ``pod`` (0: the first): the last ``tail_lines`` (None:
        all). ``timestamps``: each line starts with the time it was written (``portal.timestamps.log_stamp``'s
        form, as Kubernetes writes it), never decreasing along the log. ``since``: lines written before it may be
        left out (a backend may keep a few more: the caller filters by the stamps)."""
        return iter(())

    def pdb_coverage(self) -> PdbCoverage | None:
        """The cluster's disruption budgets over the portal's pods, or None when the backend has none of its
        own (the simulated cluster: the snapshot then derives each job's budget from ``pdb_min_available``)."""
        return None

    # Where this process can read data sources' files: "<cluster>/<source>" -> the local directory where the
    # portal's workers mount the source's claim (the factory sets it from CHECKPOINT_READ_MOUNTS).
    read_mounts: Mapping[str, str] = {}

    def readable_dir(self, *, storage: str, sub_path: str) -> Path | None:
        """Where this process can read the directory ``sub_path`` of a source's claim (``storage``:
        ``<cluster>/<source>``), or None when it does not mount that source. Never a path outside the mount."""
        root = self.read_mounts.get(storage)
        if not root:
            return None
        base = Path(root).resolve()
        path = (base / sub_path).resolve()
        return path if path == base or base in path.parents else None

    def delete_checkpoint(self, *, namespace: str, claim_name: str, storage: str, sub_path: str, job_id: int) -> None:
        """Delete a job's expired checkpoint directory ``sub_path`` on the claim ``claim_name`` of ``namespace``
        (``storage``: the simulated cluster's name for the source's files). Idempotent; returns once the
        cluster took the request, raises BackendError when it could not."""
        raise BackendError(f"{type(self).__name__} cannot delete checkpoint directories")

    def delete_owned_secret(self, *, namespace: str, name: str) -> bool:
        """Delete a Secret the portal wrote for a department secret that was deleted since (only if it is the
        portal's). Returns whether one was deleted. Backends that write no Secrets have none."""
        return False

    def ensure_priority_classes(self, classes: dict[str, int]) -> list[str]:
        """Create/update the tier PriorityClasses; returns what changed. Backends without them no-op."""
        return []
