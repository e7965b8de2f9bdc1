"""Pure builders: a ``PodSet`` -> the Kubernetes manifests (plain dicts) of its gated pods and PDB.

No I/O here, so the shape of what the portal asks the cluster for is easy to read and to test. Users never pass a
raw pod spec: every field below comes from validated ``PodSet`` values, and the security context is fixed
(PodSecurity ``restricted``: non-root, no privilege escalation, drop ALL, seccomp RuntimeDefault, no host
namespaces, no hostPath, no service-account token).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from typing import Any

from scheduling.backends.base import (
    MANAGED_BY,
    NOTICE_ANNOTATION,
    NOTICE_DIR,
    NOTICE_FILE,
    SIZE_ANNOTATION,
    SIZE_FILE,
    InvalidPodSpec,
    PodSet,
)
from workloads.values import SHM_PATH, SHM_VOLUME, PodWorkload

# The portal's scheduling gate: a pod carrying it is never considered by kube-scheduler.
ADMISSION_GATE = "gpu-portal.io/admission"

LABEL_MANAGED_BY = "app.kubernetes.io/managed-by"
LABEL_JOB_ID = "gpu-portal.io/job-id"
LABEL_ATTEMPT = "gpu-portal.io/attempt"
LABEL_POD_INDEX = "gpu-portal.io/pod-index"
LABEL_ROLE = "gpu-portal.io/role"  # the pod's role, for a job of several
LABEL_DEPARTMENT = "gpu-portal.io/department"
LABEL_TIER = "gpu-portal.io/tier"
LABEL_CLUSTER = "gpu-portal.io/cluster"
# Which installation of the portal wrote the object: two installations may share a cluster (or a test suite may
# run against a cluster that also serves a production portal), and each takes only its own objects for its jobs.
LABEL_INSTALLATION = "gpu-portal.io/installation"
DEFAULT_INSTALLATION = "default"
LABEL_TASK_TYPE = "ai-task-type"
LABEL_URGENCY = "urgency-level"

ANNOTATION_USER_TIER = "user-tier"
ANNOTATION_DEADLINE = "deadline"
ANNOTATION_CHECKPOINT_INTERVAL = "gpu-portal.io/checkpoint-interval-seconds"
ANNOTATION_BID = "gpu-portal.io/bid"
ANNOTATION_OWNER = "gpu-portal.io/owner"
ANNOTATION_JOB_NAME = "gpu-portal.io/job-name"
ANNOTATION_DEPARTMENT = "gpu-portal.io/department"
# Fractions (docs/fractions.md): the shared GPU the engine chose for the pod (its device index on the node), and
# HAMi's own annotations: the device UUIDs a pod may use or must not use, and the device HAMi gave a pod.
ANNOTATION_GPU_DEVICE = "gpu-portal.io/gpu-device"
HAMI_USE_UUID = "nvidia.com/use-gpuuuid"
HAMI_NOUSE_UUID = "nvidia.com/nouse-gpuuuid"
HAMI_ALLOCATED = "hami.io/vgpu-devices-allocated"
HAMI_MEMORY = "nvidia.com/gpumem"
HAMI_CORES = "nvidia.com/gpucores"

MAIN_CONTAINER = "main"
# Narrowing the affinity to one node uses the node's name (exact), not the hostname label (which may differ).
NODE_NAME_FIELD = "metadata.name"

PORTAL_SELECTOR = f"{LABEL_MANAGED_BY}={MANAGED_BY}"

# The port of a gang's rendezvous (torchrun's c10d store, or the rank-0 process of a one-process-per-pod launcher)
# on pod 0: what MASTER_PORT says and the headless Service names.
RENDEZVOUS_PORT = 29500

# By default the portal's pods tolerate the taint GPU node pools commonly carry (GKE, AKS, many operators).
DEFAULT_TOLERATIONS: tuple[Mapping[str, Any], ...] = (
    {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"},
)

_LABEL_VALUE_BAD = re.compile(r"[^A-Za-z0-9_.-]+")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def label_value(value: object) -> str:
    """Coerce any value into a valid label value (<= 63 chars, alphanumeric at both ends)."""
    text = _LABEL_VALUE_BAD.sub("-", str(value))[:63]
    return text.strip("-_.")


def installation_selector(installation: str) -> str:
    """The label selector of every object this installation wrote."""
    return f"{PORTAL_SELECTOR},{LABEL_INSTALLATION}={installation}"


def identity_labels(installation: str) -> dict[str, str]:
    """The labels that make an object this installation's."""
    return {LABEL_MANAGED_BY: MANAGED_BY, LABEL_INSTALLATION: installation}


