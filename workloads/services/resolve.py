"""From what a job stored at submission to what its pods get: the clusters that have its sources (a dispatch
constraint for the scheduler), its checkpoint directory, and the ``PodWorkload`` a backend renders."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import Any

from workloads.models import CheckpointDir, DataSource
from workloads.services.requests import checkpoint_sub_path
from workloads.values import CHECKPOINT_ENV, Mount, PodWorkload


class SourceUnavailable(Exception):
    """A source a job mounts is not (or no longer) declared on the cluster its attempt was placed on."""


def create_checkpoint_dirs(jobs: Iterable[Any]) -> None:
    """The checkpoint directory row of every new job (saved, with ``checkpoint``) that asked for one."""
    jobs = [job for job in jobs if job.checkpoint]
    if not jobs:
        return
    sources = {s.pk: s for s in DataSource.objects.filter(pk__in={job.checkpoint["source_id"] for job in jobs})}
    CheckpointDir.objects.bulk_create([
        CheckpointDir(job_id=job.pk, source=sources[job.checkpoint["source_id"]], mount_path=job.checkpoint["path"],
                      sub_path=checkpoint_sub_path(sources[job.checkpoint["source_id"]], job.pk))
        for job in jobs])


def source_clusters(requests: Iterable[tuple[int, int, list, dict]]) -> dict[int, tuple[tuple[str, tuple[str, ...]], ...]]:
    """For each ``(job_id, department_id, mounts, checkpoint)``: every source the job needs, with the clusters
    where its department may mount it as asked (writable where the job writes). A checkpoint's source counts
    on its own cluster only: every attempt must see the same directory. One query whatever the number of jobs."""
    requests = [r for r in requests if r[2] or r[3]]
    if not requests:
        return {}
    names = {m["source"] for _, _, mounts, _ in requests for m in mounts}
    rows = list(DataSource.objects.filter(name__in=names).values_list(
        "pk", "name", "cluster__name", "department_id", "shared_with_all", "writable")) if names else []
    shared: dict[int, set[int]] = defaultdict(set)
    for source_id, dept in DataSource.shared_with.through.objects.filter(
            datasource_id__in=[r[0] for r in rows]).values_list("datasource_id", "department_id"):
        shared[source_id].add(dept)
    by_name: dict[str, list[tuple]] = defaultdict(list)
    for row in rows:
        by_name[row[1]].append(row)
    out: dict[int, tuple[tuple[str, tuple[str, ...]], ...]] = {}
    for job_id, dept, mounts, checkpoint in requests:
        needs: dict[str, set[str]] = {}
        for m in mounts:
            write = not m.get("read_only", True)
            clusters = {cluster for pk, _, cluster, owner, everyone, writable in by_name.get(m["source"], ())
                        if (owner == dept or everyone or dept in shared[pk]) and (writable or not write)}
            needs[m["source"]] = needs[m["source"]] & clusters if m["source"] in needs else clusters
        if checkpoint:
            key = f"checkpoint:{checkpoint['source']}"
            needs[key] = {checkpoint["cluster"]}
        out[job_id] = tuple(sorted((name, tuple(sorted(c))) for name, c in needs.items()))
    return out


def pod_workload(*, job_id: int, department_id: int, cluster_name: str, mounts: list[dict], shm_mb: int,
                 checkpoint: CheckpointDir | None) -> PodWorkload:
    """The volumes, mounts and environment of one attempt of a job on ``cluster_name``."""
    names = {m["source"] for m in mounts}
    sources = {s.name: s for s in DataSource.objects.usable_by(department_id).filter(
        name__in=names, cluster__name=cluster_name)} if names else {}
    out: list[Mount] = []
    for i, m in enumerate(mounts):
        source = sources.get(m["source"])
        read_only = m.get("read_only", True)
        if source is None or (not read_only and not source.writable):
            raise SourceUnavailable(f"data source {m['source']!r} is not available for job {job_id} on cluster "
                                    f"{cluster_name!r}")
        out.append(Mount(source=source.name, volume=f"data-{i}", claim_name=source.claim_name, path=m["path"],
                         sub_path=source.sub_path, read_only=read_only, storage=f"{cluster_name}/{source.name}"))
    env: list[tuple[str, str]] = []
    if checkpoint is not None:
        source = checkpoint.source
        out.append(Mount(source=source.name, volume="checkpoint", claim_name=source.claim_name,
                         path=checkpoint.mount_path, sub_path=checkpoint.sub_path, read_only=False,
                         storage=f"{source.cluster.name}/{source.name}", checkpoint=True))
        env.append((CHECKPOINT_ENV, checkpoint.mount_path))
    return PodWorkload(mounts=tuple(out), env=tuple(env), shm_mb=shm_mb)


def checkpoint_of(job_id: int) -> CheckpointDir | None:
    return CheckpointDir.objects.select_related("source__cluster").filter(job_id=job_id).first()
