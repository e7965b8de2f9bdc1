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
from quotas import selectors as quota_selectors
from quotas.models import Flavor, FlavorKind
from scheduling.backends import owns_inventory
from scheduling.models import (
    ACTIVE_STATES,
    BackendKind,
    Cluster,
    ClusterState,
    Job,
    Node,
    label_problems,
    topology_level_problems,
)

NODE_GROUP_LABEL = "portal.node-group"
BACKENDS = tuple(BackendKind.values)
STATES = tuple(ClusterState.values)
# Everything an admin sets on a cluster. The connection settings are references (a file path, a variable's
# name), never credentials, so they may be audited and shown to platform admins.
CLUSTER_FIELDS = ("backend", "is_default", "kubeconfig", "kubeconfig_env", "context", "in_cluster",
                  "namespace_template", "labels", "state", "cost_rank", "topology_levels", "cpu_on_gpu_nodes",
                  "gpu_reserve_cores", "gpu_reserve_memory_gib")
# What a lab file may state besides the backend and whether a cluster is the default.
CLUSTER_SETTINGS = tuple(f for f in CLUSTER_FIELDS if f not in ("backend", "is_default"))
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,99}$")
DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
COST_RANK_RANGE = (-1000, 1000)
# What a GPU node may keep per GPU for its GPU pods (CPU work on GPU nodes): up to a large node's all.
RESERVE_RANGES = {"gpu_reserve_cores": (0, 256), "gpu_reserve_memory_gib": (0, 4096)}


def _error(field: str, message: str, code: str = "invalid") -> ValidationFailed:
    return ValidationFailed(fields={field: [{"code": code, "message": message}]})


def _cluster_problems(values: dict) -> dict[str, list[dict]]:
    """Field errors of a cluster's settings as they would be after a create or an update (all fields given)."""
    errors: dict[str, list[dict]] = {}

    def bad(field, message, code="invalid"):
        errors.setdefault(field, []).append({"code": code, "message": message})

    if values["backend"] not in BACKENDS:
        bad("backend", f"Choose one of {', '.join(BACKENDS)}.", "invalid_choice")
    if values["state"] not in STATES:
        bad("state", f"Choose one of {', '.join(STATES)}.", "invalid_choice")
    path = values["kubeconfig"] or ""
    if path and (not path.startswith("/") or len(path) > 500 or "\x00" in path):
        bad("kubeconfig", "The absolute path of a kubeconfig file (e.g. a mounted Secret), up to 500 characters.")
    env = values["kubeconfig_env"] or ""
    if env and not ENV_NAME.match(env):
        bad("kubeconfig_env", "The name of an environment variable: letters, digits and '_', not starting with a "
                              "digit.")
    if sum(bool(x) for x in (path, env, values["in_cluster"])) > 1:
        bad("kubeconfig", "Give one way to reach the cluster: a kubeconfig path, a kubeconfig environment "
                          "variable, or in-cluster access.", "ambiguous")
    if len(values["context"] or "") > 253:
        bad("context", "At most 253 characters.")
    template = values["namespace_template"] or ""
    if template:
        try:
            sample = template.format(department="dept")
        except (KeyError, IndexError, ValueError):
            sample = None
        if "{department}" not in template or sample is None or not DNS_LABEL.match(sample):
            bad("namespace_template", "A namespace name with {department} in it, e.g. gpu-{department} (lower-case "
                                      "letters, digits and '-').")
    for problem in label_problems(values["labels"]):
        bad("labels", problem)
    for problem in topology_level_problems(values["topology_levels"]):
        bad("topology_levels", problem)
    rank = values["cost_rank"]
    if isinstance(rank, bool) or not isinstance(rank, int) or not COST_RANK_RANGE[0] <= rank <= COST_RANK_RANGE[1]:
        bad("cost_rank", f"A whole number from {COST_RANK_RANGE[0]} to {COST_RANK_RANGE[1]} (lower is cheaper).")
    pool = values["cpu_on_gpu_nodes"]
    if pool is not None and not Flavor.objects.filter(name=pool, kind=FlavorKind.CPU).exists():
        bad("cpu_on_gpu_nodes", f"No CPU pool named {pool!r}: name a flavor of kind cpu, or null to switch it off.",
            "not_cpu_pool")
    for field, (low, high) in RESERVE_RANGES.items():
        v = values[field]
        if isinstance(v, bool) or not isinstance(v, int) or not low <= v <= high:
            bad(field, f"A whole number from {low} to {high} per GPU.")
    return errors