def attempt_labels(job_id: int, attempt: int, installation: str) -> dict[str, str]:
    """The labels every object of one attempt carries (its pods, PDB, Services, Ingress), and which select it."""
    return {**identity_labels(installation), LABEL_JOB_ID: str(job_id), LABEL_ATTEMPT: str(attempt)}


def attempt_selector(job_id: int, attempt: int, installation: str = DEFAULT_INSTALLATION) -> str:
    return ",".join(f"{k}={v}" for k, v in attempt_labels(job_id, attempt, installation).items())


def attempt_base_name(job_id: int, attempt: int) -> str:
    """Name shared by an attempt's single pod and its PodDisruptionBudget."""
    return f"job-{job_id}-a{attempt}"


def pod_labels(podset: PodSet, index: int, *, cluster: str, installation: str = DEFAULT_INSTALLATION
               ) -> dict[str, str]:
    role, _ = podset.role_of(index)
    extra = {} if role is None else {LABEL_ROLE: label_value(role.name)}
    return extra | {
        **attempt_labels(podset.job_id, podset.attempt, installation),
        LABEL_POD_INDEX: str(index),
        LABEL_DEPARTMENT: label_value(podset.department),
        LABEL_TIER: label_value(podset.tier),
        LABEL_CLUSTER: label_value(cluster),
        LABEL_TASK_TYPE: label_value(podset.task_type),
        LABEL_URGENCY: label_value(podset.urgency),
    }


def service_name(podset: PodSet) -> str:
    """The headless Service of a gang's attempt, which is also its pods' DNS subdomain."""
    return attempt_base_name(podset.job_id, podset.attempt)


NOTICE_VOLUME = "portal-notice"


def notice_env(podset: PodSet) -> list[tuple[str, str]]:
    """A job that asked for notice before preemption: where the notice appears (``PORTAL_NOTICE_FILE``, empty
    until the portal sets the annotation), how much it asked for, and where and with what to answer
    "checkpoint written" (its attempt's own credential, valid for nothing else). A resizable job: where its size
    now appears (``PORTAL_SIZE_FILE``, rewritten at each resize)."""
    env = [("PORTAL_SIZE_FILE", SIZE_FILE)] if podset.max_pods is not None else []
    if not podset.notice_s:
        return env
    return env + [("PORTAL_NOTICE_FILE", NOTICE_FILE), ("PORTAL_NOTICE_S", str(podset.notice_s)),
                  ("PORTAL_NOTICE_ANSWER_URL", podset.notice_answer_url), ("PORTAL_JOB_TOKEN", podset.notice_token)]


def size_text(podset: PodSet) -> str:
    """What a resizable job's size file says at ``podset.pods`` pods: one JSON object."""
    out: dict[str, int] = {"pods": podset.pods, "world_size": podset.pods * max(1, podset.gpus_per_pod)}
    env = dict(resize_env(podset))
    if "PORTAL_PER_WORKER_BATCH" in env:
        out["per_worker_batch"] = int(env["PORTAL_PER_WORKER_BATCH"])
        out["grad_accum_steps"] = int(env["PORTAL_GRAD_ACCUM_STEPS"])
    return json.dumps(out, sort_keys=True)


