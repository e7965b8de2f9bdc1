"""What a job runs as on a cluster: the PodSet the backends create its pods from, and the tiers'
PriorityClasses every cluster must have."""

from __future__ import annotations

import logging

from django.conf import settings

from engine import tiers
from quotas.models import FlavorKind
from scheduling.backends import get_backend
from scheduling.backends.base import ClusterUnavailable, PodRole, PodSet
from scheduling.models import Cluster, FailurePolicy, Job, Node
from scheduling.services import notice, run_cache
from scheduling.services.cluster_binding import cluster_of, default_cluster
from scheduling.services.jobs import namespace_for
from scheduling.services.policy import current_policy
from scheduling.services.workload import job_workload
from workloads.services import secrets as workload_secrets

log = logging.getLogger(__name__)


def podset_for(job: Job) -> PodSet:
    policy, _ = current_policy()
    cluster = cluster_of(job)
    roles = pod_roles(job)
    return PodSet(
        job_id=job.pk,
        attempt=job.attempt,
        namespace=namespace_for(job.department.slug, cluster),
        department=job.department.slug,
        job_name=job.name,
        owner=job.owner.get_username(),
        image=job.image,
        command=tuple(job.command),
        env=tuple(sorted((str(k), str(v)) for k, v in (job.env or {}).items())),
        pods=job.all_pods,
        gpus_per_pod=job.gpus_per_pod,
        gpu_resource=job.flavor.resource_name,
        node_labels=tuple(sorted((str(k), str(v)) for k, v in (job.flavor.node_labels or {}).items())),
        cpu_millicores=job.cpu_millicores,
        memory_mib=job.memory_mib,
        tier=job.tier,
        priority_class=policy.priority_classes.get(job.tier) or tiers.BY_NAME[job.tier].priority_class,
        urgency=job.urgency,
        task_type=job.task_type,
        user_tier=job.user_tier,
        deadline=job.deadline.isoformat() if job.deadline else None,
        bid=job.bid,
        max_runtime_s=job.max_runtime_s,
        termination_grace_s=job.termination_grace_s,
        checkpoint_interval_s=job.checkpoint_interval_s,
        pdb_min_available=job.pdb_min_available,
        cluster=cluster.name,
        workload=job_workload(job, cluster.name),
        secrets=workload_secrets.resolve(department_id=job.department_id, uses=job.secrets or [],
                                         department_rows=run_cache.peek(department_secrets_key(job.department_id))),
        kind=job.kind,
        port=job.port,
        readiness_path=job.readiness_path or "/",
        notice_s=job.notice_s,
        notice_answer_url=f"{settings.PORTAL_URL}/api/v1/jobs/{job.pk}/checkpoint-written" if job.notice_s else "",
        notice_token=notice.attempt_token(job.pk, job.attempt) if job.notice_s else "",
        array_id=job.array_id,
        array_index=job.array_index,
        array_count=job.array.size if job.array_id else None,
        roles=roles,
        **fraction_fields(job),
        min_pods=job.min_pods,
        max_pods=job.pods if job.min_pods is not None else None,
        global_batch_size=job.global_batch_size,
        on_gpu_nodes=cpu_pods_on_gpu_nodes(job, cluster, roles),
    )


def cpu_pods_on_gpu_nodes(job: Job, cluster: Cluster, roles: tuple[PodRole, ...]) -> tuple[int, ...]:
    """The indices of the job's CPU pods placed on GPU nodes (one query, none unless the cluster lends its GPU
    nodes to CPU work and the job has CPU pods placed)."""
    if cluster.cpu_on_gpu_nodes_id is None or not job.placement:
        return ()
    if roles:
        cpu = [i for i, r in enumerate(r for r in roles for _ in range(r.pods)) if r.gpus_per_pod == 0]
    else:
        cpu = list(range(job.all_pods)) if job.gpus_per_pod == 0 else []
    cpu = [i for i in cpu if i < len(job.placement)]
    if not cpu:
        return ()
    gpu_nodes = set(Node.objects.filter(cluster=cluster, name__in={job.placement[i] for i in cpu})
                    .exclude(flavor__kind=FlavorKind.CPU).values_list("name", flat=True))
    return tuple(i for i in cpu if job.placement[i] in gpu_nodes)


def fraction_fields(job: Job) -> dict:
    """A fractional job's pod set fields (docs/fractions.md); none for whole GPUs."""
    if not job.share_milli:
        return {}
    return {"sharing": job.flavor.sharing, "gpu_memory_mib": job.gpu_memory_mib, "gpu_cores": job.gpu_cores,
            "gpu_replicas": job.gpu_replicas, "shared_resource": job.flavor.shared_resource_name,
            "gpu_devices": tuple(job.gpu_devices or ())}


def pod_roles(job: Job) -> tuple[PodRole, ...]:
    """The roles of a job of several, as its pods are made (one query; none for a job of one role). A CPU-only
    job of one role is made from its own columns: its flavor is the CPU pool, whose labels place it."""
    if job.role_count < 2:
        return ()
    return tuple(
        PodRole(name=r.name, pods=r.pods, image=r.image, command=tuple(r.command or ()), gpus_per_pod=r.gpus_per_pod,
                cpu_millicores=r.cpu_millicores, memory_mib=r.memory_mib, shm_mb=r.shm_mb,
                node_labels=tuple(sorted((str(k), str(v)) for k, v in ((r.flavor or job.flavor).node_labels or {}).items())),
                restart_pod=r.failure_policy == FailurePolicy.RESTART_POD)
        for r in job.roles.select_related("flavor").order_by("index"))


def department_secrets_key(department_id: int) -> str:
    """Where a pod-worker run keeps every secret of a department, read once for all of a message's jobs."""
    return f"department_secrets:{department_id}"


def ensure_priority_classes() -> list[str]:
    policy, _ = current_policy()
    # the policy may rename a tier's class, never its value (the tier table's)
    classes = {policy.priority_classes.get(t.name, t.priority_class): t.priority_value for t in tiers.TABLE}
    changed: list[str] = []
    for cluster in Cluster.objects.all() or [default_cluster()]:
        try:
            changed += get_backend(cluster).ensure_priority_classes(classes)
        except ClusterUnavailable as exc:  # one cluster down must not keep the others' classes from being made
            log.warning("cluster %s: PriorityClasses not ensured (%s)", cluster.name, exc)
    return changed