def cluster_settings(cluster: Cluster) -> dict:
    """A cluster's settings as an admin states them (the CPU pool its GPU nodes lend to by name)."""
    out = {f: getattr(cluster, f) for f in CLUSTER_FIELDS if f != "cpu_on_gpu_nodes"}
    out["cpu_on_gpu_nodes"] = cluster.cpu_on_gpu_nodes.name if cluster.cpu_on_gpu_nodes_id else None
    return out


def _model_values(settings: dict) -> dict:
    """Settings as the model's fields (the CPU pool's name as its row, checked to exist by then)."""
    out = dict(settings)
    pool = out.pop("cpu_on_gpu_nodes", None)
    out["cpu_on_gpu_nodes"] = Flavor.objects.get(name=pool) if pool else None
    return out


def cluster_create(*, actor, name: str, **values) -> Cluster:
    """Register a cluster (``values``: any of CLUSTER_FIELDS; the rest take their defaults)."""
    unknown = set(values) - set(CLUSTER_FIELDS)
    if unknown:
        raise _error(sorted(unknown)[0], "Unknown field.", "unknown_field")
    settings = {**cluster_settings(Cluster()), **values}
    settings["labels"] = settings["labels"] if settings["labels"] is not None else {}
    settings["topology_levels"] = settings["topology_levels"] if settings["topology_levels"] is not None else []
    errors = _cluster_problems(settings)
    if errors:
        raise ValidationFailed(fields=errors)
    with transaction.atomic():
        if Cluster.objects.filter(name=name).exists():
            raise _error("name", f"A cluster named {name} exists already.", "unique")
        if settings["is_default"]:
            Cluster.objects.filter(is_default=True).update(is_default=False)
        cluster = Cluster.objects.create(name=name, **_model_values(settings))
        audit(actor=actor, action="cluster.create", obj=cluster, new={"name": name, **settings})
    return cluster


def cluster_update(*, cluster: Cluster, actor, comment: str = "", **values) -> Cluster:
    """Change a cluster's settings, make it the default (the previous default stops being one), or change its
    state: ``cordoned`` takes no new admissions; ``draining`` takes none either and lets its running work
    finish (then the sync makes it ``cordoned``); ``active`` opens it again."""
    unknown = set(values) - set(CLUSTER_FIELDS)
    if unknown:
        raise _error(sorted(unknown)[0], "Unknown field.", "unknown_field")
    if values.get("is_default") is False and cluster.is_default:
        raise _error("is_default", "Make another cluster the default instead: there is always one.", "invalid")
    with transaction.atomic():
        cluster = Cluster.objects.select_for_update().get(pk=cluster.pk)
        old = cluster_settings(cluster)
        new = {**old, **{k: v for k, v in values.items() if v is not None or k in ("labels", "cpu_on_gpu_nodes")}}
        if new["labels"] is None:
            new["labels"] = {}
        errors = _cluster_problems(new)
        if errors:
            raise ValidationFailed(fields=errors)
        if new["is_default"] and not cluster.is_default:
            Cluster.objects.filter(is_default=True).update(is_default=False)
        if new != old:
            for f, v in _model_values(new).items():
                setattr(cluster, f, v)
            cluster.save(update_fields=list(CLUSTER_FIELDS))
            changed = [f for f in CLUSTER_FIELDS if old[f] != new[f]]
            audit(actor=actor, action="cluster.update", obj=cluster, old={f: old[f] for f in changed},
                  new={f: new[f] for f in changed}, comment=comment)
    return cluster


def cluster_delete(*, cluster: Cluster, actor, comment: str = "") -> None:
    """Remove a cluster that no job ever ran on (jobs keep their cluster for their history) and that no
    department holds a quota on (its quotas are deleted first, each audited)."""
    if Job.objects.filter(cluster=cluster).exists():
        raise Conflict(f"Jobs ran on {cluster.name}: it stays for their history.")
    held = quota_selectors.quota_holders(cluster_id=cluster.pk)
    if held:
        # Deleting it would silently drop guarantees departments were given on it.
        raise Conflict(f"Departments hold quotas on {cluster.name} ({', '.join(held)}): delete those quotas "
                       "first.")
    pending = quota_selectors.pending_quota_requests(cluster_id=cluster.pk)
    if pending:
        ids = ", ".join(str(pk) for pk in pending)
        raise Conflict(f"Quota requests for {cluster.name} are pending ({ids}): approve or reject them first.")
    if cluster.is_default and Cluster.objects.exclude(pk=cluster.pk).exists():
        raise Conflict(f"{cluster.name} is the default cluster: make another one the default first.")
    with transaction.atomic():
        audit(actor=actor, action="cluster.delete", obj=cluster,
              old={"name": cluster.name, **cluster_settings(cluster),
                   "nodes": list(cluster.nodes.values_list("name", flat=True))}, comment=comment)
        try:
            with transaction.atomic():
                cluster.delete()
        except ProtectedError:
            # A job or a quota arrived after the checks above.
            raise Conflict(f"Jobs ran on {cluster.name} or departments hold quotas on it: it stays.")