def notice_volume(podset: PodSet) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The downward-API volume that shows the notice annotation (and a resizable job's size annotation) as
    files (a volume type the restricted Pod Security profile allows), mounted read-only: the kubelet rewrites
    a file when its annotation changes, while the container runs."""
    items = []
    if podset.notice_s:
        items.append({"path": NOTICE_FILE.rsplit("/", 1)[1],
                      "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.annotations['{NOTICE_ANNOTATION}']"}})
    if podset.max_pods is not None:
        items.append({"path": SIZE_FILE.rsplit("/", 1)[1],
                      "fieldRef": {"apiVersion": "v1", "fieldPath": f"metadata.annotations['{SIZE_ANNOTATION}']"}})
    if not items:
        return [], []
    return ([{"name": NOTICE_VOLUME, "downwardAPI": {"items": items, "defaultMode": 0o444}}],
            [{"name": NOTICE_VOLUME, "mountPath": NOTICE_DIR, "readOnly": True}])


def batch_split(global_batch: int, workers: int, max_workers: int) -> tuple[int, int]:
    """(per-worker batch, gradient-accumulation steps) that keep ``global_batch`` at ``workers`` workers: the
    fewest accumulation steps whose per-worker batch is at most the one at the largest size (``max_workers``:
    what a worker's memory was sized for) and divides the global batch exactly; when no split is exact, the
    per-worker batch stays within that bound and the global batch comes as near as it can below."""
    workers = max(1, workers)
    bound = -(-global_batch // max(1, max_workers))
    for accum in range(1, global_batch + 1):
        per, rest = divmod(global_batch, workers * accum)
        if per < 1:
            break
        if not rest and per <= bound:
            return per, accum
    accum = max(1, -(-global_batch // (workers * bound)))
    return max(1, global_batch // (workers * accum)), accum


def resize_env(podset: PodSet) -> list[tuple[str, str]]:
    """A resizable job's size range, for torchrun's ``--nnodes=MIN:MAX`` (``PORTAL_MIN_NODES``,
    ``PORTAL_MAX_NODES``), and with a declared global batch size the per-worker batch and accumulation steps
    that keep it at the attempt's size now (``PORTAL_GLOBAL_BATCH_SIZE``, ``PORTAL_PER_WORKER_BATCH``,
    ``PORTAL_GRAD_ACCUM_STEPS``; a worker is one GPU)."""
    if podset.min_pods is None or podset.max_pods is None:
        return []
    env = [("PORTAL_MIN_NODES", str(podset.min_pods)), ("PORTAL_MAX_NODES", str(podset.max_pods))]
    if podset.global_batch_size:
        g = max(1, podset.gpus_per_pod)
        per, accum = batch_split(podset.global_batch_size, podset.pods * g, podset.max_pods * g)
        env += [("PORTAL_GLOBAL_BATCH_SIZE", str(podset.global_batch_size)), ("PORTAL_PER_WORKER_BATCH", str(per)),
                ("PORTAL_GRAD_ACCUM_STEPS", str(accum))]
    return env


def rendezvous_env(podset: PodSet, index: int) -> list[tuple[str, str]]:
    """What torchrun, DeepSpeed and one-process-per-pod launchers read, for pod ``index`` of the attempt.

    Every pod: ``PORTAL_JOB_ID``, ``PORTAL_ATTEMPT``. A gang's pods also: ``MASTER_ADDR`` (pod 0 by its stable
    name in the Service's subdomain, resolvable in the namespace), ``MASTER_PORT``, ``WORLD_SIZE`` and ``RANK``
    (pods and this pod's index: right for one process per pod; torchrun overrides both in the workers it
    starts), ``NODE_RANK`` / ``PORTAL_NODE_RANK`` (the index), ``PORTAL_WORLD_SIZE`` (pods) and
    ``PORTAL_NPROC_PER_NODE`` (the pod's GPUs: torchrun's ``--nproc-per-node``). A task of a job array also
    gets ``PORTAL_ARRAY_ID``, ``PORTAL_ARRAY_INDEX`` and ``PORTAL_ARRAY_COUNT`` (docs/sweeps.md)."""
    env = [("PORTAL_JOB_ID", str(podset.job_id)), ("PORTAL_ATTEMPT", str(podset.attempt))]
    if podset.has_route:  # the path its route serves it under: an app that builds its own links needs it
        env += [("PORTAL_BASE_URL", f"/s/{podset.job_id}/"), ("PORTAL_PORT", str(podset.port))]
    if podset.array_id is not None:
        env += [("PORTAL_ARRAY_ID", str(podset.array_id)), ("PORTAL_ARRAY_INDEX", str(podset.array_index)),
                ("PORTAL_ARRAY_COUNT", str(podset.array_count))]
    env += resize_env(podset)
    if podset.pods < 2 and podset.max_pods is None:  # (a resizable job at one pod still rendezvouses)
        return env
    pods, rank, first, nproc = str(podset.pods), str(index), 0, podset.gpus_per_pod
    if podset.roles:
        role, in_role = podset.role_of(index)
        service = service_name(podset)
        env += [("PORTAL_ROLE", role.name), ("PORTAL_ROLE_RANK", str(in_role)), ("PORTAL_ROLE_SIZE", str(role.pods))]
        for other in podset.roles:
            start = podset.role_start(other.name)
            hosts = ",".join(f"{podset.pod_name(start + i)}.{service}" for i in range(other.pods))
            env.append((f"PORTAL_ROLE_{other.name.upper().replace('-', '_')}_HOSTS", hosts))
        trains = next((r for r in podset.roles if r.gpus_per_pod), None)
        if trains is None or role.name != trains.name:
            return env  # torchrun's environment is the training role's alone
        pods, rank, first, nproc = str(role.pods), str(in_role), podset.role_start(role.name), role.gpus_per_pod
    return env + [
        ("MASTER_ADDR", f"{podset.pod_name(first)}.{service_name(podset)}"),
        ("MASTER_PORT", str(RENDEZVOUS_PORT)),
        ("WORLD_SIZE", pods),
        ("RANK", rank),
        ("NODE_RANK", rank),
        ("PORTAL_WORLD_SIZE", pods),
        ("PORTAL_NODE_RANK", rank),
        ("PORTAL_NPROC_PER_NODE", str(max(1, int(nproc)))),
    ]


def service_manifest(podset: PodSet, installation: str = DEFAULT_INSTALLATION) -> dict[str, Any]:
    """The headless Service of a gang's attempt: no cluster IP (``clusterIP: None``), one DNS record per pod
    (``<pod>.<service>``, as the pods' ``hostname`` and ``subdomain`` say), published before the pods are ready
    so that the ranks find pod 0 while they start (rendezvous happens before any readiness)."""
    labels = attempt_labels(podset.job_id, podset.attempt, installation)
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": service_name(podset), "namespace": podset.namespace, "labels": dict(labels)},
        "spec": {
            "clusterIP": "None",
            "selector": dict(labels),
            "publishNotReadyAddresses": True,
            "ports": [{"name": "rendezvous", "port": RENDEZVOUS_PORT, "targetPort": RENDEZVOUS_PORT,
                       "protocol": "TCP"}],
        },
    }


def pod_annotations(podset: PodSet) -> dict[str, str]:
    annotations = {
        ANNOTATION_USER_TIER: podset.user_tier,
        ANNOTATION_BID: str(podset.bid),
        ANNOTATION_OWNER: podset.owner,
        ANNOTATION_JOB_NAME: podset.job_name,
        ANNOTATION_DEPARTMENT: podset.department,
    }
    if podset.deadline:
        annotations[ANNOTATION_DEADLINE] = podset.deadline
    if podset.checkpoint_interval_s:
        annotations[ANNOTATION_CHECKPOINT_INTERVAL] = str(podset.checkpoint_interval_s)
    if podset.max_pods is not None:  # a resizable job's size now (its size file; rewritten at each resize)
        annotations[SIZE_ANNOTATION] = size_text(podset)
    return annotations


def restricted_container_security_context(run_as_user: int | None) -> dict[str, Any]:
    ctx: dict[str, Any] = {
        "allowPrivilegeEscalation": False,
        "privileged": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "seccompProfile": {"type": "RuntimeDefault"},
    }
    if run_as_user is not None:
        ctx["runAsUser"] = run_as_user
    return ctx


def restricted_pod_security_context(run_as_user: int | None) -> dict[str, Any]:
    ctx: dict[str, Any] = {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    if run_as_user is not None:
        ctx.update(runAsUser=run_as_user, runAsGroup=run_as_user, fsGroup=run_as_user)
    return ctx


def node_affinity(node_labels: Iterable[tuple[str, str]]) -> dict[str, Any] | None:
    """Required node affinity on the flavor's labels: one term, ``key In [value]`` per label."""
    expressions = [{"key": k, "operator": "In", "values": [v]} for k, v in node_labels]
    if not expressions:
        return None
    return {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": expressions}]
            }
        }
    }


