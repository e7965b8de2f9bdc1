"""A cluster's inventory: one read of its nodes and of the portal's pods, stored and applied to the jobs bound
to it; whether the cluster answers (reachable or not, on the jobs running there too); a draining cluster
cordoned once its work is done; and the per-cluster lock every sync and reconcile runs under."""

from __future__ import annotations

import logging
from collections import defaultdict
from collections.abc import Callable, Iterable

from django.db import transaction
from django.utils import timezone

from engine import reasons
from portal import dispatch
from portal.audit import audit
from quotas.models import Flavor
from scheduling.backends import get_backend
from scheduling.backends.base import ClusterBackend, ClusterUnavailable, Inventory, PodState
from scheduling.models import Cluster, ClusterState, Job, JobState, Node
from scheduling.services.cluster_binding import bound_to, cluster_row, default_cluster, portal_namespaces
from scheduling.services.jobs import record_event
from scheduling.services.locks import exclusive
from scheduling.services.namespace_quotas import recheck_quota_refusals
from scheduling.services.pod_states import apply_pod_states, podless

log = logging.getLogger(__name__)


def sync_cluster(*, cluster: Cluster | None = None) -> dict[str, int]:
    """Read one cluster once (nodes + the portal's pods), store its nodes, and move the jobs bound to it from
    their pods. Every cluster is synced on its own (``scheduling.cycle.sync_one``): one that is down or slow
    marks itself unreachable and holds up no other."""
    cluster = cluster or default_cluster()
    # (read before the pods: a job that is not active yet when they are listed may have pods left out)
    listed = {(j.pk, j.attempt) for j in podless(cluster)}
    read = read_inventory(cluster, sync=True)
    if read is None:
        return {"unreachable": 1}
    backend, inv = read
    mark_reachable(cluster=cluster)
    if backend.owns_inventory:
        store_nodes(cluster=cluster, inventory=inv, terminating=_terminating_gpus(inv.pods))
    counts = apply_pod_states(inv.pods, complete=True, cluster=cluster, listed=listed)
    if recheck_quota_refusals(cluster=cluster, backend=backend):
        counts["quota_refusals_cleared"] = 1
    if drain_finished(cluster=cluster):
        counts["drained"] = 1
    return counts


def read_inventory(cluster: Cluster, *, sync: bool = False) -> tuple[ClusterBackend, Inventory] | None:
    """The cluster's backend and one read of its inventory (the portal's pods: this installation's, in the
    portal's namespaces; ``sync``: at least those of its active jobs, ``ClusterBackend.sync_inventory``);
    None (and the cluster marked unreachable) when it does not answer."""
    try:
        backend = get_backend(cluster)
        read = backend.sync_inventory if sync else backend.inventory
        return backend, read(namespaces=portal_namespaces(cluster))
    except ClusterUnavailable as exc:
        mark_unreachable(cluster=cluster, error=str(exc))
        return None


def _unreachable_message(cluster: Cluster) -> str:
    return (f"cluster {cluster.name} is unreachable: the job's pods there are left as they are (never started "
            "elsewhere) until it answers again")


def mark_unreachable(*, cluster: Cluster, error: str) -> int:
    """The cluster's API did not answer: say so on the cluster and on every job running there (once per
    outage, on its timeline too). Its running jobs are not requeued: their pods may still run, and starting
    them elsewhere would run the work twice. Returns how many jobs were marked."""
    Cluster.objects.filter(pk=cluster.pk).update(reachable=False, last_error=error[:2000])
    log.warning("cluster %s unreachable: %s", cluster.name, error[:300])
    message = _unreachable_message(cluster)
    marked = 0
    active = bound_to(Job.objects.filter(state__in=(JobState.ADMITTED, JobState.RUNNING)), cluster)
    for job in active.exclude(reason_code=reasons.CLUSTER_UNREACHABLE).select_related("department", "flavor",
                                                                                     "owner"):
        if Job.objects.filter(pk=job.pk, attempt=job.attempt, state=job.state).exclude(
                reason_code=reasons.CLUSTER_UNREACHABLE).update(reason_code=reasons.CLUSTER_UNREACHABLE,
                                                                reason_message=message[:300]):
            record_event(job=job, kind="note", reason_code=reasons.CLUSTER_UNREACHABLE, message=message,
                         data={"cluster": cluster.name})
            marked += 1
    return marked


def mark_reachable(*, cluster: Cluster) -> None:
    """The cluster answered: clear its error, and the unreachable reason of the jobs running there."""
    Cluster.objects.filter(pk=cluster.pk).update(reachable=True, last_error="", last_sync_at=timezone.now())
    active = bound_to(Job.objects.filter(state__in=(JobState.ADMITTED, JobState.RUNNING),
                                         reason_code=reasons.CLUSTER_UNREACHABLE), cluster)
    for job in active.select_related("department", "flavor", "owner"):
        message = f"cluster {cluster.name} answers again"
        if Job.objects.filter(pk=job.pk, attempt=job.attempt, reason_code=reasons.CLUSTER_UNREACHABLE).update(
                reason_code=job.state, reason_message=message):
            record_event(job=job, kind="note", reason_code="cluster_reachable", message=message,
                         data={"cluster": cluster.name})