def node_groups(cluster: Cluster) -> dict[str, dict]:
    """The cluster's node groups, read back from its nodes: {name: {flavor, nodes, gpus_per_node, labels}}, and
    a CPU pool's group its nodes' ``cpu_millicores`` and ``memory_mib`` (its size: it has no GPUs), as a GPU
    group's whose nodes state theirs (what CPU work on GPU nodes may use)."""
    groups: dict[str, dict] = {}
    for n in cluster.nodes.select_related("flavor").order_by("name"):
        group = (n.labels or {}).get(NODE_GROUP_LABEL)
        if not group:
            continue
        g = groups.setdefault(group, {"flavor": n.flavor.name, "nodes": 0, "gpus_per_node": n.gpus,
                                      "labels": {k: v for k, v in n.labels.items() if k != NODE_GROUP_LABEL},
                                      **({"cpu_millicores": n.cpu_millicores, "memory_mib": n.memory_mib}
                                         if n.flavor.is_cpu or n.cpu_millicores else {})})
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
    return owns_inventory(cluster) or cluster.backend != "simulated"


GROUP_NAME = re.compile(r"^[a-z0-9]([a-z0-9-]{0,50}[a-z0-9])?$")


def validate_group_name(name: str) -> None:
    if not GROUP_NAME.match(name or ""):
        raise _error("group", "A node group name: lower-case letters, digits and dashes (up to 52).")


def _require_declarable(cluster: Cluster) -> None:
    if inventory_owned(cluster):
        raise _error("cluster", f"{cluster.name}'s nodes come from the cluster itself (the inventory sync "
                                "stores what Kubernetes lists): add nodes there, not here.", "inventory_owned")


def node_group_set(*, cluster: Cluster, actor, name: str, flavor: Flavor, nodes: int, gpus_per_node: int,
                   labels: dict | None = None, comment: str = "", cpu_millicores: int = 0,
                   memory_mib: int = 0) -> dict:
    """Create or resize a node group of a cluster whose inventory the portal owns. Shrinking removes the
    highest-numbered nodes, and is refused while a job runs on one of them. A CPU pool's group has no GPUs and
    says its nodes' cores and memory (``cpu_millicores``, ``memory_mib``)."""
    _require_declarable(cluster)
    validate_group_name(name)
    errors = {}
    if nodes < 0:
        errors["nodes"] = [{"code": "min_value", "message": "0 or more nodes."}]
    if flavor.is_cpu:
        if gpus_per_node:
            errors["gpus_per_node"] = [{"code": "cpu_pool", "message": f"{flavor.name} is a CPU pool: 0 GPUs."}]
        if cpu_millicores < 1000 or memory_mib < 1024:
            errors["cpu_millicores"] = [{"code": "min_value", "message": "A CPU pool's node has 1 core and 1 GiB "
                                                                         "or more."}]
    elif gpus_per_node < 1:
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
                                            labels=labels, cpu_millicores=cpu_millicores, memory_mib=memory_mib)
                except IntegrityError:
                    raise _error("group", f"A node named {node_name} exists already.", "unique")
            elif (row.flavor_id, row.gpus, row.labels, row.cpu_millicores, row.memory_mib) != (
                    flavor.pk, gpus_per_node, labels, cpu_millicores, memory_mib):
                if row.flavor_id != flavor.pk and node_name in _busy_nodes(cluster):
                    raise Conflict(f"Jobs run on {node_name}: its flavor cannot change now.")
                Node.objects.filter(pk=row.pk).update(flavor=flavor, gpus=gpus_per_node, labels=labels,
                                                      cpu_millicores=cpu_millicores, memory_mib=memory_mib)
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
                       nodes=0, gpus_per_node=old["gpus_per_node"] if "cpu_millicores" in old
                       else max(old["gpus_per_node"], 1), labels=old["labels"], comment=comment,
                       cpu_millicores=old.get("cpu_millicores", 0), memory_mib=old.get("memory_mib", 0))