def resources(podset: PodSet) -> dict[str, dict[str, str]]:
    """Requests == limits for everything: GPUs must (extended resources), CPU/memory by choice (Guaranteed QoS,
    so the portal's accounting and the kubelet's agree)."""
    # A memory-backed /dev/shm is charged to the container's memory, so the pod asks for it on top.
    memory = int(podset.memory_mib) + int(podset.workload.shm_mb)
    amounts = {"cpu": f"{int(podset.cpu_millicores)}m", "memory": f"{memory}Mi"}
    if podset.gpus_per_pod and podset.sharing == "replicas":
        # time-slicing / MPS: replicas of the shared resource the device plugin advertises, no whole GPU
        amounts[podset.shared_resource] = str(int(podset.gpu_replicas))
    elif podset.gpus_per_pod:
        amounts[podset.gpu_resource] = str(int(podset.gpus_per_pod))
        if podset.sharing == "hami":  # one GPU, of which this much memory (MiB) and compute (per cent)
            amounts[HAMI_MEMORY] = str(int(podset.gpu_memory_mib))
            if podset.gpu_cores:
                amounts[HAMI_CORES] = str(int(podset.gpu_cores))
    return {"requests": dict(amounts), "limits": dict(amounts)}


def hami_device_uuids(pods: Iterable[Mapping[str, Any]]) -> dict[int, str]:
    """The engine's device index -> the GPU's UUID, from the portal's running fractional pods of one node: each
    carries the index the portal chose (``ANNOTATION_GPU_DEVICE``) and the device HAMi gave it
    (``hami.io/vgpu-devices-allocated``: ``GPU-<uuid>,NVIDIA,<MiB>,<cores>:;`` per container)."""
    out: dict[int, str] = {}
    for pod in pods:
        notes = (pod.get("metadata") or {}).get("annotations") or {}
        index, allocated = notes.get(ANNOTATION_GPU_DEVICE), notes.get(HAMI_ALLOCATED) or ""
        uuid = allocated.split(",", 1)[0].strip(":; ")
        if index is None or not uuid.startswith("GPU-"):
            continue
        try:
            out.setdefault(int(index), uuid)
        except ValueError:
            continue
    return out


