"""Reading the cluster: nodes as GPU capacity per portal flavor (minus what others' pods use) and the portal's
own pods."""

from __future__ import annotations

import json
from collections.abc import Collection, Iterable, Mapping
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from typing import Any

from kubernetes.utils.quantity import parse_quantity

from engine.types import Node
from scheduling.backends.base import Inventory, PodState

from .connection import KubeConnection
from .errors import backend_errors

NOT_TERMINAL = "status.phase!=Succeeded,status.phase!=Failed"
# The complement of NOT_TERMINAL but for Unknown (which NOT_TERMINAL lists): the pods that ended.
ENDED = "status.phase!=Pending,status.phase!=Running,status.phase!=Unknown"
MIB = 1024 * 1024
GPU_RESOURCE_PREFIXES = ("nvidia.com/gpu", "nvidia.com/mig-", "amd.com/gpu", "gpu.intel.com/")


def _quantity(value: Any) -> Decimal:
    try:
        return parse_quantity(value)
    except (ValueError, TypeError, InvalidOperation):
        return Decimal(0)


def pod_request(pod: Mapping[str, Any], resource: str, *, unit: int = 1) -> int:
    """Effective request of ``resource`` by a pod: max(sum over containers, any init container), as the
    scheduler counts it. Extended resources have requests == limits, so limits stand in for absent requests.
    ``unit``: how many of the answer make one of the quantity (1000 for millicores of ``cpu``)."""

    def one(container: Mapping[str, Any]) -> Decimal:
        res = container.get("resources") or {}
        amount = (res.get("requests") or {}).get(resource)
        if amount is None:
            amount = (res.get("limits") or {}).get(resource)
        return _quantity(amount) if amount is not None else Decimal(0)

    spec = pod.get("spec") or {}
    total = sum((one(c) for c in spec.get("containers") or []), Decimal(0))
    init = max((one(c) for c in spec.get("initContainers") or []), default=Decimal(0))
    return int(max(total, init) * unit)


def _tolerates(tolerations: Iterable[Mapping[str, Any]], taint: Mapping[str, Any]) -> bool:
    for tol in tolerations:
        if tol.get("effect") and tol["effect"] != taint.get("effect"):
            continue
        op = tol.get("operator", "Equal")
        if op == "Exists" and (not tol.get("key") or tol.get("key") == taint.get("key")):
            return True
        if op == "Equal" and tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", ""):
            return True
    return False


def _with_gpus(state: PodState | None, pod: Mapping[str, Any]) -> PodState | None:
    """The pod's GPU request (the first GPU-like resource of its main container), for what a terminating pod
    still holds on its node."""
    if state is None:
        return None
    for container in (pod.get("spec") or {}).get("containers") or []:
        for resource in sorted((container.get("resources") or {}).get("limits") or {}):
            if resource.startswith(GPU_RESOURCE_PREFIXES):
                return replace(state, gpus=pod_request(pod, resource), gpu_resource=resource)
    return state


def _within(obj: Mapping[str, Any], namespaces: Collection[str] | None) -> bool:
    return namespaces is None or (obj.get("metadata") or {}).get("namespace") in namespaces


