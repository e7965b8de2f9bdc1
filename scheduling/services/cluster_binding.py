"""Which cluster a job's attempt is bound to, the one cluster row a task names, and which pods there are the
job's."""

from __future__ import annotations

import logging
from collections.abc import Iterable

from django.conf import settings
from django.db.models import Q

from portal import dispatch
from portal.models import Department
from scheduling.backends.base import PodState
from scheduling.models import Cluster, Job
from scheduling.services import run_cache
from scheduling.services.jobs import namespace_for

log = logging.getLogger(__name__)


def default_cluster() -> Cluster:
    """The default cluster's row (made on first use); read once per pod-worker task run (``run_cache``)."""
    return run_cache.cached("default_cluster", _default_cluster)


def _default_cluster() -> Cluster:
    cluster = Cluster.objects.filter(is_default=True).first()
    if cluster is None:
        cluster, _ = Cluster.objects.get_or_create(
            name="default", defaults={"is_default": True, "backend": settings.SCHEDULING_BACKEND}
        )
    return cluster


def cluster_of(job: Job) -> Cluster:
    """The cluster of the job's current attempt (a job admitted before clusters were recorded, or a queued one
    whose pods are made at submission, is on the default cluster)."""
    return job.cluster if job.cluster_id else default_cluster()


def bound_to(jobs, cluster: Cluster):
    """The jobs (a queryset) whose current attempt is bound to ``cluster``."""
    if cluster.is_default:
        return jobs.filter(Q(cluster=cluster) | Q(cluster__isnull=True))
    return jobs.filter(cluster=cluster)


def federated() -> bool:
    """More than one cluster is registered: a queued job's cluster is not known until it is admitted, so no
    backend creates its pods before then (they are created on the chosen cluster at admission)."""
    return Cluster.objects.count() > 1


def cluster_row(cluster_id: int | None) -> Cluster | None:
    """The cluster a task names (None: the default one); None when it was removed since."""
    if cluster_id is None:
        return default_cluster()
    return Cluster.objects.filter(pk=cluster_id).first()


def send_per_cluster(task_name: str) -> dict:
    """One message per cluster, so each cluster's work runs (and times out) on its own: a cluster that is down
    or slow holds up no other's. A publish that fails for one cluster is logged; the next beat sends it again."""
    sent: dict[str, str] = {}
    for cluster_id, name in Cluster.objects.order_by("name").values_list("pk", "name") or []:
        try:
            dispatch.send_now(task_name, cluster_id)
            sent[name] = "sent"
        except Exception:  # noqa: BLE001 - one cluster's failure must not stop the others' messages
            log.exception("%s for cluster %s could not be run", task_name, name)
            sent[name] = "failed"
    if not sent:  # no cluster row yet: the default one is made on first use
        dispatch.send_now(task_name, default_cluster().pk)
    return sent


def portal_namespaces(cluster: Cluster) -> frozenset[str]:
    """The namespaces of the portal's departments on ``cluster`` (archived ones too: their pods may still be
    there). A pod anywhere else is never the portal's, whatever its labels say."""
    return frozenset(namespace_for(slug, cluster) for slug in Department.objects.values_list("slug", flat=True))


def owned_pods(job: Job, pods: Iterable[PodState], cluster: Cluster) -> list[PodState]:
    """The pods that are the job's current attempt's: of that attempt and in the job's own namespace on
    ``cluster`` (the one it is bound to). A look-alike elsewhere (same labels, another namespace) is ignored:
    whoever may create pods there must not fail, requeue or fake-start the job."""
    namespace = namespace_for(job.department.slug, cluster)
    return [p for p in pods if p.attempt == job.attempt and p.namespace == namespace]