def fraction_annotations(device: int, known: Mapping[int, str]) -> dict[str, str]:
    """How a fractional pod names its shared GPU to HAMi: the GPU already shared as ``device`` by its UUID
    (``nvidia.com/use-gpuuuid``); a GPU it opens by keeping off the node's other shared GPUs
    (``nvidia.com/nouse-gpuuuid``), so HAMi gives it one no fraction holds (a whole-GPU pod takes a GPU's memory
    in full: HAMi gives it none of those either)."""
    notes = {ANNOTATION_GPU_DEVICE: str(int(device))}
    if device in known:
        notes[HAMI_USE_UUID] = known[device]
    elif known:
        notes[HAMI_NOUSE_UUID] = ",".join(sorted(set(known.values())))
    return notes


def workload_volumes(workload: PodWorkload) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The pod's volumes and the main container's mounts: each data source as a ``persistentVolumeClaim`` of
    the namespace (the only way the restricted profile lets an NFS export or a shared dataset in), read-only
    unless the job writes to it, and /dev/shm as a memory-backed ``emptyDir`` of the job's size."""
    volumes: list[dict[str, Any]] = []
    mounts: list[dict[str, Any]] = []
    claimed: dict[tuple[str, bool], str] = {}
    for m in workload.mounts:
        # One volume per claim and mode: two mounts of one source share it (with different sub-paths).
        key = (m.claim_name, m.read_only)
        if key not in claimed:
            claimed[key] = m.volume
            claim: dict[str, Any] = {"claimName": m.claim_name}
            if m.read_only:
                claim["readOnly"] = True
            volumes.append({"name": m.volume, "persistentVolumeClaim": claim})
        mount: dict[str, Any] = {"name": claimed[key], "mountPath": m.path, "readOnly": m.read_only}
        if m.sub_path:
            mount["subPath"] = m.sub_path
        mounts.append(mount)
    if workload.shm_mb:
        volumes.append({"name": SHM_VOLUME, "emptyDir": {"medium": "Memory", "sizeLimit": f"{int(workload.shm_mb)}Mi"}})
        mounts.append({"name": SHM_VOLUME, "mountPath": SHM_PATH})
    return volumes, mounts


SECRET_FILE_MODE = 0o400  # read by the owner only; the kubelet adds group read for the pod's fsGroup


def secret_volume_name(index: int) -> str:
    return f"secret-{index}"


def apply_secrets(podset: PodSet, spec: dict[str, Any], container: dict[str, Any]) -> None:
    """The job's department secrets: env ``valueFrom.secretKeyRef``, each secret used as files a read-only
    ``secret`` volume (mode 0400; allowed by the restricted profile), and the department's image pull secrets.
    Only names and keys: the values never enter a pod spec."""
    secrets = podset.secrets
    container["env"] += [{"name": e.name, "valueFrom": {"secretKeyRef": {"name": e.secret, "key": e.key}}}
                         for e in secrets.env]
    volumes = [{"name": secret_volume_name(i),
                "secret": {"secretName": f.secret, "defaultMode": SECRET_FILE_MODE}} for i, f in enumerate(secrets.files)]
    if volumes:
        spec["volumes"] = [*spec.get("volumes", []), *volumes]
        container["volumeMounts"] = [*container.get("volumeMounts", []), *(
            {"name": secret_volume_name(i), "mountPath": f.path, "readOnly": True}
            for i, f in enumerate(secrets.files))]
    if secrets.image_pull:
        spec["imagePullSecrets"] = [{"name": n} for n in secrets.image_pull]