class InventoryReader(KubeConnection):
    """Nodes and the portal's pods, in a bounded number of list calls."""

    @backend_errors
    def list_pods(self, *, namespaces: Collection[str] | None = None) -> tuple[PodState, ...]:
        """This installation's pods in the cluster (every phase): what the reconciler compares with the
        database. ``namespaces``: the portal's namespaces there; a pod elsewhere, whatever its labels, is not
        the portal's (None: every namespace)."""
        items, _ = self.call.list_all(self.core.list_pod_for_all_namespaces, label_selector=self.selector,
                                      page_size=self.page_size)
        return tuple(s for s in (_with_gpus(self.pod_state(p), p) for p in items if _within(p, namespaces))
                     if s is not None)

    @backend_errors
    def inventory(self, *, namespaces: Collection[str] | None = None) -> Inventory:
        """Three lists (more only when paginating): nodes, non-terminated pods of everyone, the portal's pods
        that ended. ``namespaces``: the portal's namespaces on this cluster; a pod is the portal's only there and
        with this installation's label. Every other pod's GPUs count as used by others (None: every namespace).

        The portal's live pods are read from the list of everyone's non-terminated pods rather than listed a
        second time: on a cluster busy with the portal's own work they are most of that list, and decoding
        every one of them twice a sync was half its cost. The pods that ended are listed after it, so that a
        pod that ends between the two lists is in the second (its later state wins); one in neither would read
        as gone, and an evicting job whose pods all look gone is requeued."""
        nodes, _ = self.call.list_all(self.core.list_node, page_size=self.page_size)
        running, _ = self.call.list_all(self.core.list_pod_for_all_namespaces, field_selector=NOT_TERMINAL,
                                        page_size=self.page_size)
        ended, _ = self.call.list_all(self.core.list_pod_for_all_namespaces, label_selector=self.selector,
                                      field_selector=ENDED, page_size=self.page_size)
        mine: dict[tuple[str, str], PodState] = {}
        for pod in (*running, *ended):
            if self.owns(pod) and _within(pod, namespaces):
                state = _with_gpus(self.pod_state(pod), pod)
                if state is not None:
                    mine[(state.namespace, state.name)] = state
        portal_pods = tuple(mine.values())

        others_by_node: dict[str, list[dict[str, Any]]] = {}
        for pod in running:
            node = (pod.get("spec") or {}).get("nodeName")
            if node and not (self.owns(pod) and _within(pod, namespaces)):
                others_by_node.setdefault(node, []).append(pod)

        entries: list[Node] = []
        for node in nodes:
            entries.extend(self._node_entries(node, others_by_node.get(node["metadata"]["name"], [])))
        entries.sort(key=lambda n: (n.name, n.flavor))
        return Inventory(nodes=tuple(entries), pods=portal_pods)

    def _is_gpu_resource(self, resource: str) -> bool:
        return resource.startswith(GPU_RESOURCE_PREFIXES) or any(r.resource == resource for r in self.flavors)

    def resolve_flavor(self, resource: str, node_labels: Mapping[str, str]) -> str | None:
        if self.flavors:
            for rule in self.flavors:
                if rule.matches(resource, node_labels):
                    return rule.flavor
            return None
        base = node_labels.get("gpu-type") or resource.split("/", 1)[0]
        if resource.startswith("nvidia.com/mig-"):
            return f"{base}-mig-{resource.removeprefix('nvidia.com/mig-')}"
        return base

    def _node_entries(self, node: Mapping[str, Any], others: list[dict[str, Any]]) -> list[Node]:
        meta = node.get("metadata") or {}
        spec = node.get("spec") or {}
        status = node.get("status") or {}
        labels: dict[str, str] = dict(meta.get("labels") or {})
        ready = any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or [])
        schedulable = ready and not spec.get("unschedulable", False)
        taints = tuple(sorted({
            t["key"] for t in spec.get("taints") or []
            if t.get("effect") in ("NoSchedule", "NoExecute") and not _tolerates(self.tolerations, t)
        }))
        # What the node has for pods besides its GPUs: allocatable cores and memory less what pods the portal
        # does not own request (daemon sets, others' work); only CPU work on GPU nodes uses it.
        allocatable = status.get("allocatable") or {}
        cpu_m = int(_quantity(allocatable.get("cpu", 0)) * 1000) - sum(pod_request(p, "cpu", unit=1000) for p in others)
        memory_mib = (int(_quantity(allocatable.get("memory", 0)) / MIB)
                      - sum(pod_request(p, "memory") for p in others) // MIB)
        out = []
        for resource, amount in sorted(allocatable.items()):
            if not self._is_gpu_resource(resource):
                continue
            flavor = self.resolve_flavor(resource, labels)
            gpus = int(_quantity(amount))
            devices = hami_devices(meta) if resource == "nvidia.com/gpu" else None
            if devices is not None:  # HAMi advertises each GPU as deviceSplitCount units: its own list counts them
                gpus = devices
            if flavor is None or gpus <= 0:
                continue
            used = sum(pod_request(p, resource) for p in others)
            out.append(Node(
                name=meta["name"], flavor=flavor, gpus=gpus, used_by_others=min(used, gpus), cluster=self.name,
                labels=tuple(sorted(labels.items())), taints=taints, schedulable=schedulable,
                cpu_m=max(0, cpu_m), memory_mib=max(0, memory_mib),
            ))
        return out


HAMI_REGISTER = "hami.io/node-nvidia-register"


def hami_devices(meta: Mapping[str, Any]) -> int | None:
    """How many GPUs HAMi registered on a node (its ``hami.io/node-nvidia-register`` annotation: a JSON list of
    devices, or in older releases ``GPU-<uuid>,<split>,<MiB>,<cores>,<type>,<numa>,<health>`` entries joined by
    ``:``), None on a node without HAMi."""
    text = ((meta.get("annotations") or {}).get(HAMI_REGISTER) or "").strip()
    if not text:
        return None
    try:
        listed = json.loads(text)
    except ValueError:
        return sum(1 for entry in text.split(":") if entry.strip().startswith("GPU-"))
    return len(listed) if isinstance(listed, list) else None
