"""Clusters and their node groups, as platform admins declare them (audited).

A node group is a set of identical nodes: ``<group>-0`` .. ``<group>-<n-1>``, each with ``gpus_per_node``
GPUs of one flavor, labelled ``NODE_GROUP_LABEL: <group>``. Where the portal owns the inventory (the
simulated backend) the Node rows *are* the cluster, so declaring a group creates, resizes or removes them.
Where the cluster reports its own nodes (Kubernetes: ``sync_cluster`` stores what the API server lists and
deletes what it no longer lists), a declared node would be overwritten at the next sync, so node groups are
refused there: add nodes to the cluster and the sync brings them in.

Invariants: a node that an admitted or running job is placed on is never removed; every change writes one
audit entry in the same transaction.
"""

from __future__ import annotations

import re

from django.db import IntegrityError, transaction
from django.db.models import ProtectedError

from portal.audit import audit
from portal.errors import Conflict, ValidationFailed
from quotas.models import Flavor
from scheduling.backends import owns_inventory
from scheduling.models import ACTIVE_STATES, Cluster, Job, Node

NODE_GROUP_LABEL = "portal.node-group"
BACKENDS = ("simulated", "kubernetes")
CLUSTER_FIELDS = ("backend", "is_default")


def _error(field: str, message: str, code: str = "invalid") -> ValidationFailed:
    return ValidationFailed(fields={field: [{"code": code, "message": message}]})


def cluster_create(*, actor, name: str, backend: str = "simulated", is_default: bool = False) -> Cluster:
    if backend not in BACKENDS:
        raise _error("backend", f"Choose one of {', '.join(BACKENDS)}.", "invalid_choice")
    with transaction.atomic():
        if Cluster.objects.filter(name=name).exists():
            raise _error("name", f"A cluster named {name} exists already.", "unique")
        if is_default:
            Cluster.objects.filter(is_default=True).update(is_default=False)
        cluster = Cluster.objects.create(name=name, backend=backend, is_default=is_default)
        audit(actor=actor, action="cluster.create", obj=cluster, new={"name": name, "backend": backend,
                                                                      "is_default": is_default})
    return cluster


def cluster_update(*, cluster: Cluster, actor, comment: str = "", **values) -> Cluster:
    """Change a cluster's backend or make it the default (the previous default stops being one)."""
    if "backend" in values and values["backend"] not in BACKENDS:
        raise _error("backend", f"Choose one of {', '.join(BACKENDS)}.", "invalid_choice")
    if values.get("is_default") is False and cluster.is_default:
        raise _error("is_default", "Make another cluster the default instead: there is always one.", "invalid")
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
        old = {f: getattr(cluster, f) for f in CLUSTER_FIELDS}
        if values.get("is_default") and not cluster.is_default:
            Cluster.objects.filter(is_default=True).update(is_default=False)
        for f in CLUSTER_FIELDS:
            if f in values:
                setattr(cluster, f, values[f])
        new = {f: getattr(cluster, f) for f in CLUSTER_FIELDS}
        if new != old:
            cluster.save(update_fields=list(CLUSTER_FIELDS))
            audit(actor=actor, action="cluster.update", obj=cluster, old=old, new=new, comment=comment)
    return cluster


def cluster_delete(*, cluster: Cluster, actor, comment: str = "") -> None:
    """Remove a cluster that no job ever ran on (jobs keep their cluster for their history)."""
    if Job.objects.filter(cluster=cluster).exists():
        raise Conflict(f"Jobs ran on {cluster.name}: it stays for their history.")
    if cluster.is_default and Cluster.objects.exclude(pk=cluster.pk).exists():
        raise Conflict(f"{cluster.name} is the default cluster: make another one the default first.")
    with transaction.atomic():
        audit(actor=actor, action="cluster.delete", obj=cluster,
              old={"name": cluster.name, **{f: getattr(cluster, f) for f in CLUSTER_FIELDS},
                   "nodes": list(cluster.nodes.values_list("name", flat=True))}, comment=comment)
        try:
            with transaction.atomic():
                cluster.delete()
        except ProtectedError:
            raise Conflict(f"Jobs ran on {cluster.name}: it stays for their history.")


def node_groups(cluster: Cluster) -> dict[str, dict]:
    """The cluster's node groups, read back from its nodes: {name: {flavor, nodes, gpus_per_node, labels}}."""
    groups: dict[str, dict] = {}
    for n in cluster.nodes.select_related("flavor").order_by("name"):
        group = (n.labels or {}).get(NODE_GROUP_LABEL)
        if not group:
            continue
        g = groups.setdefault(group, {"flavor": n.flavor.name, "nodes": 0, "gpus_per_node": n.gpus,
                                      "labels": {k: v for k, v in n.labels.items() if k != NODE_GROUP_LABEL}})
        g["nodes"] += 1
    return groups