def validate_podset(podset: PodSet) -> None:
    """Refuse values the cluster would reject or that could smuggle anything into the spec."""
    problems = []
    if podset.pods < 1:
        problems.append("pods must be >= 1")
    if not isinstance(podset.gpus_per_pod, int) or podset.gpus_per_pod < 0:
        problems.append("gpus_per_pod must be a non-negative integer")
    if podset.gpus_per_pod and "/" not in podset.gpu_resource:
        problems.append(f"gpu_resource {podset.gpu_resource!r} is not an extended resource name")
    if podset.cpu_millicores <= 0 or podset.memory_mib <= 0:
        problems.append("cpu and memory must be positive")
    if not podset.image or any(c.isspace() for c in podset.image):
        problems.append("image is empty or contains whitespace")
    for name in [n for n, _ in podset.env] + [e.name for e in podset.secrets.env]:
        if not _ENV_NAME.match(name):
            problems.append(f"invalid environment variable name {name!r}")
    for f in podset.secrets.files:
        if not f.path.startswith("/"):
            problems.append(f"secret files need an absolute path, not {f.path!r}")
    if podset.kind in ("session", "service") and not (isinstance(podset.port, int) and 1 <= podset.port <= 65535):
        problems.append("a session or a service needs a container port from 1 to 65535")
    if podset.termination_grace_s < 0:
        problems.append("termination_grace_s must be >= 0")
    # (a resizable job's budget is checked against its largest size: at a smaller one it keeps at most all)
    if podset.pdb_min_available is not None and not (0 <= podset.pdb_min_available <= (podset.max_pods or podset.pods)):
        problems.append("pdb_min_available must be between 0 and pods")
    paths = [m.path for m in podset.workload.mounts]
    if len(set(paths)) != len(paths) or any(not p.startswith("/") or ".." in p.split("/") for p in paths):
        problems.append("mount paths must be absolute, without '..', and distinct")
    if any(".." in m.sub_path.split("/") or m.sub_path.startswith("/") for m in podset.workload.mounts):
        problems.append("sub-paths must be relative, without '..'")
    if problems:
        raise InvalidPodSpec("; ".join(problems))


def pod_manifest(
    podset: PodSet,
    index: int,
    *,
    cluster: str = "default",
    tolerations: Iterable[Mapping[str, Any]] = DEFAULT_TOLERATIONS,
    run_as_user: int | None = 1000,
    gate: str = ADMISSION_GATE,
    node: str | None = None,
    gated: bool = True, installation: str = DEFAULT_INSTALLATION,
) -> dict[str, Any]:
    """The pod ``index`` of ``podset``. ``node``: pinned to that node from the start (a ``matchFields
    metadata.name`` requirement in every affinity term), as the portal creates pods at admission; ``gated``:
    carrying the portal's scheduling gate (a gang's pods are created gated and ungated once all exist)."""
    whole, podset = podset, podset.for_pod(index)  # its role's image, command and size
    container: dict[str, Any] = {
        "name": MAIN_CONTAINER,
        "image": podset.image,
        # The platform's variables last: submit validation keeps a job's own env from naming them.
        "env": [{"name": k, "value": v} for k, v in (*podset.env, *podset.workload.env, *rendezvous_env(whole, index),
                                                    *notice_env(podset))],
        "resources": resources(podset),
        "securityContext": restricted_container_security_context(run_as_user),
        "terminationMessagePolicy": "FallbackToLogsOnError",
    }
    if podset.command:
        container["command"] = list(podset.command)
    if podset.has_route:  # what the route's Service targets, ready once the app answers its readiness path
        container["ports"] = [{"name": "http", "containerPort": int(podset.port), "protocol": "TCP"}]
        container["readinessProbe"] = {"httpGet": {"path": podset.readiness_path or "/", "port": int(podset.port)},
                                       "periodSeconds": 5, "failureThreshold": 3}
    volumes, volume_mounts = workload_volumes(podset.workload)
    told, told_mounts = notice_volume(podset)
    volumes, volume_mounts = volumes + told, volume_mounts + told_mounts
    if volume_mounts:
        container["volumeMounts"] = volume_mounts
    spec: dict[str, Any] = {
        "schedulingGates": [{"name": gate}] if gated else [],
        "priorityClassName": podset.priority_class,
        "restartPolicy": "Never",
        "terminationGracePeriodSeconds": int(podset.termination_grace_s),
        "automountServiceAccountToken": False,
        "enableServiceLinks": False,
        "hostNetwork": False,
        "hostPID": False,
        "hostIPC": False,
        "securityContext": restricted_pod_security_context(run_as_user),
        "tolerations": [dict(t) for t in tolerations],
        "containers": [container],
    }
    if volumes:
        spec["volumes"] = volumes
    if podset.pods > 1 or podset.max_pods is not None:  # a stable DNS name per pod, <pod>.<service>, through the
        # gang's headless Service (a resizable job's too, whatever its size now)
        spec["hostname"] = podset.pod_name(index)
        spec["subdomain"] = service_name(podset)
    apply_secrets(podset, spec, container)
    if podset.max_runtime_s and podset.max_runtime_s > 0:
        # The kubelet kills the pod (reason DeadlineExceeded) once it has run this long: a hard stop even if
        # the portal is down. Counted from the pod's start on the node, not from creation.
        spec["activeDeadlineSeconds"] = int(podset.max_runtime_s)
    affinity = node_affinity(podset.node_labels)
    if node is not None:
        requirement = {"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}
        if affinity is None:
            affinity = {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchFields": [requirement]}]}}}
        else:
            for term in affinity["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"]:
                term["matchFields"] = [requirement]
    if affinity:
        spec["affinity"] = affinity
    if not spec["schedulingGates"]:
        del spec["schedulingGates"]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": podset.pod_name(index),
            "namespace": podset.namespace,
            "labels": pod_labels(whole, index, cluster=cluster, installation=installation),
            "annotations": pod_annotations(podset),
        },
        "spec": spec,
    }