def drain_finished(*, cluster: Cluster) -> bool:
    """A draining cluster on which no job of the portal is active any more becomes cordoned (audited): its
    running work has finished or moved, and it still takes no new admissions."""
    if cluster.state != ClusterState.DRAINING:
        return False
    if bound_to(Job.objects.filter(state__in=(JobState.ADMITTED, JobState.RUNNING)), cluster).exists():
        return False
    with transaction.atomic():
        if not Cluster.objects.filter(pk=cluster.pk, state=ClusterState.DRAINING).update(
                state=ClusterState.CORDONED):
            return False
        audit(actor=None, action="cluster.update", obj=cluster, old={"state": ClusterState.DRAINING},
              new={"state": ClusterState.CORDONED}, comment="drained: no job of the portal runs there any more")
    cluster.state = ClusterState.CORDONED
    return True


def _terminating_gpus(pods: Iterable[PodState]) -> dict[tuple[str, str], int]:
    """GPUs still held, per (node, resource), by the portal's pods that no active job attempt accounts for: a
    cancelled or requeued attempt's pods keep their GPUs while they terminate (up to their grace period), and
    kube-scheduler places nothing into them until they are gone. An active attempt's pods (a victim being
    evicted) are counted through its job's placement already."""
    now = timezone.now().timestamp()
    holding = [p for p in pods if p.deleting and p.node and p.gpus and p.holds_node(now)]
    if not holding:
        return {}
    live = set(Job.objects.filter(pk__in={p.job_id for p in holding},
                                  state__in=(JobState.ADMITTED, JobState.RUNNING)).values_list("pk", "attempt"))
    out: dict[tuple[str, str], int] = defaultdict(int)
    for p in holding:
        if (p.job_id, p.attempt) not in live:
            out[(p.node, p.gpu_resource)] += p.gpus
    return dict(out)


def store_nodes(*, cluster: Cluster, inventory: Inventory, terminating: dict[tuple[str, str], int] | None = None
                ) -> None:
    """Store the cluster's nodes. ``terminating``: GPUs per (node, resource) that terminating pods of the
    portal's no-longer-active attempts still hold, counted as used by others until those pods are gone."""
    terminating = terminating or {}
    flavors = {f.name: f for f in Flavor.objects.all()}
    seen = set()
    with transaction.atomic():
        existing = {(n.name, n.flavor.name): n for n in Node.objects.filter(cluster=cluster).select_related("flavor")}
        for cn in inventory.nodes:
            flavor = flavors.get(cn.flavor)
            if flavor is None:
                continue
            seen.add((cn.name, cn.flavor))
            used = min(cn.gpus, cn.used_by_others + terminating.get((cn.name, flavor.resource_name), 0))
            values = {"gpus": cn.gpus, "used_by_others": used, "labels": dict(cn.labels),
                      "taints": list(cn.taints), "schedulable": cn.schedulable, "cpu_millicores": cn.cpu_m,
                      "memory_mib": cn.memory_mib}
            row = existing.get((cn.name, cn.flavor))
            if row is None:
                Node.objects.create(cluster=cluster, name=cn.name, flavor=flavor, **values)
            elif any(getattr(row, k) != v for k, v in values.items()):
                Node.objects.filter(pk=row.pk).update(**values)
        gone = [n.pk for key, n in existing.items() if key not in seen]
        if gone:
            Node.objects.filter(pk__in=gone).delete()


def sync_one(*, cluster_id: int | None) -> dict:
    """Sync one cluster, under that cluster's own lock (two syncs of one cluster never overlap; syncs of
    different clusters run side by side)."""
    return under_cluster_lock(cluster_id, "cluster-sync", sync_cluster)


def under_cluster_lock(cluster_id: int | None, lock: str, run: Callable[..., dict[str, int]]) -> dict:
    """``run(cluster=...)`` for one cluster, under that cluster's own lock named ``lock`` (the sync's and the
    reconciler's): ``{"gone": 1}`` for a cluster deleted meanwhile, ``{"skipped": 1}`` when another holds it."""
    cluster = cluster_row(cluster_id)
    if cluster is None:
        return {"gone": 1}
    # One message per task for the run's per-job transactions (a notification, a log to keep), not one each.
    with dispatch.coalesced(), exclusive(f"{lock}-{cluster.name}") as acquired:
        if not acquired:
            return {"skipped": 1}
        return run(cluster=cluster)