def _busy_nodes(cluster: Cluster) -> set[str]:
    """Names of the nodes an admitted or running job is placed on."""
    busy: set[str] = set()
    active = Job.objects.filter(state__in=ACTIVE_STATES)
    active = active.filter(cluster=cluster) if not cluster.is_default else active.exclude(
        cluster__isnull=False, cluster__is_default=False)  # jobs without a cluster run on the default one
    for placement in active.values_list("placement", flat=True):
        busy.update(str(node) for node in placement or [])  # the node name of each pod
    return busy


def inventory_owned(cluster: Cluster) -> bool:
    """Whether the cluster reports its own nodes (then node groups cannot be declared)."""
    return owns_inventory(cluster.name) or cluster.backend != "simulated"


GROUP_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,50}[a-z0-9])?$")


def validate_group_name(name: str) -> None:
    if not GROUP_NAME.match(name or ""):
        raise _error("group", "A node group name: lower-case letters, digits and dashes (up to 52).")


def _require_declarable(cluster: Cluster) -> None:
    if inventory_owned(cluster):
        raise _error("cluster", f"{cluster.name}'s nodes come from the cluster itself (the inventory sync "
                                "stores what Kubernetes lists): add nodes there, not here.", "inventory_owned")


def node_group_set(*, cluster: Cluster, actor, name: str, flavor: Flavor, nodes: int, gpus_per_node: int,
                   labels: dict | None = None, comment: str = "") -> dict:
    """Create or resize a node group of a cluster whose inventory the portal owns. Shrinking removes the
    highest-numbered nodes, and is refused while a job runs on one of them."""
    _require_declarable(cluster)
    validate_group_name(name)
    errors = {}
    if nodes < 0:
        errors["nodes"] = [{"code": "min_value", "message": "0 or more nodes."}]
    if gpus_per_node < 1:
        errors["gpus_per_node"] = [{"code": "min_value", "message": "At least 1 GPU per node."}]
    if errors:
        raise ValidationFailed(fields=errors)
    labels = dict(labels if labels is not None else (flavor.node_labels or {}))
    labels[NODE_GROUP_LABEL] = name
    with transaction.atomic():
        Cluster.objects.select_for_update().filter(pk=cluster.pk).first()
        old = node_groups(cluster).get(name)
        # Filtered in Python: a dotted label key does not survive the ORM's JSON key transform.
        existing = {n.name: n for n in cluster.nodes.all() if (n.labels or {}).get(NODE_GROUP_LABEL) == name}
        wanted = [f"{name}-{i}" for i in range(nodes)]
        doomed = [n for key, n in existing.items() if key not in wanted]
        busy = _busy_nodes(cluster) & {n.name for n in doomed}
        if busy:
            raise Conflict(f"Jobs run on {', '.join(sorted(busy))}: wait for them to end before removing "
                           "those nodes.")
        if doomed:
            Node.objects.filter(pk__in=[n.pk for n in doomed]).delete()
        for node_name in wanted:
            row = existing.get(node_name) or cluster.nodes.filter(name=node_name, flavor=flavor).first()
            if row is None:
                try:
                    with transaction.atomic():
                        Node.objects.create(cluster=cluster, name=node_name, flavor=flavor, gpus=gpus_per_node,
                                            labels=labels)
                except IntegrityError:
                    raise _error("group", f"A node named {node_name} exists already.", "unique")
            elif (row.flavor_id, row.gpus, row.labels) != (flavor.pk, gpus_per_node, labels):
                if row.flavor_id != flavor.pk and node_name in _busy_nodes(cluster):
                    raise Conflict(f"Jobs run on {node_name}: its flavor cannot change now.")
                Node.objects.filter(pk=row.pk).update(flavor=flavor, gpus=gpus_per_node, labels=labels)
        new = node_groups(cluster).get(name)
        if new != old:
            audit(actor=actor, action="node_group.set", obj=cluster, old={name: old} if old else None,
                  new={name: new} if new else None, comment=comment)
    return new or {}


def node_group_delete(*, cluster: Cluster, actor, name: str, comment: str = "") -> None:
    _require_declarable(cluster)
    if name not in node_groups(cluster):
        raise Conflict(f"{cluster.name} has no node group {name}.")
    with transaction.atomic():
        old = node_groups(cluster)[name]
        node_group_set(cluster=cluster, actor=actor, name=name, flavor=Flavor.objects.get(name=old["flavor"]),
                       nodes=0, gpus_per_node=max(old["gpus_per_node"], 1), labels=old["labels"], comment=comment)