def pdb_min_available(podset: PodSet) -> int:
    """The job's own budget's ``minAvailable``: what it asked for, at most its size now when it is resizable
    (a budget above its pods would refuse every eviction, the portal's own shrink included)."""
    wanted = int(podset.pdb_min_available or 0)
    return min(wanted, podset.pods) if podset.max_pods is not None else wanted


def pdb_manifest(podset: PodSet, installation: str = DEFAULT_INSTALLATION) -> dict[str, Any]:
    name = attempt_base_name(podset.job_id, podset.attempt)
    labels = attempt_labels(podset.job_id, podset.attempt, installation)
    return {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": name, "namespace": podset.namespace, "labels": dict(labels)},
        "spec": {"minAvailable": pdb_min_available(podset), "selector": {"matchLabels": dict(labels)}},
    }


def is_ours(obj: Mapping[str, Any], *, installation: str | None = None, job_id: int | None = None,
            attempt: int | None = None) -> bool:
    """The object is the portal's (``installation``: this installation's; None for what installations share,
    such as the tiers' PriorityClasses), and of that job attempt when they are given."""
    labels = (obj.get("metadata") or {}).get("labels") or {}
    if labels.get(LABEL_MANAGED_BY) != MANAGED_BY:
        return False
    if installation is not None and labels.get(LABEL_INSTALLATION) != installation:
        return False
    if job_id is not None and labels.get(LABEL_JOB_ID) != str(job_id):
        return False
    return attempt is None or labels.get(LABEL_ATTEMPT) == str(attempt)


