"""A job's data sources, checkpoint directory and /dev/shm as its pods get them (the workloads app resolves
them for the cluster of the attempt), and the retention of checkpoint directories."""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.utils import timezone

from scheduling.backends import get_backend
from scheduling.models import FINAL_STATES, Job
from scheduling.services.jobs import namespace_for
from workloads.models import CheckpointDir
from workloads.services.resolve import checkpoint_of, pod_workload
from workloads.values import PodWorkload

log = logging.getLogger(__name__)


def job_workload(job: Job, cluster_name: str) -> PodWorkload:
    if not job.mounts and not job.checkpoint and not job.shm_mb:
        return PodWorkload()
    return pod_workload(job_id=job.pk, department_id=job.department_id, cluster_name=cluster_name,
                        mounts=job.mounts or [], shm_mb=job.shm_mb,
                        checkpoint=checkpoint_of(job.pk) if job.checkpoint else None)


def readable_checkpoint(job: Job) -> tuple[Path | None, str]:
    """Where this process can read ``job``'s checkpoint directory, or (None, why not); (None, "") for a job
    without one. The simulated cluster's are local directories; a Kubernetes cluster's only where the portal's
    workers mount the source (CHECKPOINT_READ_MOUNTS)."""
    row = checkpoint_of(job.pk)
    if row is None:
        return None, ""
    if row.deleted_at is not None or row.source is None:
        return None, "its checkpoint directory was deleted"
    cluster = row.source.cluster
    storage = f"{cluster.name}/{row.source.name}"
    try:
        path = get_backend(cluster).readable_dir(storage=storage, sub_path=row.sub_path)
    except Exception as exc:  # noqa: BLE001 - a cluster the portal cannot reach is a reason, never a crash
        return None, f"cluster {cluster.name} is unavailable ({type(exc).__name__})"
    if path is None:
        return None, (f"the portal does not mount data source {row.source.name} of cluster {cluster.name} "
                      f"(CHECKPOINT_READ_MOUNTS)")
    return path, ""


def expired_checkpoints(now: datetime | None = None):
    """Checkpoint directories still kept whose job ended more than CHECKPOINT_RETENTION_DAYS ago."""
    cutoff = (now or timezone.now()) - timedelta(days=settings.CHECKPOINT_RETENTION_DAYS)
    return (CheckpointDir.objects.filter(deleted_at__isnull=True, source__isnull=False,
                                         job__state__in=FINAL_STATES, job__finished_at__lt=cutoff)
            .select_related("source__cluster", "job__department").order_by("pk"))


def delete_expired_checkpoints(*, now: datetime | None = None, limit: int = 200) -> int:
    """Ask each expired directory's cluster to delete it, and mark it deleted once the cluster took the
    request (a failure is kept on the row and tried again next run). Returns how many were deleted."""
    done = 0
    for row in expired_checkpoints(now)[:limit]:
        cluster = row.source.cluster
        try:
            get_backend(cluster).delete_checkpoint(
                namespace=namespace_for(row.job.department.slug, cluster), claim_name=row.source.claim_name,
                storage=f"{cluster.name}/{row.source.name}", sub_path=row.sub_path, job_id=row.job_id)
        except Exception as exc:  # one cluster's failure must not stop the others; kept for the admin
            log.warning("checkpoint %s of job %s not deleted: %s", row.sub_path, row.job_id, exc)
            CheckpointDir.objects.filter(pk=row.pk).update(delete_error=str(exc)[:300])
            continue
        CheckpointDir.objects.filter(pk=row.pk, deleted_at__isnull=True).update(deleted_at=timezone.now(),
                                                                                delete_error="")
        done += 1
    return done