def admission_patch(pod: Mapping[str, Any], node: str, *, gate: str = ADMISSION_GATE,
                    annotations: Mapping[str, str] | None = None) -> list[dict[str, Any]]:
    """JSON patch (RFC 6902) that narrows a gated pod to ``node`` and removes the portal's gate.

    * ``replace /metadata/resourceVersion`` with the version we read: the API server then applies optimistic
      concurrency and answers 409 Conflict if the pod changed since (a stale read never wins).
    * every existing ``nodeSelectorTerm`` gets an extra ``matchFields metadata.name In [node]`` requirement:
      narrowing only (terms are ORed, so each must be narrowed), which Kubernetes allows while the pod is gated;
      no term -> the required affinity is created (allowed when it was empty).
    * ``test`` that the gate is at the index we remove, then ``remove`` it (the server re-checks, 422 if not).
    * ``annotations``: added (or replaced) with the same patch, before the gate goes: a fractional pod's shared
      GPU, which HAMi reads when it schedules the pod.
    Returns [] when the gate is already gone (nothing to do).
    """
    spec = pod.get("spec") or {}
    gates = spec.get("schedulingGates") or []
    names = [g.get("name") for g in gates]
    if gate not in names:
        return []
    index = names.index(gate)
    requirement = {"key": NODE_NAME_FIELD, "operator": "In", "values": [node]}
    ops: list[dict[str, Any]] = [
        {"op": "replace", "path": "/metadata/resourceVersion", "value": pod["metadata"]["resourceVersion"]}
    ]
    if annotations:
        if pod["metadata"].get("annotations") is None:
            ops.append({"op": "add", "path": "/metadata/annotations", "value": dict(annotations)})
        else:
            for key, value in sorted(annotations.items()):
                ops.append({"op": "add", "path": "/metadata/annotations/" + key.replace("~", "~0").replace("/", "~1"),
                            "value": value})
    affinity = spec.get("affinity")
    node_aff = (affinity or {}).get("nodeAffinity")
    required = (node_aff or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    terms = (required or {}).get("nodeSelectorTerms") or []
    fresh = {"nodeSelectorTerms": [{"matchFields": [requirement]}]}
    if affinity is None:
        ops.append({"op": "add", "path": "/spec/affinity",
                    "value": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": fresh}}})
    elif node_aff is None:
        ops.append({"op": "add", "path": "/spec/affinity/nodeAffinity",
                    "value": {"requiredDuringSchedulingIgnoredDuringExecution": fresh}})
    elif not terms:
        ops.append({"op": "add", "path": "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution",
                    "value": fresh})
    else:
        base = "/spec/affinity/nodeAffinity/requiredDuringSchedulingIgnoredDuringExecution/nodeSelectorTerms"
        for t, term in enumerate(terms):
            fields = term.get("matchFields") or []
            if requirement in fields:
                continue
            if fields:
                ops.append({"op": "add", "path": f"{base}/{t}/matchFields/-", "value": requirement})
            else:
                ops.append({"op": "add", "path": f"{base}/{t}/matchFields", "value": [requirement]})
    ops.append({"op": "test", "path": f"/spec/schedulingGates/{index}", "value": gates[index]})
    ops.append({"op": "remove", "path": f"/spec/schedulingGates/{index}"})
    return ops


def ungate_patch(gate: str = ADMISSION_GATE) -> list[dict[str, Any]]:
    """JSON patch removing the portal's gate from a pod created with it as its only gate (and already pinned
    to its node): no read needed, the ``test`` op makes the API server refuse (422) if the pod is not as
    created, and the caller then re-reads."""
    return [{"op": "test", "path": "/spec/schedulingGates/0", "value": {"name": gate}},
            {"op": "remove", "path": "/spec/schedulingGates/0"}]


def pinned_nodes(pod: Mapping[str, Any]) -> set[str]:
    """Nodes a pod's required affinity already pins it to via ``matchFields metadata.name`` (any term)."""
    spec = pod.get("spec") or {}
    required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    pinned: set[str] = set()
    for term in required.get("nodeSelectorTerms") or []:
        for req in term.get("matchFields") or []:
            if req.get("key") == NODE_NAME_FIELD and req.get("operator") == "In":
                pinned.update(req.get("values") or [])
    return pinned


LABEL_COMPONENT = "app.kubernetes.io/component"
CLEANUP_COMPONENT = "checkpoint-cleanup"
CLEANUP_MOUNT = "/volume"


def checkpoint_cleanup_name(job_id: int) -> str:
    return f"checkpoint-cleanup-job-{int(job_id)}"


def checkpoint_cleanup_manifest(*, namespace: str, claim_name: str, sub_path: str, job_id: int, image: str,
                                run_as_user: int | None = 1000) -> dict[str, Any]:
    """A small restricted pod that deletes one expired checkpoint directory on the claim, then exits. Not
    labelled as the portal's job pods (it is not a job's attempt); named after the job, so a retried create is
    harmless. ``sub_path`` is the validated relative path (no "..")."""
    if not sub_path or sub_path.startswith("/") or ".." in sub_path.split("/"):
        raise InvalidPodSpec(f"refusing to clean up checkpoint path {sub_path!r}")
    amounts = {"cpu": "100m", "memory": "64Mi"}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": checkpoint_cleanup_name(job_id),
            "namespace": namespace,
            "labels": {LABEL_COMPONENT: CLEANUP_COMPONENT, LABEL_JOB_ID: str(int(job_id))},
        },
        "spec": {
            "restartPolicy": "Never",
            "activeDeadlineSeconds": 600,
            "automountServiceAccountToken": False,
            "enableServiceLinks": False,
            "securityContext": restricted_pod_security_context(run_as_user),
            "containers": [{
                "name": "cleanup",
                "image": image,
                "command": ["rm", "-rf", "--", f"{CLEANUP_MOUNT}/{sub_path}"],
                "resources": {"requests": dict(amounts), "limits": dict(amounts)},
                "securityContext": restricted_container_security_context(run_as_user),
                "volumeMounts": [{"name": "data", "mountPath": CLEANUP_MOUNT}],
            }],
            "volumes": [{"name": "data", "persistentVolumeClaim": {"claimName": claim_name}}],
        },
    }
