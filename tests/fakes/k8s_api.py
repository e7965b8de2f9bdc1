"""A stateful fake Kubernetes API server: the executable spec of the API server's rules the portal relies on.

It serves the real REST paths the official ``kubernetes`` client calls, over HTTP (stdlib
``ThreadingHTTPServer`` in a thread), and enforces the rules the portal depends on, with the status codes and
``Status`` bodies a real API server returns:

====================================================  ======================================================
rule                                                  answer
====================================================  ======================================================
pod name already taken in the namespace               409 ``AlreadyExists``
``metadata.resourceVersion`` on an update is stale    409 ``Conflict``
JSON patch ``test`` op fails                          422 (as ``patch.go`` does)
``spec.schedulingGates`` added after creation         422 ``only deletion is allowed``
node affinity / nodeSelector widened or changed       422 while gated (only additions); any change once ungated
``priorityClassName`` unknown                         403 ``no PriorityClass with name ... was found``
``priorityClassName`` (or any other immutable field)  422 ``pod updates may not change fields ...``
extended resource not an integer / requests!=limits   422 ``must be an integer`` / ``must be equal to ... limit``
PodSecurity ``restricted`` namespace, unsafe pod      403 ``violates PodSecurity "restricted:latest"``
Eviction while a PDB allows no disruption             429 ``TooManyRequests`` with a ``DisruptionBudget`` cause
watch from a resourceVersion older than the history   200 + ``ERROR`` event with a 410 ``Expired`` Status
PriorityClass ``value`` / ``preemptionPolicy`` change  422 (immutable)
create over a namespace ResourceQuota                 403 ``exceeded quota``, checked BEFORE AlreadyExists (a
                                                      duplicate that fits is charged, then answers 409)
pod covered by more than one PDB, evicted             500 (the Eviction API never supports it)
PodSecurity ``restricted``, a volume type outside     403 (only persistentVolumeClaim, emptyDir, ephemeral,
the profile's list (``nfs``, ``hostPath``, ...)       csi, secret, configMap, projected, downwardAPI)
pod mounts a claim its namespace does not have        201, then the pod stays Pending: ``PodScheduled=False``
                                                      and a ``FailedScheduling`` event ``persistentvolumeclaim
                                                      "x" not found`` (volume binding runs at scheduling)
Service name taken in the namespace                   409 ``AlreadyExists``
Service without a selector, a bad port or targetPort  422 (the fake serves Services of pods only: the headless
  or a ``clusterIP`` other than "None" / unset        ones of gangs and the ClusterIP ones of sessions' routes)
Ingress with a bad path, pathType or backend          422 (``networking.k8s.io/v1``; a backend naming a missing
                                                      Service is accepted, as the API server does: the
                                                      manifests' consistency is :meth:`FakeKube.route_problems`)
pod ``hostname`` / ``subdomain`` not a DNS-1123 label  422
Secret name taken / stale resourceVersion on update   409 ``AlreadyExists`` / ``Conflict``
Secret ``type`` changed, bad data key or base64       422 (``type`` is immutable)
pod naming a Secret (or key) not in its namespace     201: created; the kubelet (:meth:`FakeKube.run`) leaves it
                                                      Pending, its container waiting ``CreateContainerConfigError``
                                                      (env) or ``ContainerCreating`` (volume), with a Warning
                                                      event ``secret "x" not found``, until the Secret exists
====================================================  ======================================================

Quota: admission charges ``status.used`` of every ResourceQuota of the namespace when it admits a create, as
the real quota admission plugin does, even if storage then refuses the pod as a duplicate; the quota controller
(:meth:`FakeKube.resync_quotas`, also run when a pod goes away or ends, like its replenishment) recomputes
``used`` from the pods, gated ones included (a gated pod counts against a quota), terminal ones and pods
past their deletion deadline excluded.

Deletion: a graceful delete or an accepted eviction sets ``deletionTimestamp`` to the moment the grace period
ends (now + grace), as the API server does. The pod keeps its node's resources (the scheduler helpers refuse
to place anything into them) until the kubelet has stopped it: :meth:`FakeKube.finish_termination`, or by
itself once the grace period has passed on the fake's clock (:meth:`FakeKube.advance` moves it on).

Simplifications (documented, deliberate): no authentication/RBAC; strategic merge patch is applied as a JSON
merge patch; no scheduler or kubelet runs by itself - tests drive them with the helpers at the end
(:meth:`FakeKube.bind`, :meth:`FakeKube.run`, :meth:`FakeKube.terminate`, ...), which check the scheduler's
own rules (gates, affinity, cordons, taints, capacity).

Fault injection: :meth:`FakeKube.fail_next` (N requests answer e.g. 500), :meth:`FakeKube.hang_next` (N
requests hang past the client's timeout, then are dropped or applied), :meth:`FakeKube.race_next` (run a
concurrent write just before N requests, e.g. to make a read stale), :meth:`FakeKube.meet_next` (N requests
held until all N are in flight at once: a client that does not overlap them gets 503s). Every request is
recorded in ``FakeKube.requests``.
"""

from __future__ import annotations

import base64
import copy
import json
import math
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from kubernetes.utils.quantity import parse_quantity

from .k8s_patch import (
    GENERIC_FIELDS,
    NODE_FIELDS,
    POD_FIELDS,
    PatchError,
    SelectorError,
    apply_json_patch,
    apply_merge_patch,
    field_selector_matches,
    label_selector_matches,
    match_labels_selector,
)

PSA_ENFORCE = "pod-security.kubernetes.io/enforce"
DNS1123 = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")
RESTRICTED_VOLUME_TYPES = {"configMap", "csi", "downwardAPI", "emptyDir", "ephemeral", "persistentVolumeClaim",
                           "projected", "secret"}
# What a list of each resource is called on the wire (``kind``/``apiVersion`` of the list object).
LIST_KINDS = {
    "pods": ("PodList", "v1"),
    "nodes": ("NodeList", "v1"),
    "namespaces": ("NamespaceList", "v1"),
    "priorityclasses": ("PriorityClassList", "scheduling.k8s.io/v1"),
    "poddisruptionbudgets": ("PodDisruptionBudgetList", "policy/v1"),
    "persistentvolumeclaims": ("PersistentVolumeClaimList", "v1"),
    "storageclasses": ("StorageClassList", "storage.k8s.io/v1"),
    "secrets": ("SecretList", "v1"),
    "events": ("EventList", "v1"),
    "services": ("ServiceList", "v1"),
    "ingresses": ("IngressList", "networking.k8s.io/v1"),
}
DEFAULT_CLASS_ANNOTATION = "storageclass.kubernetes.io/is-default-class"
DNS1123_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")
DNS1035_LABEL = re.compile(r"^[a-z]([-a-z0-9]{0,61}[a-z0-9])?$")
SECRET_KEY = re.compile(r"^[-._a-zA-Z0-9]+$")
# Keys each well-known Secret type requires (the API server's validation of ``type``).
SECRET_TYPE_KEYS = {"kubernetes.io/dockerconfigjson": ".dockerconfigjson", "kubernetes.io/dockercfg": ".dockercfg"}
MUTABLE_POD_SPEC_FIELDS = {"activeDeadlineSeconds", "tolerations", "schedulingGates", "affinity", "nodeSelector"}


def now_iso() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def iso(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def parse_iso(value: str) -> float:
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


class ApiFailure(Exception):
    """Raised inside the fake to answer with a ``Status`` body."""

    def __init__(self, code: int, reason: str, message: str, causes: list[dict[str, str]] | None = None,
                 kind: str = "", name: str = "") -> None:
        super().__init__(message)
        self.code, self.reason, self.message = code, reason, message
        self.causes, self.kind, self.name = causes or [], kind, name

    def status(self) -> dict[str, Any]:
        details: dict[str, Any] = {}
        if self.name:
            details["name"] = self.name
        if self.kind:
            details["kind"] = self.kind
        if self.causes:
            details["causes"] = self.causes
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": self.message, "reason": self.reason, "code": self.code}
        if details:
            body["details"] = details
        return body


def not_found(kind: str, name: str) -> ApiFailure:
    return ApiFailure(404, "NotFound", f'{kind} "{name}" not found', kind=kind, name=name)


def invalid(kind: str, name: str, errors: list[str]) -> ApiFailure:
    return ApiFailure(422, "Invalid", f'{kind.capitalize()} "{name}" is invalid: ' + "; ".join(errors),
                      causes=[{"reason": "FieldValueInvalid", "message": e} for e in errors], kind=kind, name=name)


class SchedulingError(AssertionError):
    """A kubelet/scheduler helper was asked to do what the real scheduler would refuse."""


@dataclass
class Fault:
    kind: str  # "status" | "hang" | "race" | "meet"
    remaining: int
    method: str | None = None
    path: str | None = None  # regex searched in the path
    status: int = 500
    seconds: float = 0.0
    then: str = "drop"  # for hangs: "drop" (never applied) or "apply" (applied after the hang)
    action: Callable[[FakeKube], None] | None = None
    skip: int = 0  # let this many matching requests through first
    barrier: threading.Barrier | None = None  # for "meet": the requests wait for each other on it

    def matches(self, method: str, path: str) -> bool:
        return (self.method is None or self.method == method) and (self.path is None or re.search(self.path, path))


@dataclass
class Recorded:
    method: str
    path: str
    query: dict[str, str]
    body: Any = None
    content_type: str = ""


@dataclass
class Event:
    rv: int
    type: str
    kind: str  # "pods", "nodes", ...
    obj: dict[str, Any]
    old: dict[str, Any] | None = None


@dataclass
class Response:
    status: int
    body: Any = None
    stream: Iterator[bytes] | None = None
    content_type: str = "application/json"
    drop: bool = False


def _labels(obj: dict[str, Any]) -> dict[str, str]:
    return (obj.get("metadata") or {}).get("labels") or {}


def _q(amount: Any) -> Decimal:
    return parse_quantity(amount)


# HAMi's share of one GPU: its scheduler extender accounts them per device and kube-scheduler is configured to
# ignore them (``managedResources`` with ``ignoredByScheduler``), so no node advertises them as allocatable.
SCHEDULER_IGNORED = frozenset({"nvidia.com/gpumem", "nvidia.com/gpucores"})


def is_extended_resource(name: str) -> bool:
    if "/" not in name:
        return False
    domain = name.split("/", 1)[0]
    return not (domain == "kubernetes.io" or domain.endswith(".kubernetes.io"))


def _all_containers(spec: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    out = []
    for key in ("initContainers", "containers", "ephemeralContainers"):
        for i, c in enumerate(spec.get(key) or []):
            out.append((f"spec.{key}[{i}]", c))
    return out


class FakeKube:
    """The cluster state, the API rules, fault injection and the scheduler/kubelet helpers."""

    def __init__(self, *, history: int = 500) -> None:
        self.lock = threading.RLock()
        self.changed = threading.Condition(self.lock)
        self.closing = threading.Event()
        self.hanging = 0  # requests held unanswered by a hang fault right now
        self.rv = 100
        self.history: deque[Event] = deque(maxlen=history)
        self.compacted_rv = self.rv  # events at or below this resourceVersion are no longer available
        self.namespaces: dict[str, dict[str, Any]] = {}
        self.pods: dict[tuple[str, str], dict[str, Any]] = {}
        self.nodes: dict[str, dict[str, Any]] = {}
        self.priority_classes: dict[str, dict[str, Any]] = {}
        self.pdbs: dict[tuple[str, str], dict[str, Any]] = {}
        self.services: dict[tuple[str, str], dict[str, Any]] = {}
        self.ingresses: dict[tuple[str, str], dict[str, Any]] = {}
        self.quotas: dict[tuple[str, str], dict[str, Any]] = {}
        self.pvcs: dict[tuple[str, str], dict[str, Any]] = {}
        self.storage_classes: dict[str, dict[str, Any]] = {}
        self.secrets: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[dict[str, Any]] = []  # core/v1 Events, as the kubelet reports them
        self.clock_offset = 0.0  # seconds the fake's clock (kubelet, deletion deadlines) is ahead of real time
        self.logs: dict[tuple[str, str], list[str]] = {}
        self.log_stamps: dict[tuple[str, str], list[datetime]] = {}  # when each line was first read
        self.requests: list[Recorded] = []
        self.faults: list[Fault] = []
        for name, value in (("system-cluster-critical", 2000000000), ("system-node-critical", 2000001000)):
            self.add_priority_class(name, value)
        self.url = ""

    # ================================================================ bookkeeping

    def _next_rv(self) -> int:
        self.rv += 1
        return self.rv

    def _record(self, kind: str, type_: str, obj: dict[str, Any], old: dict[str, Any] | None = None) -> None:
        if len(self.history) == self.history.maxlen:
            self.compacted_rv = self.history[0].rv
        self.history.append(Event(int(obj["metadata"]["resourceVersion"]), type_, kind, copy.deepcopy(obj),
                                  copy.deepcopy(old) if old else None))
        self.changed.notify_all()

    def _stamp_new(self, obj: dict[str, Any], namespace: str | None) -> None:
        meta = obj.setdefault("metadata", {})
        if namespace is not None:
            meta["namespace"] = namespace
        meta["uid"] = str(uuid.uuid4())
        meta["creationTimestamp"] = now_iso()
        meta["resourceVersion"] = str(self._next_rv())
        meta.setdefault("labels", {})
        meta.setdefault("annotations", {})

    def compact(self) -> None:
        """Forget the whole event history (like etcd compaction): older watches get 410 Gone."""
        with self.lock:
            self.history.clear()
            self.compacted_rv = self.rv

    def now(self) -> float:
        return time.time() + self.clock_offset

    def advance(self, seconds: float) -> None:
        """Move the fake's clock on: terminating pods whose grace period has passed are then gone."""
        with self.lock:
            self.clock_offset += seconds
            self._reap()

    def _reap(self) -> None:
        """The kubelet: a terminating pod whose grace period has passed is stopped, and its object removed."""
        now = self.now()
        for key, pod in list(self.pods.items()):
            deadline = pod["metadata"].get("deletionTimestamp")
            if deadline and parse_iso(deadline) <= now:
                self._remove_pod(key)

    def count(self, method: str | None = None, path: str | None = None) -> int:
        with self.lock:
            return sum(1 for r in self.requests
                       if (method is None or r.method == method) and (path is None or re.search(path, r.path)))

    # ================================================================ fault injection

    def fail_next(self, n: int = 1, *, status: int = 500, method: str | None = None, path: str | None = None,
                  after: int = 0) -> None:
        """The next N matching requests (after letting ``after`` through) answer ``status``."""
        with self.lock:
            self.faults.append(Fault("status", n, method, path, status=status, skip=after))

    def hang_next(self, n: int = 1, *, seconds: float = 2.0, then: str = "drop", method: str | None = None,
                  path: str | None = None) -> None:
        """The next N matching requests get no answer for ``seconds`` (past the client's timeout), then the
        connection is cut. ``then="drop"``: the request never reaches storage; ``then="apply"``: it is applied
        first (the write happened, the client never heard back: the ambiguous case retries must handle)."""
        with self.lock:
            self.faults.append(Fault("hang", n, method, path, seconds=seconds, then=then))

    def race_next(self, action: Callable[[FakeKube], None], n: int = 1, *, method: str | None = None,
                  path: str | None = None, after: int = 0) -> None:
        """Run ``action(fake)`` (a concurrent writer) just before each of the next N matching requests (after
        letting ``after`` through)."""
        with self.lock:
            self.faults.append(Fault("race", n, method, path, action=action, skip=after))

    def meet_next(self, n: int, *, seconds: float = 10.0, method: str | None = None,
                  path: str | None = None) -> None:
        """The next N matching requests are held until all N are in flight at once, then answered as usual:
        proof that a client overlaps them. A client that sends them one after another fails instead of hanging:
        after ``seconds`` the waiting request, and every later one of the N, answers 503."""
        with self.lock:
            self.faults.append(Fault("meet", n, method, path, seconds=seconds, barrier=threading.Barrier(n)))

    def _take_fault(self, method: str, path: str) -> Fault | None:
        with self.lock:
            for fault in self.faults:
                if fault.remaining > 0 and fault.matches(method, path):
                    if fault.skip > 0:
                        fault.skip -= 1
                        continue
                    fault.remaining -= 1
                    if fault.remaining == 0:
                        self.faults.remove(fault)
                    return fault
        return None

    # ================================================================ HTTP entry point

    ROUTES: list[tuple[str, str, str]] = [
        ("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/pods", "list_pods"),
        ("POST", r"/api/v1/namespaces/(?P<ns>[^/]+)/pods", "create_pod"),
        ("DELETE", r"/api/v1/namespaces/(?P<ns>[^/]+)/pods", "delete_pods"),
        ("GET", r"/api/v1/pods", "list_pods"),
        ("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)", "get_pod"),
        ("PATCH", r"/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)", "update_pod"),
        ("PUT", r"/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)", "update_pod"),
        ("DELETE", r"/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)", "delete_pod"),
        ("POST", r"/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/eviction", "evict_pod"),
        ("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/pods/(?P<name>[^/]+)/log", "pod_log"),
        ("GET", r"/api/v1/nodes", "list_nodes"),
        ("GET", r"/api/v1/nodes/(?P<name>[^/]+)", "get_node"),
        ("GET", r"/api/v1/namespaces", "list_namespaces"),
        ("POST", r"/api/v1/namespaces", "create_namespace"),
        ("GET", r"/api/v1/namespaces/(?P<name>[^/]+)", "get_namespace"),
        ("DELETE", r"/api/v1/namespaces/(?P<name>[^/]+)", "delete_namespace"),
        ("GET", r"/apis/scheduling\.k8s\.io/v1/priorityclasses", "list_priority_classes"),
        ("POST", r"/apis/scheduling\.k8s\.io/v1/priorityclasses", "create_priority_class"),
        ("GET", r"/apis/scheduling\.k8s\.io/v1/priorityclasses/(?P<name>[^/]+)", "get_priority_class"),
        ("PUT", r"/apis/scheduling\.k8s\.io/v1/priorityclasses/(?P<name>[^/]+)", "update_priority_class"),
        ("PATCH", r"/apis/scheduling\.k8s\.io/v1/priorityclasses/(?P<name>[^/]+)", "update_priority_class"),
        ("DELETE", r"/apis/scheduling\.k8s\.io/v1/priorityclasses/(?P<name>[^/]+)", "delete_priority_class"),
        ("POST", r"/api/v1/namespaces/(?P<ns>[^/]+)/resourcequotas", "create_quota"),
        ("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/resourcequotas", "list_quotas"),
        ("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/resourcequotas/(?P<name>[^/]+)", "get_quota"),
        ("PATCH", r"/api/v1/namespaces/(?P<ns>[^/]+)/resourcequotas/(?P<name>[^/]+)", "update_quota"),
        ("PUT", r"/api/v1/namespaces/(?P<ns>[^/]+)/resourcequotas/(?P<name>[^/]+)", "update_quota"),
        ("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/persistentvolumeclaims", "list_pvcs"),
        ("POST", r"/api/v1/namespaces/(?P<ns>[^/]+)/persistentvolumeclaims", "create_pvc"),
        ("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/persistentvolumeclaims/(?P<name>[^/]+)", "get_pvc"),
        ("DELETE", r"/api/v1/namespaces/(?P<ns>[^/]+)/persistentvolumeclaims/(?P<name>[^/]+)", "delete_pvc"),
        ("GET", r"/apis/storage\.k8s\.io/v1/storageclasses", "list_storage_classes"),
        ("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/secrets", "list_secrets"),
        ("POST", r"/api/v1/namespaces/(?P<ns>[^/]+)/secrets", "create_secret"),
        ("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/secrets/(?P<name>[^/]+)", "get_secret"),
        ("PUT", r"/api/v1/namespaces/(?P<ns>[^/]+)/secrets/(?P<name>[^/]+)", "update_secret"),
        ("PATCH", r"/api/v1/namespaces/(?P<ns>[^/]+)/secrets/(?P<name>[^/]+)", "update_secret"),
        ("DELETE", r"/api/v1/namespaces/(?P<ns>[^/]+)/secrets/(?P<name>[^/]+)", "delete_secret"),
        ("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/events", "list_events"),
        ("GET", r"/apis/policy/v1/poddisruptionbudgets", "list_pdbs"),
        ("GET", r"/apis/policy/v1/namespaces/(?P<ns>[^/]+)/poddisruptionbudgets", "list_pdbs"),
        ("POST", r"/apis/policy/v1/namespaces/(?P<ns>[^/]+)/poddisruptionbudgets", "create_pdb"),
        ("GET", r"/apis/policy/v1/namespaces/(?P<ns>[^/]+)/poddisruptionbudgets/(?P<name>[^/]+)", "get_pdb"),
        ("DELETE", r"/apis/policy/v1/namespaces/(?P<ns>[^/]+)/poddisruptionbudgets/(?P<name>[^/]+)", "delete_pdb"),
        ("PUT", r"/apis/policy/v1/namespaces/(?P<ns>[^/]+)/poddisruptionbudgets/(?P<name>[^/]+)", "update_pdb"),
        ("PATCH", r"/apis/policy/v1/namespaces/(?P<ns>[^/]+)/poddisruptionbudgets/(?P<name>[^/]+)", "update_pdb"),
        ("GET", r"/api/v1/services", "list_services"),
        ("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/services", "list_services"),
        ("POST", r"/api/v1/namespaces/(?P<ns>[^/]+)/services", "create_service"),
        ("GET", r"/api/v1/namespaces/(?P<ns>[^/]+)/services/(?P<name>[^/]+)", "get_service"),
        ("DELETE", r"/api/v1/namespaces/(?P<ns>[^/]+)/services/(?P<name>[^/]+)", "delete_service"),
        ("GET", r"/apis/networking\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/ingresses", "list_ingresses"),
        ("POST", r"/apis/networking\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/ingresses", "create_ingress"),
        ("GET", r"/apis/networking\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/ingresses/(?P<name>[^/]+)", "get_ingress"),
        ("DELETE", r"/apis/networking\.k8s\.io/v1/namespaces/(?P<ns>[^/]+)/ingresses/(?P<name>[^/]+)",
         "delete_ingress"),
    ]

    def handle(self, method: str, raw_path: str, headers: dict[str, str], body: bytes) -> Response:
        parts = urlsplit(raw_path)
        path = parts.path.rstrip("/")
        query = {k: v[-1] for k, v in parse_qs(parts.query, keep_blank_values=True).items()}
        content_type = (headers.get("content-type") or "").split(";")[0].strip()
        try:
            payload = json.loads(body) if body else None
        except ValueError:
            return Response(400, ApiFailure(400, "BadRequest", "invalid JSON body").status())
        with self.lock:
            self.requests.append(Recorded(method, path, query, payload, content_type))
            self._reap()
        fault = self._take_fault(method, path)
        if fault is not None:
            if fault.kind == "status":
                reason = {409: "Conflict", 429: "TooManyRequests", 503: "ServiceUnavailable"}.get(
                    fault.status, "InternalError")
                return Response(fault.status, ApiFailure(fault.status, reason, "injected fault").status())
            if fault.kind == "hang" and fault.then == "drop":  # never reaches storage
                self._hang(fault.seconds)
                return Response(504, drop=True)
            if fault.kind == "race" and fault.action is not None:
                fault.action(self)
            if fault.kind == "meet" and fault.barrier is not None:
                try:
                    fault.barrier.wait(fault.seconds)
                except threading.BrokenBarrierError:
                    return Response(503, ApiFailure(503, "ServiceUnavailable", (
                        f"injected fault: {fault.barrier.parties} requests were to be in flight at once; they "
                        f"did not all arrive within {fault.seconds} s")).status())
        response = self._route(method, path, query, payload, content_type)
        if fault is not None and fault.kind == "hang":  # applied, but the answer never arrives
            self._hang(fault.seconds)
            return Response(504, drop=True)
        return response

    def _hang(self, seconds: float) -> None:
        with self.lock:
            self.hanging += 1
        try:
            self.closing.wait(seconds)
        finally:
            with self.lock:
                self.hanging -= 1

    def _route(self, method: str, path: str, query: dict[str, str], payload: Any, content_type: str) -> Response:
        for route_method, pattern, handler in self.ROUTES:
            match = re.fullmatch(pattern, path)
            if match and route_method == method:
                try:
                    with self.lock:
                        return getattr(self, "_" + handler)(query=query, body=payload, content_type=content_type,
                                                            **match.groupdict())
                except ApiFailure as failure:
                    return Response(failure.code, failure.status())
                except SelectorError as exc:
                    return Response(400, ApiFailure(400, "BadRequest", str(exc)).status())
        if any(re.fullmatch(p, path) for _, p, _ in self.ROUTES):
            return Response(405, ApiFailure(405, "MethodNotAllowed", f"{method} is not supported").status())
        return Response(404, ApiFailure(404, "NotFound", "the server could not find the requested resource").status())

    # ================================================================ generic list / watch

    def _list(self, kind: str, items: list[dict[str, Any]], query: dict[str, str], fields: dict[str, Any],
              match_extra: Callable[[dict[str, Any]], bool] = lambda o: True) -> Response:
        label_sel, field_sel = query.get("labelSelector"), query.get("fieldSelector")

        def matches(obj: dict[str, Any]) -> bool:
            return (match_extra(obj) and label_selector_matches(label_sel, _labels(obj))
                    and field_selector_matches(field_sel, obj, fields))

        if query.get("watch") in ("true", "1"):
            return Response(200, stream=self._watch_stream(kind, matches, query), content_type="application/json")
        selected = sorted((o for o in items if matches(o)),
                          key=lambda o: (o["metadata"].get("namespace", ""), o["metadata"]["name"]))
        start = 0
        if query.get("continue"):
            start = json.loads(base64.b64decode(query["continue"]))["start"]
        limit = int(query.get("limit") or 0)
        page = selected[start:start + limit] if limit else selected[start:]
        meta: dict[str, Any] = {"resourceVersion": str(self.rv)}
        if limit and start + limit < len(selected):
            meta["continue"] = base64.b64encode(json.dumps({"start": start + limit}).encode()).decode()
            meta["remainingItemCount"] = len(selected) - start - limit
        list_kind, api_version = LIST_KINDS.get(kind, ("List", "v1"))
        return Response(200, {"kind": list_kind, "apiVersion": api_version, "metadata": meta,
                              "items": [self._present(kind, o) for o in page]})

    def _present(self, kind: str, obj: dict[str, Any]) -> dict[str, Any]:
        if kind == "poddisruptionbudgets":
            return self._pdb_with_status(obj)
        return copy.deepcopy(obj)

    def _watch_stream(self, kind: str, matches: Callable[[dict[str, Any]], bool],
                      query: dict[str, str]) -> Iterator[bytes]:
        timeout = float(query.get("timeoutSeconds") or 1800)
        deadline = time.monotonic() + timeout
        requested = query.get("resourceVersion") or ""

        def line(type_: str, obj: dict[str, Any]) -> bytes:
            return (json.dumps({"type": type_, "object": obj}) + "\n").encode()

        def expired(rv: int) -> bytes:
            return line("ERROR", ApiFailure(410, "Expired", f"too old resource version: {rv} ({self.compacted_rv})"
                                            ).status())

        with self.lock:
            if requested in ("", "0"):
                cursor = self.rv
                store = {"pods": self.pods, "nodes": self.nodes}[kind]
                backlog = [line("ADDED", copy.deepcopy(o)) for o in store.values() if matches(o)]
            else:
                cursor = int(requested)
                backlog = []
        yield from backlog
        while not self.closing.is_set():
            with self.lock:
                if cursor < self.compacted_rv:
                    yield expired(cursor)
                    return
                pending = [e for e in self.history if e.rv > cursor and e.kind == kind]
                if not pending:
                    remaining = deadline - time.monotonic()
                    if remaining <= 0:
                        return
                    self.changed.wait(min(remaining, 0.25))
                    continue
            for event in pending:
                cursor = event.rv
                now_match = matches(event.obj)
                was_match = event.old is not None and matches(event.old)
                if event.type == "MODIFIED" and was_match and not now_match:
                    yield line("DELETED", event.obj)
                elif event.type == "MODIFIED" and now_match and not was_match:
                    yield line("ADDED", event.obj)
                elif now_match:
                    yield line(event.type, event.obj)

    # ================================================================ namespaces

    def add_namespace(self, name: str, *, restricted: bool = True, labels: dict[str, str] | None = None) -> None:
        all_labels = {"kubernetes.io/metadata.name": name, **(labels or {})}
        if restricted:
            all_labels[PSA_ENFORCE] = "restricted"
        with self.lock:
            obj = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": name, "labels": all_labels},
                   "status": {"phase": "Active"}}
            self._stamp_new(obj, None)
            self.namespaces[name] = obj

    def _list_namespaces(self, *, query: dict[str, str], **_: Any) -> Response:
        return self._list("namespaces", list(self.namespaces.values()), query, GENERIC_FIELDS)

    def _create_namespace(self, *, body: dict[str, Any], **_: Any) -> Response:
        name = body["metadata"]["name"]
        if name in self.namespaces:
            raise ApiFailure(409, "AlreadyExists", f'namespaces "{name}" already exists', kind="namespaces", name=name)
        labels = dict(body["metadata"].get("labels") or {})
        self.add_namespace(name, restricted=False, labels=labels)
        return Response(201, copy.deepcopy(self.namespaces[name]))

    def _get_namespace(self, *, name: str, **_: Any) -> Response:
        if name not in self.namespaces:
            raise not_found("namespaces", name)
        return Response(200, copy.deepcopy(self.namespaces[name]))

    def _delete_namespace(self, *, name: str, **_: Any) -> Response:
        if name not in self.namespaces:
            raise not_found("namespaces", name)
        for key in [k for k in self.pods if k[0] == name]:
            self._remove_pod(key)
        for key in [k for k in self.pdbs if k[0] == name]:
            del self.pdbs[key]
        return Response(200, self.namespaces.pop(name))

    # ================================================================ pods: create

    def _list_pods(self, *, query: dict[str, str], ns: str | None = None, **_: Any) -> Response:
        if ns is not None and ns not in self.namespaces:
            return self._list("pods", [], query, POD_FIELDS)
        return self._list("pods", list(self.pods.values()), query, POD_FIELDS,
                          lambda o: ns is None or o["metadata"]["namespace"] == ns)

    def _create_pod(self, *, ns: str, body: dict[str, Any], **_: Any) -> Response:
        if ns not in self.namespaces:
            raise not_found("namespaces", ns)
        if not isinstance(body, dict) or body.get("kind", "Pod") != "Pod":
            raise ApiFailure(400, "BadRequest", "the body is not a Pod")
        pod = copy.deepcopy(body)
        meta = pod.setdefault("metadata", {})
        name = meta.get("name") or ""
        if meta.get("namespace") not in (None, "", ns):
            raise ApiFailure(400, "BadRequest", "the namespace of the object does not match the namespace on the URL")
        if not name or not DNS1123.match(name) or len(name) > 253:
            raise invalid("pods", name, [f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 subdomain'])
        spec = pod.setdefault("spec", {})
        # --- mutating admission: Priority plugin resolves the class (403 if it does not exist)
        class_name = spec.get("priorityClassName")
        if class_name:
            if class_name not in self.priority_classes:
                raise ApiFailure(403, "Forbidden",
                                 f'pods "{name}" is forbidden: no PriorityClass with name {class_name} was found',
                                 kind="pods", name=name)
            spec["priority"] = self.priority_classes[class_name]["value"]
            spec.setdefault("preemptionPolicy", self.priority_classes[class_name].get("preemptionPolicy",
                                                                                    "PreemptLowerPriority"))
        else:
            spec["priority"] = 0
        # defaults
        spec.setdefault("restartPolicy", "Always")
        spec.setdefault("terminationGracePeriodSeconds", 30)
        spec.setdefault("schedulerName", "default-scheduler")
        for _, container in _all_containers(spec):
            res = container.setdefault("resources", {})
            limits = res.get("limits") or {}
            requests = res.setdefault("requests", {})
            for rname, amount in limits.items():
                requests.setdefault(rname, amount)  # requests default to limits
        # --- validation
        errors = self._validate_pod_spec(spec)
        if errors:
            raise invalid("pods", name, errors)
        # --- validating admission: PodSecurity
        if self.namespaces[ns]["metadata"]["labels"].get(PSA_ENFORCE) == "restricted":
            violations = restricted_violations(spec)
            if violations:
                raise ApiFailure(403, "Forbidden",
                                 f'pods "{name}" is forbidden: violates PodSecurity "restricted:latest": '
                                 + ", ".join(violations), kind="pods", name=name)
        # --- validating admission: ResourceQuota charges the namespace's quotas (403 when over). It runs
        # before storage, so a duplicate that fits is charged and then refused below with 409.
        self._admit_quota(ns, name, pod)
        # --- storage
        if (ns, name) in self.pods:
            raise ApiFailure(409, "AlreadyExists", f'pods "{name}" already exists', kind="pods", name=name)
        self._stamp_new(pod, ns)
        gated = bool(spec.get("schedulingGates"))
        pod["status"] = {
            "phase": "Pending",
            "qosClass": "Guaranteed",
            "conditions": [{"type": "PodScheduled", "status": "False", "reason": "SchedulingGated",
                            "message": "Scheduling is blocked due to non-empty scheduling gates"}] if gated else [],
        }
        self.pods[(ns, name)] = pod
        self._record("pods", "ADDED", pod)
        return Response(201, copy.deepcopy(pod))

    def _validate_pod_spec(self, spec: dict[str, Any]) -> list[str]:
        errors: list[str] = []
        if not spec.get("containers"):
            errors.append("spec.containers: Required value")
        for path, c in _all_containers(spec):
            if not c.get("name"):
                errors.append(f"{path}.name: Required value")
            if not c.get("image") and "containers" in path:
                errors.append(f"{path}.image: Required value")
            res = c.get("resources") or {}
            limits, requests = res.get("limits") or {}, res.get("requests") or {}
            for kind, amounts in (("limits", limits), ("requests", requests)):
                for rname, amount in amounts.items():
                    try:
                        q = _q(amount)
                    except (ValueError, TypeError):
                        errors.append(f'{path}.resources.{kind}[{rname}]: Invalid value: "{amount}": quantity')
                        continue
                    if is_extended_resource(rname) and q != q.to_integral_value():
                        errors.append(f'{path}.resources.{kind}[{rname}]: Invalid value: "{amount}": must be an integer')
            for rname, amount in requests.items():
                if is_extended_resource(rname):
                    if rname not in limits:
                        errors.append(f"{path}.resources.limits[{rname}]: Required value: "
                                      "Limit must be set for non overcommitable resources")
                    elif _q(amount) != _q(limits[rname]):
                        errors.append(f'{path}.resources.requests[{rname}]: Invalid value: "{amount}": '
                                      f"must be equal to {rname} limit of {limits[rname]}")
                elif rname in limits and _q(amount) > _q(limits[rname]):
                    errors.append(f'{path}.resources.requests[{rname}]: Invalid value: "{amount}": '
                                  f"must be less than or equal to {rname} limit of {limits[rname]}")
        gates = [g.get("name") for g in spec.get("schedulingGates") or []]
        if len(gates) != len(set(gates)):
            errors.append("spec.schedulingGates: Duplicate value")
        if gates and spec.get("nodeName"):
            errors.append("spec.nodeName: Forbidden: cannot be set until all schedulingGates have been cleared")
        for path, c in _all_containers(spec):  # HAMi's admission webhook: a share is of exactly one GPU
            limits = (c.get("resources") or {}).get("limits") or {}
            if SCHEDULER_IGNORED & set(limits):
                if _q(limits.get("nvidia.com/gpu", 0)) != 1:
                    errors.append(f"{path}.resources.limits[nvidia.com/gpu]: Invalid value: a share "
                                  "(nvidia.com/gpumem, nvidia.com/gpucores) is of exactly 1 GPU")
                cores = limits.get("nvidia.com/gpucores")
                if cores is not None and not (0 < _q(cores) <= 100):
                    errors.append(f'{path}.resources.limits[nvidia.com/gpucores]: Invalid value: "{cores}": '
                                  "1 to 100 per cent")
        for key in ("hostname", "subdomain"):
            value = spec.get(key)
            if value is not None and not (isinstance(value, str) and DNS1123_LABEL.match(value)):
                errors.append(f'spec.{key}: Invalid value: "{value}": a lowercase RFC 1123 label (up to 63)')
        if spec.get("restartPolicy") not in ("Always", "OnFailure", "Never"):
            errors.append(f"spec.restartPolicy: Unsupported value: {spec.get('restartPolicy')!r}")
        return errors

    # ================================================================ secrets

    def _validate_secret(self, obj: dict[str, Any]) -> list[str]:
        name = obj["metadata"].get("name") or ""
        errors = []
        if not name or not DNS1123.match(name) or len(name) > 253:
            errors.append(f'metadata.name: Invalid value: "{name}": a lowercase RFC 1123 subdomain')
        data = obj.get("data") or {}
        if not isinstance(data, dict):
            return [*errors, "data: Invalid value: must be an object"]
        total = 0
        for key, value in data.items():
            if not SECRET_KEY.match(key) or key in (".", ".."):
                errors.append(f'data[{key}]: Invalid value: "{key}": a valid config key must consist of '
                              "alphanumeric characters, '-', '_' or '.'")
            try:
                total += len(base64.b64decode(value, validate=True))
            except (ValueError, TypeError):
                errors.append(f"data[{key}]: Invalid value: illegal base64 data")
        if total > 1024 * 1024:
            errors.append("data: Too long: must have at most 1048576 bytes")
        required = SECRET_TYPE_KEYS.get(obj.get("type") or "Opaque")
        if required and required not in data:
            errors.append(f"data[{required}]: Required value")
        return errors

    def _create_secret(self, *, ns: str, body: dict[str, Any], **_: Any) -> Response:
        if ns not in self.namespaces:
            raise not_found("namespaces", ns)
        if not isinstance(body, dict) or body.get("kind", "Secret") != "Secret":
            raise ApiFailure(400, "BadRequest", "the body is not a Secret")
        obj = copy.deepcopy(body)
        meta = obj.setdefault("metadata", {})
        if meta.get("namespace") not in (None, "", ns):
            raise ApiFailure(400, "BadRequest", "the namespace of the object does not match the namespace on the URL")
        obj.setdefault("type", "Opaque")
        for key, value in (obj.pop("stringData", None) or {}).items():  # write-only, merged into data
            obj.setdefault("data", {})[key] = base64.b64encode(str(value).encode()).decode()
        errors = self._validate_secret(obj)
        if errors:
            raise invalid("secrets", meta.get("name") or "", errors)
        name = meta["name"]
        if (ns, name) in self.secrets:
            raise ApiFailure(409, "AlreadyExists", f'secrets "{name}" already exists', kind="secrets", name=name)
        self._stamp_new(obj, ns)
        self.secrets[(ns, name)] = obj
        return Response(201, copy.deepcopy(obj))

    def _secret(self, ns: str, name: str) -> dict[str, Any]:
        obj = self.secrets.get((ns, name))
        if obj is None:
            raise not_found("secrets", name)
        return obj

    def _get_secret(self, *, ns: str, name: str, **_: Any) -> Response:
        return Response(200, copy.deepcopy(self._secret(ns, name)))

    def _list_secrets(self, *, ns: str, query: dict[str, str], **_: Any) -> Response:
        return self._list("secrets", [o for (n, _), o in self.secrets.items() if n == ns], query, GENERIC_FIELDS)

    def _update_secret(self, *, ns: str, name: str, body: Any, content_type: str, **_: Any) -> Response:
        current = self._secret(ns, name)
        method = "PUT" if not content_type.endswith("patch+json") else "PATCH"
        new = self._apply_update(current, body, content_type, method)
        self._check_meta_update("secrets", current, new)
        new.setdefault("type", "Opaque")
        errors = self._validate_secret(new)
        if new["type"] != current.get("type", "Opaque"):
            errors.append(f'type: Invalid value: "{new["type"]}": field is immutable')
        if errors:
            raise invalid("secrets", name, errors)
        new["metadata"]["resourceVersion"] = str(self._next_rv())
        self.secrets[(ns, name)] = new
        return Response(200, copy.deepcopy(new))

    def _delete_secret(self, *, ns: str, name: str, **_: Any) -> Response:
        self._secret(ns, name)
        obj = self.secrets.pop((ns, name))
        return Response(200, {"kind": "Status", "apiVersion": "v1", "status": "Success",
                              "details": {"name": name, "kind": "secrets", "uid": obj["metadata"]["uid"]}})

    def add_secret(self, ns: str, name: str, data: dict[str, str], *, type_: str = "Opaque") -> None:
        """A Secret someone else made in the namespace (plain text values)."""
        with self.lock:
            self._create_secret(ns=ns, body={"metadata": {"name": name}, "type": type_, "data": {
                k: base64.b64encode(v.encode()).decode() for k, v in data.items()}})

    def secret_text(self, ns: str, name: str) -> dict[str, str]:
        """A stored Secret's data, decoded (for assertions)."""
        with self.lock:
            obj = self.secrets[(ns, name)]
            return {k: base64.b64decode(v).decode() for k, v in (obj.get("data") or {}).items()}

    # ================================================================ events

    def _kubelet_event(self, pod: dict[str, Any], reason: str, message: str, type_: str = "Warning") -> None:
        meta = pod["metadata"]
        self.events.append({
            "apiVersion": "v1", "kind": "Event", "type": type_, "reason": reason, "message": message,
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:16]}", "namespace": meta["namespace"],
                         "resourceVersion": str(self._next_rv())},
            "involvedObject": {"kind": "Pod", "name": meta["name"], "namespace": meta["namespace"],
                               "uid": meta["uid"]},
            "source": {"component": "kubelet"}, "lastTimestamp": iso(self.now()),
        })

    def _list_events(self, *, ns: str, query: dict[str, str], **_: Any) -> Response:
        return self._list("events", [e for e in self.events if e["metadata"]["namespace"] == ns], query,
                          GENERIC_FIELDS)

    def pod_events(self, ns: str, name: str) -> list[dict[str, Any]]:
        with self.lock:
            return [copy.deepcopy(e) for e in self.events
                    if e["metadata"]["namespace"] == ns and e["involvedObject"]["name"] == name]

    def _secret_problems(self, pod: dict[str, Any]) -> tuple[str, str] | None:
        """What the kubelet says before starting a pod whose Secrets are not all in its namespace:
        (waiting reason, message), or None. Image pull secrets that are missing are only a warning event
        (the image is then pulled without them)."""
        ns, spec = pod["metadata"]["namespace"], pod["spec"]
        for ref in spec.get("imagePullSecrets") or []:
            if (ns, ref.get("name")) not in self.secrets:
                self._kubelet_event(pod, "FailedToRetrieveImagePullSecret",
                            f'Unable to retrieve some image pull secrets ({ref.get("name")}); attempting to pull '
                            "the image may not succeed.")
        for volume in spec.get("volumes") or []:
            source = volume.get("secret")
            if source and not source.get("optional") and (ns, source.get("secretName")) not in self.secrets:
                message = f'MountVolume.SetUp failed for volume "{volume.get("name")}" : secret ' \
                          f'"{source.get("secretName")}" not found'
                self._kubelet_event(pod, "FailedMount", message)
                return "ContainerCreating", message
        for _, container in _all_containers(spec):
            for env in container.get("env") or []:
                ref = (env.get("valueFrom") or {}).get("secretKeyRef")
                if not ref or ref.get("optional"):
                    continue
                secret = self.secrets.get((ns, ref.get("name")))
                if secret is None:
                    message = f'secret "{ref.get("name")}" not found'
                elif ref.get("key") not in (secret.get("data") or {}):
                    message = f"couldn't find key {ref.get('key')} in Secret {ns}/{ref.get('name')}"
                else:
                    continue
                self._kubelet_event(pod, "Failed", f"Error: {message}")
                return "CreateContainerConfigError", message
        return None

    # ================================================================ pods: read / update / delete

    def _pod(self, ns: str, name: str) -> dict[str, Any]:
        pod = self.pods.get((ns, name))
        if pod is None:
            raise not_found("pods", name)
        return pod

    def _get_pod(self, *, ns: str, name: str, **_: Any) -> Response:
        return Response(200, copy.deepcopy(self._pod(ns, name)))

    def _apply_update(self, current: dict[str, Any], body: Any, content_type: str, method: str) -> dict[str, Any]:
        try:
            if method == "PUT":
                return copy.deepcopy(body)
            if content_type == "application/json-patch+json":
                return apply_json_patch(current, body)
            if content_type in ("application/merge-patch+json", "application/strategic-merge-patch+json"):
                return apply_merge_patch(current, body)
        except PatchError as exc:
            raise ApiFailure(422, "", str(exc))  # what patch.go answers for a failed JSON patch
        raise ApiFailure(415, "UnsupportedMediaType", f"the body of the request was in an unknown format: "
                         f"{content_type}")

    def _check_meta_update(self, kind: str, current: dict[str, Any], new: dict[str, Any]) -> None:
        name = current["metadata"]["name"]
        meta = new.setdefault("metadata", {})
        if meta.get("name") != name:
            raise ApiFailure(400, "BadRequest", "the name of the object does not match the name on the URL")
        if meta.get("uid") not in (None, current["metadata"]["uid"]):
            raise ApiFailure(409, "Conflict", f'Operation cannot be fulfilled on {kind} "{name}": '
                             "Precondition failed: UID in precondition", kind=kind, name=name)
        sent = meta.get("resourceVersion")
        if sent and sent != current["metadata"]["resourceVersion"]:
            raise ApiFailure(409, "Conflict", f'Operation cannot be fulfilled on {kind} "{name}": the object has been '
                             "modified; please apply your changes to the latest version and try again",
                             kind=kind, name=name)
        for system in ("uid", "creationTimestamp", "namespace", "deletionTimestamp", "deletionGracePeriodSeconds"):
            if system in current["metadata"]:
                meta[system] = current["metadata"][system]
            else:
                meta.pop(system, None)

    def _update_pod(self, *, ns: str, name: str, body: Any, content_type: str, **_: Any) -> Response:
        current = self._pod(ns, name)
        method = "PUT" if not content_type.endswith("patch+json") else "PATCH"
        new = self._apply_update(current, body, content_type, method)
        self._check_meta_update("pods", current, new)
        errors = validate_pod_update(current["spec"], new.get("spec") or {})
        errors += [e for e in self._validate_pod_spec(new.get("spec") or {}) if "nodeName" not in e]
        if errors:
            raise invalid("pods", name, errors)
        new["status"] = copy.deepcopy(current.get("status") or {})  # status only through the status subresource
        if current["spec"].get("schedulingGates") and not new["spec"].get("schedulingGates"):
            new["status"]["conditions"] = [c for c in new["status"].get("conditions") or []
                                           if c.get("reason") != "SchedulingGated"]
        new["metadata"]["resourceVersion"] = str(self._next_rv())
        old = self.pods[(ns, name)]
        self.pods[(ns, name)] = new
        self._record("pods", "MODIFIED", new, old)
        return Response(200, copy.deepcopy(new))

    def _remove_pod(self, key: tuple[str, str]) -> dict[str, Any]:
        pod = self.pods.pop(key)
        pod["metadata"]["resourceVersion"] = str(self._next_rv())
        self._record("pods", "DELETED", pod)
        self.resync_quotas(key[0])  # the quota controller's replenishment reacts to deletions
        return pod

    def _graceful_delete(self, pod: dict[str, Any], grace: int | None) -> dict[str, Any]:
        key = (pod["metadata"]["namespace"], pod["metadata"]["name"])
        if grace is None:
            grace = int(pod["spec"].get("terminationGracePeriodSeconds", 30))
        phase = (pod.get("status") or {}).get("phase")
        if not pod["spec"].get("nodeName") or phase in ("Succeeded", "Failed") or grace == 0:
            return self._remove_pod(key)  # nothing runs: gone at once, as on a real cluster
        if pod["metadata"].get("deletionTimestamp"):
            return copy.deepcopy(pod)
        old = copy.deepcopy(pod)
        # As the API server: the timestamp is when the grace period ends, the moment the pod may be gone by.
        pod["metadata"]["deletionTimestamp"] = iso(self.now() + grace)
        pod["metadata"]["deletionGracePeriodSeconds"] = grace
        pod["metadata"]["resourceVersion"] = str(self._next_rv())
        self._record("pods", "MODIFIED", pod, old)
        return copy.deepcopy(pod)

    def _delete_pod(self, *, ns: str, name: str, query: dict[str, str], body: Any, **_: Any) -> Response:
        pod = self._pod(ns, name)
        options = body or {}
        pre = options.get("preconditions") or {}
        if pre.get("resourceVersion") and pre["resourceVersion"] != pod["metadata"]["resourceVersion"]:
            raise ApiFailure(409, "Conflict", f'Operation cannot be fulfilled on pods "{name}": precondition '
                             "failed: resourceVersion", kind="pods", name=name)
        grace = query.get("gracePeriodSeconds", options.get("gracePeriodSeconds"))
        return Response(200, self._graceful_delete(pod, None if grace is None else int(grace)))

    def _delete_pods(self, *, ns: str, query: dict[str, str], body: Any, **_: Any) -> Response:
        """deletecollection: every pod of the namespace the label selector matches, each deleted gracefully."""
        grace = query.get("gracePeriodSeconds", (body or {}).get("gracePeriodSeconds"))
        selector = query.get("labelSelector")
        deleted = [self._graceful_delete(p, None if grace is None else int(grace))
                   for (pns, _), p in sorted(self.pods.items())
                   if pns == ns and label_selector_matches(selector, _labels(p))]
        return Response(200, {"kind": "PodList", "apiVersion": "v1", "metadata": {}, "items": deleted})

    # ================================================================ eviction

    def _evict_pod(self, *, ns: str, name: str, body: Any, **_: Any) -> Response:
        pod = self._pod(ns, name)
        if not isinstance(body, dict) or body.get("kind") != "Eviction" or \
                (body.get("metadata") or {}).get("name") != name:
            raise ApiFailure(400, "BadRequest", "name in URL does not match name in Eviction object")
        phase = (pod.get("status") or {}).get("phase")
        terminating = bool(pod["metadata"].get("deletionTimestamp"))
        # canIgnorePDB: terminal, pending or already terminating pods are evicted without a PDB check.
        if not (phase in ("Succeeded", "Failed", "Pending") or terminating):
            pdbs = [p for (pns, _), p in self.pdbs.items()
                    if pns == ns and match_labels_selector(p["spec"].get("selector"), _labels(pod))]
            if len(pdbs) > 1:
                raise ApiFailure(500, "InternalError",
                                 "This pod has more than one PodDisruptionBudget, which the eviction subresource "
                                 "does not support.")
            if pdbs:
                status = self._pdb_with_status(pdbs[0])["status"]
                # An unready pod goes without charging the budget under AlwaysAllow, or (IfHealthyBudget, the
                # default) while the application is healthy enough; otherwise the budget decides as for any pod.
                unready_ok = not _pod_healthy(pod) and (
                    pdbs[0]["spec"].get("unhealthyPodEvictionPolicy") == "AlwaysAllow"
                    or 0 < status["desiredHealthy"] <= status["currentHealthy"])
                allowed = unready_ok or status["disruptionsAllowed"] > 0
                if not allowed:
                    pdb_name = pdbs[0]["metadata"]["name"]
                    raise ApiFailure(
                        429, "TooManyRequests", "Cannot evict pod as it would violate the pod's disruption budget.",
                        causes=[{"reason": "DisruptionBudget",
                                 "message": f"The disruption budget {pdb_name} needs {status['desiredHealthy']} "
                                            f"healthy pods and has {status['currentHealthy']} currently"}])
        if not terminating and phase not in ("Succeeded", "Failed"):
            old = copy.deepcopy(pod)
            conditions = pod.setdefault("status", {}).setdefault("conditions", [])
            conditions.append({"type": "DisruptionTarget", "status": "True", "reason": "EvictionByEvictionAPI",
                               "message": "Eviction API: evicting", "lastTransitionTime": now_iso()})
            pod["metadata"]["resourceVersion"] = str(self._next_rv())
            self._record("pods", "MODIFIED", pod, old)
        grace = ((body.get("deleteOptions") or {}).get("gracePeriodSeconds"))
        self._graceful_delete(pod, grace)
        return Response(201, {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success", "code": 201})

    # ================================================================ logs

    def _pod_log(self, *, ns: str, name: str, query: dict[str, str], **_: Any) -> Response:
        pod = self._pod(ns, name)
        container = query.get("container") or pod["spec"]["containers"][0]["name"]
        if container not in [c["name"] for c in pod["spec"]["containers"]]:
            raise ApiFailure(400, "BadRequest", f"container {container} is not valid for pod {name}")
        if not pod["spec"].get("nodeName"):
            raise ApiFailure(400, "BadRequest", f"pod {name} does not have a host assigned")
        if (pod.get("status") or {}).get("phase") == "Pending":
            raise ApiFailure(400, "BadRequest",
                             f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating')
        lines = self._stamped_log(ns, name, query)
        tail = query.get("tailLines")
        start = max(0, len(lines) - int(tail)) if tail else 0
        if query.get("follow") not in ("true", "1"):
            return Response(200, stream=iter([("".join(f"{x}\n" for x in lines[start:])).encode()]),
                            content_type="text/plain")
        return Response(200, stream=self._follow_log(ns, name, query, len(self.logs.get((ns, name), [])) -
                                                     len(lines) + start), content_type="text/plain")

    def _stamped_log(self, ns: str, name: str, query: dict[str, str]) -> list[str]:
        """The kubelet's view of the log: each line keeps the time it was first read (the kubelet stamps lines
        as the container writes them); ``timestamps`` prefixes it, ``sinceSeconds`` leaves out older lines."""
        lines = self.logs.get((ns, name), [])
        stamps = self.log_stamps.setdefault((ns, name), [])
        now = datetime.fromtimestamp(self.now(), tz=UTC)  # the kubelet's clock
        stamps.extend([max([now, *stamps[-1:]])] * (len(lines) - len(stamps)))
        stamped = list(zip(stamps, lines, strict=False))
        if query.get("sinceSeconds"):
            stamped = [(at, x) for at, x in stamped if at >= now - timedelta(seconds=int(query["sinceSeconds"]))]
        if query.get("timestamps") in ("true", "1"):
            return [f"{at:%Y-%m-%dT%H:%M:%S.%f}000Z {x}" for at, x in stamped]
        return [x for _, x in stamped]

    def _follow_log(self, ns: str, name: str, query: dict[str, str], start: int) -> Iterator[bytes]:
        sent = start
        while not self.closing.is_set():
            with self.lock:
                lines = self.logs.get((ns, name), [])
                fresh = self._stamped_log(ns, name, {**query, "sinceSeconds": ""})[sent:]
                sent = len(lines)
                pod = self.pods.get((ns, name))
                done = pod is None or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed")
                if not fresh and not done:
                    self.changed.wait(0.25)
            if fresh:
                yield "".join(f"{x}\n" for x in fresh).encode()
            elif done:
                return

    # ================================================================ nodes

    def _list_nodes(self, *, query: dict[str, str], **_: Any) -> Response:
        return self._list("nodes", list(self.nodes.values()), query, NODE_FIELDS)

    def _get_node(self, *, name: str, **_: Any) -> Response:
        if name not in self.nodes:
            raise not_found("nodes", name)
        return Response(200, copy.deepcopy(self.nodes[name]))

    # ================================================================ priority classes

    def add_priority_class(self, name: str, value: int, *, labels: dict[str, str] | None = None,
                           preemption_policy: str = "PreemptLowerPriority") -> None:
        with self.lock:
            obj = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                   "metadata": {"name": name, "labels": dict(labels or {})}, "value": value,
                   "preemptionPolicy": preemption_policy, "globalDefault": False}
            self._stamp_new(obj, None)
            self.priority_classes[name] = obj

    def _list_priority_classes(self, *, query: dict[str, str], **_: Any) -> Response:
        return self._list("priorityclasses", list(self.priority_classes.values()), query, GENERIC_FIELDS)

    def _get_priority_class(self, *, name: str, **_: Any) -> Response:
        if name not in self.priority_classes:
            raise not_found("priorityclasses.scheduling.k8s.io", name)
        return Response(200, copy.deepcopy(self.priority_classes[name]))

    def _validate_priority_class(self, obj: dict[str, Any]) -> list[str]:
        errors = []
        if not isinstance(obj.get("value"), int) or isinstance(obj.get("value"), bool):
            errors.append("value: Required value")
        elif obj["value"] > 1000000000 and not obj["metadata"]["name"].startswith("system-"):
            errors.append("value: Invalid value: must be no greater than 1000000000")
        if obj.get("preemptionPolicy", "PreemptLowerPriority") not in ("PreemptLowerPriority", "Never"):
            errors.append("preemptionPolicy: Unsupported value")
        if obj.get("globalDefault") and any(p.get("globalDefault") for n, p in self.priority_classes.items()
                                            if n != obj["metadata"]["name"]):
            errors.append("globalDefault: Invalid value: true: only one PriorityClass can be marked as globalDefault")
        return errors

    def _create_priority_class(self, *, body: dict[str, Any], **_: Any) -> Response:
        name = (body.get("metadata") or {}).get("name", "")
        if name.startswith("system-"):
            raise ApiFailure(403, "Forbidden", f'priorityclasses "{name}" is forbidden: priority class names with '
                             '"system-" prefix are reserved', kind="priorityclasses", name=name)
        if name in self.priority_classes:
            raise ApiFailure(409, "AlreadyExists", f'priorityclasses.scheduling.k8s.io "{name}" already exists',
                             kind="priorityclasses", name=name)
        obj = copy.deepcopy(body)
        obj.setdefault("preemptionPolicy", "PreemptLowerPriority")
        errors = self._validate_priority_class(obj)
        if errors:
            raise invalid("priorityclasses", name, errors)
        self._stamp_new(obj, None)
        self.priority_classes[name] = obj
        return Response(201, copy.deepcopy(obj))

    def _update_priority_class(self, *, name: str, body: Any, content_type: str, **_: Any) -> Response:
        current = self.priority_classes.get(name)
        if current is None:
            raise not_found("priorityclasses.scheduling.k8s.io", name)
        method = "PUT" if not content_type.endswith("patch+json") else "PATCH"
        new = self._apply_update(current, body, content_type, method)
        self._check_meta_update("priorityclasses", current, new)
        new.setdefault("preemptionPolicy", "PreemptLowerPriority")
        errors = self._validate_priority_class(new)
        if new.get("value") != current.get("value"):
            errors.append("value: Forbidden: may not be changed in an update.")
        if new.get("preemptionPolicy") != current.get("preemptionPolicy"):
            errors.append("preemptionPolicy: Invalid value: field is immutable")
        if errors:
            raise invalid("priorityclasses", name, errors)
        new["metadata"]["resourceVersion"] = str(self._next_rv())
        self.priority_classes[name] = new
        return Response(200, copy.deepcopy(new))

    def _delete_priority_class(self, *, name: str, **_: Any) -> Response:
        if name not in self.priority_classes:
            raise not_found("priorityclasses.scheduling.k8s.io", name)
        if name.startswith("system-"):
            raise ApiFailure(403, "Forbidden", f"cannot delete system priority class {name}")
        del self.priority_classes[name]
        return Response(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    # ================================================================ pod disruption budgets

    def _pdb_with_status(self, pdb: dict[str, Any]) -> dict[str, Any]:
        out = copy.deepcopy(pdb)
        ns = pdb["metadata"]["namespace"]
        covered = [p for (pns, _), p in self.pods.items()
                   if pns == ns and match_labels_selector(pdb["spec"].get("selector"), _labels(p))
                   and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
        expected = len(covered)
        healthy = sum(1 for p in covered if _pod_healthy(p))
        spec = pdb["spec"]
        if "minAvailable" in spec:
            desired = _int_or_percent(spec["minAvailable"], expected)
        else:
            desired = max(0, expected - _int_or_percent(spec.get("maxUnavailable", 0), expected))
        # The disruption controller needs a controller's scale for maxUnavailable or a percentage; a covered
        # pod without a controller (the portal's are bare pods) makes it fail safe: no disruption allowed.
        needs_scale = "minAvailable" not in spec or str(spec["minAvailable"]).endswith("%")
        bare = any(not any(o.get("controller") for o in p["metadata"].get("ownerReferences") or []) for p in covered)
        out["status"] = {"currentHealthy": healthy, "desiredHealthy": desired, "expectedPods": expected,
                         "disruptionsAllowed": 0 if needs_scale and bare else max(0, healthy - desired),
                         "observedGeneration": pdb["metadata"].get("generation", 1)}
        return out

    def _list_pdbs(self, *, query: dict[str, str], ns: str | None = None, **_: Any) -> Response:
        return self._list("poddisruptionbudgets", list(self.pdbs.values()), query, GENERIC_FIELDS,
                          lambda o: ns is None or o["metadata"]["namespace"] == ns)

    def _create_pdb(self, *, ns: str, body: dict[str, Any], **_: Any) -> Response:
        if ns not in self.namespaces:
            raise not_found("namespaces", ns)
        name = (body.get("metadata") or {}).get("name", "")
        if (ns, name) in self.pdbs:
            raise ApiFailure(409, "AlreadyExists", f'poddisruptionbudgets.policy "{name}" already exists',
                             kind="poddisruptionbudgets", name=name)
        spec = body.get("spec") or {}
        if ("minAvailable" in spec) == ("maxUnavailable" in spec):
            raise invalid("poddisruptionbudgets", name, ["spec: minAvailable and maxUnavailable cannot be both set"
                                                         " or both unset"])
        obj = copy.deepcopy(body)
        self._stamp_new(obj, ns)
        obj["metadata"]["generation"] = 1
        self.pdbs[(ns, name)] = obj
        return Response(201, self._pdb_with_status(obj))

    def _get_pdb(self, *, ns: str, name: str, **_: Any) -> Response:
        if (ns, name) not in self.pdbs:
            raise not_found("poddisruptionbudgets.policy", name)
        return Response(200, self._pdb_with_status(self.pdbs[(ns, name)]))

    def _update_pdb(self, *, ns: str, name: str, body: Any, content_type: str, **_: Any) -> Response:
        """A PUT (whose stale resourceVersion is a 409) or a patch of a budget; its spec is validated as on
        create, and a changed spec is a new generation."""
        current = self.pdbs.get((ns, name))
        if current is None:
            raise not_found("poddisruptionbudgets.policy", name)
        method = "PUT" if not content_type.endswith("patch+json") else "PATCH"
        new = self._apply_update(current, body, content_type, method)
        self._check_meta_update("poddisruptionbudgets", current, new)
        spec = new.get("spec") or {}
        if ("minAvailable" in spec) == ("maxUnavailable" in spec):
            raise invalid("poddisruptionbudgets", name, ["spec: minAvailable and maxUnavailable cannot be both set"
                                                         " or both unset"])
        new.pop("status", None)
        if spec != current.get("spec"):
            new["metadata"]["generation"] = int(current["metadata"].get("generation", 1)) + 1
        new["metadata"]["resourceVersion"] = str(self._next_rv())
        self.pdbs[(ns, name)] = new
        return Response(200, self._pdb_with_status(new))

    def _delete_pdb(self, *, ns: str, name: str, **_: Any) -> Response:
        if (ns, name) not in self.pdbs:
            raise not_found("poddisruptionbudgets.policy", name)
        del self.pdbs[(ns, name)]
        return Response(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    # ================================================================ services (headless only)

    def _list_services(self, *, query: dict[str, str], ns: str | None = None, **_: Any) -> Response:
        return self._list("services", list(self.services.values()), query, GENERIC_FIELDS,
                          lambda o: ns is None or o["metadata"]["namespace"] == ns)

    def _create_service(self, *, ns: str, body: dict[str, Any], **_: Any) -> Response:
        if ns not in self.namespaces:
            raise not_found("namespaces", ns)
        if not isinstance(body, dict) or body.get("kind", "Service") != "Service":
            raise ApiFailure(400, "BadRequest", "the body is not a Service")
        name = (body.get("metadata") or {}).get("name") or ""
        spec = body.get("spec") or {}
        errors = []
        if not DNS1035_LABEL.match(name):
            errors.append(f'metadata.name: Invalid value: "{name}": a DNS-1035 label (starts with a letter)')
        if spec.get("clusterIP") not in (None, "None"):
            errors.append(f'spec.clusterIP: Invalid value: "{spec.get("clusterIP")}": this fake allocates cluster IPs '
                          'itself (leave it out) or serves headless Services (clusterIP "None")')
        selector = spec.get("selector")
        if not isinstance(selector, dict) or not selector:
            errors.append("spec.selector: Required value: this fake serves Services of pods, which select them")
        for i, port in enumerate(spec.get("ports") or []):
            number = port.get("port")
            if not isinstance(number, int) or not 1 <= number <= 65535:
                errors.append(f"spec.ports[{i}].port: Invalid value: {number!r}: must be between 1 and 65535")
            target = port.get("targetPort", number)
            if not ((isinstance(target, int) and 1 <= target <= 65535) or (
                    isinstance(target, str) and DNS1123_LABEL.match(target))):
                errors.append(f"spec.ports[{i}].targetPort: Invalid value: {target!r}: a port number (1-65535) "
                              "or a port name")
        if errors:
            raise invalid("services", name, errors)
        if (ns, name) in self.services:
            raise ApiFailure(409, "AlreadyExists", f'services "{name}" already exists', kind="services", name=name)
        obj = copy.deepcopy(body)
        self._stamp_new(obj, ns)
        obj["spec"].setdefault("type", "ClusterIP")
        if obj["spec"].get("clusterIP") == "None":
            obj["spec"]["clusterIPs"] = ["None"]
        else:
            self._next_ip = getattr(self, "_next_ip", 0) + 1
            obj["spec"]["clusterIP"] = f"10.96.{self._next_ip // 250}.{self._next_ip % 250 + 1}"
            obj["spec"]["clusterIPs"] = [obj["spec"]["clusterIP"]]
        self.services[(ns, name)] = obj
        return Response(201, copy.deepcopy(obj))

    def _get_service(self, *, ns: str, name: str, **_: Any) -> Response:
        if (ns, name) not in self.services:
            raise not_found("services", name)
        return Response(200, copy.deepcopy(self.services[(ns, name)]))

    def _delete_service(self, *, ns: str, name: str, **_: Any) -> Response:
        if (ns, name) not in self.services:
            raise not_found("services", name)
        del self.services[(ns, name)]
        return Response(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    def service_endpoints(self, ns: str, name: str) -> list[str]:
        """The DNS names the Service publishes (``<hostname>.<service>``): its selected pods whose subdomain is
        the Service, ready or not when it publishes not-ready addresses (as the endpoints controller does)."""
        with self.lock:
            svc = self.services.get((ns, name))
            if svc is None:
                return []
            spec = svc["spec"]
            out = []
            for (pns, _), pod in sorted(self.pods.items()):
                if pns != ns or not match_labels_selector({"matchLabels": spec["selector"]}, _labels(pod)):
                    continue
                if pod["spec"].get("subdomain") != name or not pod["spec"].get("hostname"):
                    continue
                if spec.get("publishNotReadyAddresses") or _pod_healthy(pod):
                    out.append(f"{pod['spec']['hostname']}.{name}")
            return out

    # ================================================================ ingresses (networking.k8s.io/v1)

    def _list_ingresses(self, *, ns: str, query: dict[str, str], **_: Any) -> Response:
        return self._list("ingresses", list(self.ingresses.values()), query, GENERIC_FIELDS,
                          lambda o: o["metadata"]["namespace"] == ns)

    def _create_ingress(self, *, ns: str, body: dict[str, Any], **_: Any) -> Response:
        if ns not in self.namespaces:
            raise not_found("namespaces", ns)
        if not isinstance(body, dict) or body.get("kind", "Ingress") != "Ingress":
            raise ApiFailure(400, "BadRequest", "the body is not an Ingress")
        name = (body.get("metadata") or {}).get("name") or ""
        errors = [] if DNS1123_LABEL.match(name) else [f'metadata.name: Invalid value: "{name}"']
        for r, rule in enumerate((body.get("spec") or {}).get("rules") or []):
            for i, path in enumerate(((rule.get("http") or {}).get("paths")) or []):
                where = f"spec.rules[{r}].http.paths[{i}]"
                if not str(path.get("path", "")).startswith("/"):
                    errors.append(f"{where}.path: Invalid value: must be an absolute path")
                if path.get("pathType") not in ("Exact", "Prefix", "ImplementationSpecific"):
                    errors.append(f"{where}.pathType: Unsupported value: {path.get('pathType')!r}")
                service = (path.get("backend") or {}).get("service") or {}
                port = service.get("port") or {}
                if not DNS1035_LABEL.match(str(service.get("name", ""))):
                    errors.append(f"{where}.backend.service.name: Invalid value: {service.get('name')!r}")
                if bool(port.get("name")) == bool(port.get("number")):
                    errors.append(f"{where}.backend.service.port: Invalid value: exactly one of name and number")
        if errors:
            raise invalid("ingresses", name, errors)
        if (ns, name) in self.ingresses:
            raise ApiFailure(409, "AlreadyExists", f'ingresses.networking.k8s.io "{name}" already exists',
                             kind="ingresses", name=name)
        obj = copy.deepcopy(body)
        self._stamp_new(obj, ns)
        self.ingresses[(ns, name)] = obj
        return Response(201, copy.deepcopy(obj))

    def _get_ingress(self, *, ns: str, name: str, **_: Any) -> Response:
        if (ns, name) not in self.ingresses:
            raise not_found("ingresses", name)
        return Response(200, copy.deepcopy(self.ingresses[(ns, name)]))

    def _delete_ingress(self, *, ns: str, name: str, **_: Any) -> Response:
        if (ns, name) not in self.ingresses:
            raise not_found("ingresses", name)
        del self.ingresses[(ns, name)]
        return Response(200, {"kind": "Status", "apiVersion": "v1", "status": "Success"})

    def route_problems(self, ns: str) -> list[str]:
        """What would keep a route from answering, as an ingress controller and the endpoints controller see
        it: a ClusterIP Service whose selector matches no live pod of its namespace, or whose targetPort no
        container of those pods declares; an Ingress whose backend names a Service that does not exist, or a
        port that Service does not have."""
        problems = []
        with self.lock:
            for (sns, name), svc in sorted(self.services.items()):
                if sns != ns or svc["spec"].get("clusterIP") == "None":
                    continue
                pods = [p for (pns, _), p in sorted(self.pods.items()) if pns == ns
                        and match_labels_selector({"matchLabels": svc["spec"]["selector"]}, _labels(p))
                        and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed")]
                if not pods:
                    problems.append(f"Service {name}: its selector matches no pod")
                declared = {cp.get("containerPort") for p in pods for _, c in _all_containers(p["spec"])
                            for cp in c.get("ports") or []}
                for port in svc["spec"].get("ports") or []:
                    if pods and isinstance(port.get("targetPort"), int) and port["targetPort"] not in declared:
                        problems.append(f"Service {name}: targetPort {port['targetPort']} is no container port")
            for (ins, name), ing in sorted(self.ingresses.items()):
                if ins != ns:
                    continue
                for rule in ing["spec"].get("rules") or []:
                    for path in (rule.get("http") or {}).get("paths") or []:
                        ref = path["backend"]["service"]
                        svc = self.services.get((ns, ref["name"]))
                        if svc is None:
                            problems.append(f"Ingress {name}: Service {ref['name']} does not exist")
                        elif ref["port"].get("name") and ref["port"]["name"] not in {
                                p.get("name") for p in svc["spec"].get("ports") or []}:
                            problems.append(f"Ingress {name}: Service {ref['name']} has no port {ref['port']['name']}")
        return problems

    # ================================================================ scheduler / kubelet helpers (tests only)

    def add_node(self, name: str, *, gpus: int = 0, resource: str = "nvidia.com/gpu",
                 labels: dict[str, str] | None = None, extra: dict[str, Any] | None = None, cpu: str = "64",
                 memory: str = "512Gi", taints: list[dict[str, str]] | None = None, unschedulable: bool = False,
                 ready: bool = True) -> None:
        allocatable: dict[str, Any] = {"cpu": cpu, "memory": memory, "pods": "110"}
        if gpus:
            allocatable[resource] = str(gpus)
        allocatable.update({k: str(v) for k, v in (extra or {}).items()})
        taints = list(taints or [])
        if unschedulable:
            taints.append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
        node = {
            "apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name, **(labels or {})}},
            "spec": {"unschedulable": unschedulable, "taints": taints},
            "status": {"capacity": dict(allocatable), "allocatable": allocatable,
                       "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]},
        }
        with self.lock:
            self._stamp_new(node, None)
            node["metadata"].pop("namespace", None)
            self.nodes[name] = node
            self._record("nodes", "ADDED", node)

    def remove_node(self, name: str) -> None:
        """The node leaves the cluster (scaled down, deleted); pods pinned to it can never be scheduled."""
        with self.lock:
            node = self.nodes.pop(name)
            node["metadata"]["resourceVersion"] = str(self._next_rv())
            self._record("nodes", "DELETED", node)

    def cordon(self, name: str, cordoned: bool = True) -> None:
        with self.lock:
            node = self.nodes[name]
            node["spec"]["unschedulable"] = cordoned
            node["spec"]["taints"] = [t for t in node["spec"].get("taints") or []
                                      if t["key"] != "node.kubernetes.io/unschedulable"]
            if cordoned:
                node["spec"]["taints"].append({"key": "node.kubernetes.io/unschedulable", "effect": "NoSchedule"})
            node["metadata"]["resourceVersion"] = str(self._next_rv())
            self._record("nodes", "MODIFIED", node)

    def add_foreign_pod(self, ns: str, name: str, *, node: str, gpus: int = 0, resource: str = "nvidia.com/gpu",
                        phase: str = "Running", labels: dict[str, str] | None = None) -> None:
        """A pod the portal does not own (another team's, a daemon): stored as a running pod on ``node``."""
        amounts = {resource: str(gpus)} if gpus else {}
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": dict(labels or {})},
               "spec": {"nodeName": node, "containers": [{"name": "c", "image": "busybox",
                                                          "resources": {"requests": amounts, "limits": amounts}}]},
               "status": {"phase": phase}}
        with self.lock:
            if ns not in self.namespaces:
                self.add_namespace(ns, restricted=False)
            self._stamp_new(pod, ns)
            self.pods[(ns, name)] = pod
            self._record("pods", "ADDED", pod)

    # ================================================================ resource quotas

    # ================================================================ claims, storage classes, events

    def add_storage_class(self, name: str, *, default: bool = False) -> None:
        """A StorageClass whose provisioner binds every claim at once (``default``: the cluster's default)."""
        with self.lock:
            obj = {"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass", "provisioner": "fake.example/disk",
                   "metadata": {"name": name, "annotations": {DEFAULT_CLASS_ANNOTATION: "true"} if default else {}}}
            self._stamp_new(obj, None)
            obj["metadata"]["annotations"] = {DEFAULT_CLASS_ANNOTATION: "true"} if default else {}
            self.storage_classes[name] = obj

    def add_pvc(self, ns: str, name: str, *, access_modes: tuple[str, ...] = ("ReadWriteOnce",),
                storage: str = "1Gi", volume_name: str = "", storage_class: str | None = None) -> dict[str, Any]:
        """A PersistentVolumeClaim: Bound when it names a PersistentVolume (``volume_name``, as an admin's
        claim on an NFS or dataset PV does) or its class (or the default class) exists; else Pending."""
        body = {"metadata": {"name": name}, "spec": {"accessModes": list(access_modes),
                                                     "resources": {"requests": {"storage": storage}}}}
        if volume_name:
            body["spec"]["volumeName"] = volume_name
        if storage_class is not None:
            body["spec"]["storageClassName"] = storage_class
        with self.lock:
            return self._create_pvc(ns=ns, body=body).body

    def _list_pvcs(self, *, ns: str, query: dict[str, str], **_: Any) -> Response:
        return self._list("persistentvolumeclaims", [c for (cns, _), c in sorted(self.pvcs.items()) if cns == ns],
                          query, GENERIC_FIELDS)

    def _create_pvc(self, *, ns: str, body: dict[str, Any], **_: Any) -> Response:
        if ns not in self.namespaces:
            raise not_found("namespaces", ns)
        claim = copy.deepcopy(body)
        name = (claim.get("metadata") or {}).get("name") or ""
        if not name or not DNS1123.match(name):
            raise invalid("persistentvolumeclaims", name, [f'metadata.name: Invalid value: "{name}"'])
        spec = claim.setdefault("spec", {})
        errors = []
        if not spec.get("accessModes"):
            errors.append("spec.accessModes: Required value: at least 1 access mode is required")
        if not ((spec.get("resources") or {}).get("requests") or {}).get("storage"):
            errors.append("spec.resources[storage]: Required value")
        if errors:
            raise invalid("persistentvolumeclaims", name, errors)
        if (ns, name) in self.pvcs:
            raise ApiFailure(409, "AlreadyExists", f'persistentvolumeclaims "{name}" already exists',
                             kind="persistentvolumeclaims", name=name)
        default = next((n for n, c in sorted(self.storage_classes.items())
                        if c["metadata"]["annotations"].get(DEFAULT_CLASS_ANNOTATION) == "true"), None)
        if "storageClassName" not in spec and default and not spec.get("volumeName"):
            spec["storageClassName"] = default
        bound = bool(spec.get("volumeName")) or spec.get("storageClassName") in self.storage_classes
        claim["apiVersion"], claim["kind"] = "v1", "PersistentVolumeClaim"
        self._stamp_new(claim, ns)
        claim["status"] = {"phase": "Bound" if bound else "Pending"}
        if bound:
            claim["status"]["accessModes"] = list(spec["accessModes"])
        self.pvcs[(ns, name)] = claim
        return Response(201, copy.deepcopy(claim))

    def _get_pvc(self, *, ns: str, name: str, **_: Any) -> Response:
        if (ns, name) not in self.pvcs:
            raise not_found("persistentvolumeclaims", name)
        return Response(200, copy.deepcopy(self.pvcs[(ns, name)]))

    def _delete_pvc(self, *, ns: str, name: str, **_: Any) -> Response:
        if (ns, name) not in self.pvcs:
            raise not_found("persistentvolumeclaims", name)
        return Response(200, self.pvcs.pop((ns, name)))

    def _list_storage_classes(self, *, query: dict[str, str], **_: Any) -> Response:
        return self._list("storageclasses", list(self.storage_classes.values()), query, GENERIC_FIELDS)

    def _event(self, ns: str, pod_name: str, reason: str, message: str, type_: str = "Warning") -> None:
        """An Event about a pod, as kube-scheduler records one (repeats of the same one are counted)."""
        for e in self.events:
            if (e["metadata"]["namespace"], e["involvedObject"]["name"], e["reason"], e["message"]) == (
                    ns, pod_name, reason, message):
                e["count"] += 1
                return
        obj = {"apiVersion": "v1", "kind": "Event", "metadata": {"name": f"{pod_name}.{uuid.uuid4().hex[:12]}"},
               "involvedObject": {"kind": "Pod", "namespace": ns, "name": pod_name},
               "reason": reason, "message": message, "type": type_, "count": 1,
               "source": {"component": "default-scheduler"}}
        self._stamp_new(obj, ns)
        self.events.append(obj)

    def claim_problems(self, pod: dict[str, Any]) -> list[str]:
        """What the scheduler's volume binding says about the pod's claims: a claim that does not exist in
        the pod's namespace, or one not bound yet (the pod is then not scheduled anywhere)."""
        ns = pod["metadata"]["namespace"]
        problems = []
        for v in pod["spec"].get("volumes") or []:
            claim = (v.get("persistentVolumeClaim") or {}).get("claimName")
            if claim is None:
                continue
            if (ns, claim) not in self.pvcs:
                problems.append(f'persistentvolumeclaim "{claim}" not found')
            elif self.pvcs[(ns, claim)]["status"]["phase"] != "Bound":
                problems.append("pod has unbound immediate PersistentVolumeClaims")
        return problems

    def add_resource_quota(self, ns: str, name: str, hard: dict[str, Any]) -> None:
        """A namespace ResourceQuota (``hard`` as in its spec, e.g. ``{"requests.nvidia.com/gpu": "64",
        "pods": "500"}``); its ``status.used`` is computed at once, as the quota controller would."""
        with self.lock:
            obj = {"apiVersion": "v1", "kind": "ResourceQuota", "metadata": {"name": name},
                   "spec": {"hard": {k: str(v) for k, v in hard.items()}}, "status": {"hard": {}, "used": {}}}
            self._stamp_new(obj, ns)
            self.quotas[(ns, name)] = obj
            self.resync_quotas(ns)

    def _create_quota(self, *, ns: str, body: dict[str, Any], **_: Any) -> Response:
        if ns not in self.namespaces:
            raise not_found("namespaces", ns)
        name = (body.get("metadata") or {}).get("name", "")
        if (ns, name) in self.quotas:
            raise ApiFailure(409, "AlreadyExists", f'resourcequotas "{name}" already exists', kind="resourcequotas",
                             name=name)
        self.add_resource_quota(ns, name, (body.get("spec") or {}).get("hard") or {})
        return Response(201, copy.deepcopy(self.quotas[(ns, name)]))

    def _get_quota(self, *, ns: str, name: str, **_: Any) -> Response:
        if (ns, name) not in self.quotas:
            raise not_found("resourcequotas", name)
        return Response(200, copy.deepcopy(self.quotas[(ns, name)]))

    def _list_quotas(self, *, ns: str, **_: Any) -> Response:
        items = [copy.deepcopy(q) for (qns, _), q in sorted(self.quotas.items()) if qns == ns]
        return Response(200, {"apiVersion": "v1", "kind": "ResourceQuotaList",
                              "metadata": {"resourceVersion": str(self.rv)}, "items": items})

    def _update_quota(self, *, ns: str, name: str, body: dict[str, Any], **_: Any) -> Response:
        """A change of the quota's ``spec.hard`` (merge patch or replace): a new resourceVersion, and the
        controller's status follows at once."""
        if (ns, name) not in self.quotas:
            raise not_found("resourcequotas", name)
        quota = self.quotas[(ns, name)]
        hard = ((body or {}).get("spec") or {}).get("hard")
        if hard is not None:
            quota["spec"]["hard"] = {k: str(v) for k, v in hard.items()}
        quota["metadata"]["resourceVersion"] = str(self._next_rv())
        self.resync_quotas(ns)
        return Response(200, copy.deepcopy(quota))

    def quota_used(self, ns: str, name: str) -> dict[str, Decimal]:
        with self.lock:
            return {k: _q(v) for k, v in self.quotas[(ns, name)]["status"]["used"].items()}

    def _counts_against_quota(self, pod: dict[str, Any]) -> bool:
        if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return False
        deadline = pod["metadata"].get("deletionTimestamp")
        return not (deadline and parse_iso(deadline) <= self.now())

    @staticmethod
    def _quota_charge(pod: dict[str, Any], key: str) -> Decimal:
        """What one pod uses of a quota's ``key``: ``pods``, ``requests.<res>`` / ``limits.<res>``, or a bare
        ``cpu`` / ``memory`` (= requests)."""
        if key == "pods":
            return Decimal(1)
        kind, resource = ("requests", key) if key in ("cpu", "memory") else key.split(".", 1)
        if kind not in ("requests", "limits"):
            return Decimal(0)
        total = Decimal(0)
        for c in pod["spec"].get("containers") or []:
            amount = ((c.get("resources") or {}).get(kind) or {}).get(resource)
            total += _q(amount) if amount is not None else 0
        return total

    def resync_quotas(self, ns: str | None = None) -> None:
        """The quota controller: recompute every quota's ``status.used`` from the pods (gated ones count)."""
        with self.lock:
            for (qns, _), quota in self.quotas.items():
                if ns is not None and qns != ns:
                    continue
                pods = [p for (pns, _), p in self.pods.items() if pns == qns and self._counts_against_quota(p)]
                hard = quota["spec"]["hard"]
                status = {"hard": dict(hard), "used": {
                    k: str(sum((self._quota_charge(p, k) for p in pods), Decimal(0))) for k in hard}}
                if status != quota["status"]:  # the controller's status write is an update: a new version
                    quota["status"] = status
                    quota["metadata"]["resourceVersion"] = str(self._next_rv())

    def _admit_quota(self, ns: str, name: str, pod: dict[str, Any]) -> None:
        quotas = [q for (qns, _), q in sorted(self.quotas.items()) if qns == ns]
        for quota in quotas:
            hard, used = quota["spec"]["hard"], quota["status"].get("used") or {}
            over = []
            for key, limit in sorted(hard.items()):
                want = self._quota_charge(pod, key)
                if want and _q(used.get(key, "0")) + want > _q(limit):
                    over.append((key, want, used.get(key, "0"), limit))
            if over:
                raise ApiFailure(
                    403, "Forbidden",
                    f'pods "{name}" is forbidden: exceeded quota: {quota["metadata"]["name"]}, requested: '
                    + ",".join(f"{k}={w}" for k, w, _, _ in over) + ", used: "
                    + ",".join(f"{k}={u}" for k, _, u, _ in over) + ", limited: "
                    + ",".join(f"{k}={h}" for k, _, _, h in over), kind="pods", name=name)
        for quota in quotas:  # admitted: charged now, before storage (a duplicate stays charged until resync)
            used = quota["status"].setdefault("used", {})
            for key in quota["spec"]["hard"]:
                used[key] = str(_q(used.get(key, "0")) + self._quota_charge(pod, key))
            quota["metadata"]["resourceVersion"] = str(self._next_rv())  # the charge is a write of the quota

    def add_pdb(self, ns: str, name: str, spec: dict[str, Any], *, labels: dict[str, str] | None = None) -> None:
        """A PodDisruptionBudget someone else created (a team's, a namespace-wide one), validated as on create."""
        body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
                "metadata": {"name": name, "labels": dict(labels or {})}, "spec": copy.deepcopy(spec)}
        with self.lock:
            self._create_pdb(ns=ns, body=body)

    def pod(self, ns: str, name: str) -> dict[str, Any] | None:
        with self.lock:
            pod = self.pods.get((ns, name))
            return copy.deepcopy(pod) if pod else None

    def _mutate_pod(self, ns: str, name: str, change: Callable[[dict[str, Any]], None]) -> dict[str, Any]:
        with self.lock:
            pod = self.pods.get((ns, name))
            if pod is None:
                raise SchedulingError(f"no pod {ns}/{name}")
            old = copy.deepcopy(pod)
            change(pod)
            pod["metadata"]["resourceVersion"] = str(self._next_rv())
            self._record("pods", "MODIFIED", pod, old)
            terminal = ("Succeeded", "Failed")
            if (old.get("status") or {}).get("phase") not in terminal and pod["status"].get("phase") in terminal:
                self.resync_quotas(ns)  # replenishment: a pod that ended frees its quota
            return copy.deepcopy(pod)

    def unready(self, ns: str, name: str) -> None:
        """The kubelet: the pod's readiness probe fails (it still runs, but no disruption budget counts it
        healthy)."""
        def change(p: dict[str, Any]) -> None:
            p["status"]["conditions"] = [c for c in p["status"].get("conditions") or [] if c["type"] != "Ready"]
            p["status"]["conditions"].append({"type": "Ready", "status": "False", "reason": "ReadinessProbeFailed"})
        self._mutate_pod(ns, name, change)

    def touch(self, ns: str, name: str) -> None:
        """A concurrent writer (another controller) changes the pod: its resourceVersion moves on."""
        self._mutate_pod(ns, name, lambda p: p["metadata"].setdefault("annotations", {}).update(
            {"example.com/touched": str(time.monotonic_ns())}))

    def node_fits(self, pod: dict[str, Any], node_name: str) -> list[str]:
        """Why the scheduler would not put ``pod`` on ``node_name`` (empty list: it fits)."""
        node = self.nodes.get(node_name)
        if node is None:
            return [f"node {node_name} does not exist"]
        problems = self.claim_problems(pod)
        spec = pod["spec"]
        if spec.get("schedulingGates"):
            problems.append("pod is gated")
        if node["spec"].get("unschedulable"):
            problems.append("node is cordoned")
        if not any(c["type"] == "Ready" and c["status"] == "True" for c in node["status"]["conditions"]):
            problems.append("node is not Ready")
        labels = node["metadata"]["labels"]
        for key, value in (spec.get("nodeSelector") or {}).items():
            if labels.get(key) != value:
                problems.append(f"nodeSelector {key}={value} does not match")
        required = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
                    .get("requiredDuringSchedulingIgnoredDuringExecution"))
        if required and not any(_term_matches(t, node) for t in required.get("nodeSelectorTerms") or []):
            problems.append("required node affinity does not match")
        for taint in node["spec"].get("taints") or []:
            if taint.get("effect") in ("NoSchedule", "NoExecute") and not any(
                    _tolerates(t, taint) for t in spec.get("tolerations") or []):
                problems.append(f"untolerated taint {taint['key']}")
        for rname, amount in node["status"]["allocatable"].items():
            if not is_extended_resource(rname):
                continue
            want = _pod_request(pod, rname)
            if not want:
                continue
            used = sum(_pod_request(p, rname) for p in self.pods.values()
                       if p["spec"].get("nodeName") == node_name and p is not pod
                       and (p.get("status") or {}).get("phase") not in ("Succeeded", "Failed"))
            if used + want > _q(amount):
                problems.append(f"insufficient {rname}")
        for rname in _requested_resources(pod):
            if rname in SCHEDULER_IGNORED:
                continue
            if is_extended_resource(rname) and rname not in node["status"]["allocatable"]:
                problems.append(f"insufficient {rname}")
        return problems

    def bind(self, ns: str, name: str, node: str | None = None) -> str:
        """Act as kube-scheduler: bind an ungated pod to ``node`` (or the node its affinity pins it to)."""
        with self.lock:
            self._reap()
            pod = self.pods.get((ns, name))
            if pod is None:
                raise SchedulingError(f"no pod {ns}/{name}")
            if pod["spec"].get("nodeName"):
                return pod["spec"]["nodeName"]
            candidates = [node] if node else sorted(self.nodes)
            for candidate in candidates:
                if not self.node_fits(pod, candidate):
                    break
            else:
                raise SchedulingError(f"{ns}/{name} fits no node: "
                                      + "; ".join(f"{c}: {self.node_fits(pod, c)}" for c in candidates))

            def change(p: dict[str, Any]) -> None:
                p["spec"]["nodeName"] = candidate
                p["status"]["conditions"] = [c for c in p["status"].get("conditions") or []
                                             if c["type"] != "PodScheduled"]
                p["status"]["conditions"].append({"type": "PodScheduled", "status": "True",
                                                  "lastTransitionTime": iso(self.now())})

            self._mutate_pod(ns, name, change)
            return candidate

    def run(self, ns: str, name: str, node: str | None = None) -> None:
        """Bind (if needed) and start the pod's containers: phase Running, Ready. As the kubelet, a pod whose
        Secrets are not in its namespace stays Pending (its container waiting, with a Warning event)."""
        self.bind(ns, name, node)
        with self.lock:
            problem = self._secret_problems(self.pods[(ns, name)])
        if problem is not None:
            self.wait_container(ns, name, *problem)
            return

        def change(p: dict[str, Any]) -> None:
            started = now_iso()
            p["status"].update(phase="Running", startTime=started)
            p["status"]["containerStatuses"] = [
                {"name": c["name"], "ready": True, "restartCount": 0, "image": c.get("image"), "imageID": "",
                 "state": {"running": {"startedAt": started}}} for c in p["spec"]["containers"]]
            p["status"]["conditions"] = [c for c in p["status"]["conditions"] if c["type"] != "Ready"]
            p["status"]["conditions"].append({"type": "Ready", "status": "True"})

        self._mutate_pod(ns, name, change)

    def terminate(self, ns: str, name: str, *, exit_code: int = 0, reason: str | None = None,
                  message: str = "") -> None:
        """The main container exits: Succeeded on 0, else Failed (``reason`` e.g. ``OOMKilled``, ``Error``)."""

        def change(p: dict[str, Any]) -> None:
            started = p["status"].get("startTime") or now_iso()
            p["status"]["phase"] = "Succeeded" if exit_code == 0 else "Failed"
            p["status"]["containerStatuses"] = [
                {"name": c["name"], "ready": False, "restartCount": 0, "image": c.get("image"), "imageID": "",
                 "state": {"terminated": {"exitCode": exit_code, "reason": reason or ("Completed" if exit_code == 0
                                                                                       else "Error"),
                                          "message": message, "startedAt": started, "finishedAt": now_iso()}}}
                for c in p["spec"]["containers"]]
            p["status"]["conditions"] = [c for c in p["status"].get("conditions") or [] if c["type"] != "Ready"]
            p["status"]["conditions"].append({"type": "Ready", "status": "False", "reason": "PodCompleted"})

        self._mutate_pod(ns, name, change)

    def oom_kill(self, ns: str, name: str) -> None:
        self.terminate(ns, name, exit_code=137, reason="OOMKilled")

    def wait_container(self, ns: str, name: str, reason: str = "ImagePullBackOff", message: str = "") -> None:
        """The main container cannot start (``ErrImagePull``, ``ImagePullBackOff``, ``CrashLoopBackOff``...)."""
        self.bind(ns, name)

        def change(p: dict[str, Any]) -> None:
            p["status"]["containerStatuses"] = [
                {"name": c["name"], "ready": False, "restartCount": 0, "image": c.get("image"), "imageID": "",
                 "state": {"waiting": {"reason": reason, "message": message}}} for c in p["spec"]["containers"]]

        self._mutate_pod(ns, name, change)

    def mark_unschedulable(self, ns: str, name: str, message: str = "0/3 nodes are available",
                           *, reason: str = "Unschedulable", ago: float = 0.0) -> None:
        """kube-scheduler gave up on an (ungated) pod for now: ``PodScheduled=False`` with ``reason``
        (``Unschedulable``, or ``SchedulerError`` e.g. for a node that vanished), set ``ago`` seconds ago."""

        def change(p: dict[str, Any]) -> None:
            if p["spec"].get("schedulingGates"):
                raise SchedulingError("the scheduler never sees gated pods")
            p["status"]["conditions"] = [c for c in p["status"].get("conditions") or [] if c["type"] != "PodScheduled"]
            p["status"]["conditions"].append({"type": "PodScheduled", "status": "False", "reason": reason,
                                              "message": message, "lastTransitionTime": iso(self.now() - ago)})

        self._mutate_pod(ns, name, change)

    def schedule(self, ns: str, name: str) -> str | None:
        """One kube-scheduler attempt at an ungated pod: bind it to a node it fits (the node its affinity pins
        it to), else record why not as the scheduler does: ``SchedulerError`` when the pinned node does not
        exist any more, ``Unschedulable`` otherwise (terminating pods still hold their resources)."""
        with self.lock:
            pod = self.pods.get((ns, name))
            if pod is None:
                raise SchedulingError(f"no pod {ns}/{name}")
            if pod["spec"].get("nodeName"):
                return pod["spec"]["nodeName"]
            self._reap()
            claims = self.claim_problems(pod)
            if claims:  # volume binding fails before any node is tried: the pod stays Pending, with an event
                message = f"0/{len(self.nodes)} nodes are available: {claims[0]}. preemption: not eligible"
                self.mark_unschedulable(ns, name, message)
                self._event(ns, name, "FailedScheduling", message)
                return None
            # A pod pinned to nodes (matchFields metadata.name) fits only there, as kube-scheduler's node-name
            # filter says before any other: only those are tried, which keeps a stand-in scheduler of thousands of
            # pinned pods on hundreds of nodes (the benchmark's) from checking every pod against every node.
            pinned = _pinned_nodes(pod) if _every_term_pinned(pod) else set()
            candidates = sorted(n for n in self.nodes if not pinned or n in pinned)
            for node in candidates:
                if not self.node_fits(pod, node):
                    return self.bind(ns, name, node)
            missing = sorted(n for n in _pinned_nodes(pod) if n not in self.nodes)
            if missing:
                self.mark_unschedulable(ns, name, f'nodeinfo not found for node name "{missing[0]}"',
                                        reason="SchedulerError")
            else:
                why = sorted({w for n in candidates for w in self.node_fits(pod, n)})
                if pinned:
                    why.append(f"{len(self.nodes) - len(candidates)} node(s) didn't match the pod's node affinity")
                self.mark_unschedulable(ns, name, f"0/{len(self.nodes)} nodes are available: " + "; ".join(why))
            return None

    def kubelet_evict(self, ns: str, name: str, message: str = "The node was low on resource: memory.") -> None:
        """Node-pressure eviction by the kubelet (no Eviction API, no PDB): phase Failed, reason Evicted."""

        def change(p: dict[str, Any]) -> None:
            p["status"].update(phase="Failed", reason="Evicted", message=message)

        self._mutate_pod(ns, name, change)

    def finish_termination(self, ns: str, name: str) -> None:
        """The kubelet has stopped a terminating pod's containers: the pod object goes away."""
        with self.lock:
            if (ns, name) in self.pods:
                self._remove_pod((ns, name))

    def autopilot(self, stop: threading.Event, *, log_line: str = "", every_s: float = 0.1) -> threading.Thread:
        """A stand-in kube-scheduler + kubelet in a thread, until ``stop``: every ungated pending pod is
        scheduled as :meth:`schedule` does, and a bound one is started (with ``log_line`` in its log). A pod whose
        main command is ``sh -c "exit N"``, or ``sh -c '[ "$VAR" = "value" ] && exit N; ...'`` with VAR=value in
        its environment, then ends at once with exit code N (a real kubelet would run it; this one runs
        nothing else)."""

        def loop() -> None:
            while not stop.is_set():
                with self.lock:
                    waiting = [k for k, p in sorted(self.pods.items())
                               if not p["spec"].get("schedulingGates") and not p["metadata"].get("deletionTimestamp")
                               and (p.get("status") or {}).get("phase") == "Pending"]
                for ns, name in waiting:
                    try:
                        if self.schedule(ns, name):
                            self.run(ns, name)
                            if log_line:
                                self.append_log(ns, name, log_line)
                            code = _exit_command(self.pods.get((ns, name)))
                            if code is not None:  # the one command this kubelet runs: it exits at once
                                self.terminate(ns, name, exit_code=code)
                    except SchedulingError:
                        pass
                stop.wait(every_s)

        thread = threading.Thread(target=loop, name="fake-kube-autopilot", daemon=True)
        thread.start()
        return thread

    def append_log(self, ns: str, name: str, *lines: str) -> None:
        with self.lock:
            self.logs.setdefault((ns, name), []).extend(lines)
            self.changed.notify_all()


# ==================================================================== rules as functions


_EXIT = re.compile(r"exit ([0-9]{1,3})")
_EXIT_IF = re.compile(r'\[ "\$([A-Za-z_][A-Za-z0-9_]*)" = "([^"]*)" \] && exit ([0-9]{1,3})(?:;.*)?', re.S)


def _exit_command(pod: dict[str, Any] | None) -> int | None:
    """The exit code of a pod whose first container's command is ``sh -c "exit N"``, or ``sh -c '[ "$VAR" =
    "value" ] && exit N; ...'`` with VAR=value in its environment (one rank of a gang failing); else None."""
    containers = ((pod or {}).get("spec") or {}).get("containers") or [{}]
    command = containers[0].get("command") or []
    if command[:2] != ["sh", "-c"] or len(command) != 3:
        return None
    match = _EXIT.fullmatch(command[2])
    if match:
        return int(match.group(1))
    match = _EXIT_IF.fullmatch(command[2])
    env = {e.get("name"): e.get("value") for e in containers[0].get("env") or []}
    if match and env.get(match.group(1)) == match.group(2):
        return int(match.group(3))
    return None


def _int_or_percent(value: Any, total: int) -> int:
    if isinstance(value, str) and value.endswith("%"):
        return math.ceil(total * int(value[:-1]) / 100)
    return int(value)


def _pod_healthy(pod: dict[str, Any]) -> bool:
    status = pod.get("status") or {}
    return (status.get("phase") == "Running" and not pod["metadata"].get("deletionTimestamp")
            and any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []))


def _requested_resources(pod: dict[str, Any]) -> set[str]:
    names: set[str] = set()
    for _, c in _all_containers(pod["spec"]):
        names.update(((c.get("resources") or {}).get("requests") or {}).keys())
    return names


def _pod_request(pod: dict[str, Any], resource: str) -> Decimal:
    total = Decimal(0)
    for c in pod["spec"].get("containers") or []:
        amount = ((c.get("resources") or {}).get("requests") or {}).get(resource)
        total += _q(amount) if amount is not None else 0
    return total


def _pinned_nodes(pod: dict[str, Any]) -> set[str]:
    required = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    return {v for term in required.get("nodeSelectorTerms") or [] for req in term.get("matchFields") or []
            if req.get("key") == "metadata.name" and req.get("operator") == "In" for v in req.get("values") or []}


def _every_term_pinned(pod: dict[str, Any]) -> bool:
    """Each required affinity term names nodes (terms are ORed): the pod fits nowhere but on those nodes."""
    required = (((pod["spec"].get("affinity") or {}).get("nodeAffinity") or {})
                .get("requiredDuringSchedulingIgnoredDuringExecution") or {})
    terms = required.get("nodeSelectorTerms") or []
    return bool(terms) and all(any(r.get("key") == "metadata.name" and r.get("operator") == "In"
                                   for r in t.get("matchFields") or []) for t in terms)


def _tolerates(tol: dict[str, Any], taint: dict[str, Any]) -> bool:
    if tol.get("effect") and tol["effect"] != taint.get("effect"):
        return False
    if tol.get("operator", "Equal") == "Exists":
        return not tol.get("key") or tol["key"] == taint.get("key")
    return tol.get("key") == taint.get("key") and tol.get("value", "") == taint.get("value", "")


def _term_matches(term: dict[str, Any], node: dict[str, Any]) -> bool:
    labels = node["metadata"]["labels"]
    fields = {"metadata.name": node["metadata"]["name"]}
    if not term.get("matchExpressions") and not term.get("matchFields"):
        return False  # an empty term matches no objects
    for reqs, source in ((term.get("matchExpressions") or [], labels), (term.get("matchFields") or [], fields)):
        for req in reqs:
            key, op, values = req["key"], req["operator"], req.get("values") or []
            present = key in source
            if op == "In" and source.get(key) not in values:
                return False
            if op == "NotIn" and source.get(key) in values:
                return False
            if op == "Exists" and not present:
                return False
            if op == "DoesNotExist" and present:
                return False
    return True


def validate_pod_update(old: dict[str, Any], new: dict[str, Any]) -> list[str]:
    """``ValidatePodUpdate``, the parts the portal relies on: gates only removed, node affinity only narrowed
    while gated, ``priorityClassName`` immutable."""
    errors: list[str] = []
    old_gates = [g.get("name") for g in old.get("schedulingGates") or []]
    new_gates = [g.get("name") for g in new.get("schedulingGates") or []]
    added = [g for g in new_gates if g not in old_gates]
    if added:
        errors.append(f"spec.schedulingGates: Forbidden: only deletion is allowed, but found new scheduling "
                      f"gate '{added[0]}'")
    gated = bool(old_gates)
    old_aff = ((old.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    new_aff = ((new.get("affinity") or {}).get("nodeAffinity") or {}).get("requiredDuringSchedulingIgnoredDuringExecution")
    if gated:
        errors += _node_selector_narrowing(old_aff, new_aff)
        old_sel, new_sel = old.get("nodeSelector") or {}, new.get("nodeSelector") or {}
        if any(new_sel.get(k) != v for k, v in old_sel.items()):
            errors.append("spec.nodeSelector: Invalid value: only additions to spec.nodeSelector are allowed "
                          "(no mutations or deletions)")
    else:
        if old_aff != new_aff or (old.get("nodeSelector") or {}) != (new.get("nodeSelector") or {}):
            errors.append("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                          "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only "
                          "additions to existing tolerations), `spec.terminationGracePeriodSeconds` (allow it to be "
                          "set to 1 if it was previously negative); node affinity is immutable once ungated")
    if old.get("priorityClassName") != new.get("priorityClassName"):
        errors.append("spec.priorityClassName: Forbidden: pod updates may not change fields other than ... "
                      "(priorityClassName is immutable)")
    old_deadline, new_deadline = old.get("activeDeadlineSeconds"), new.get("activeDeadlineSeconds")
    if new_deadline != old_deadline and (new_deadline is None or (old_deadline is not None and new_deadline > old_deadline)):
        errors.append("spec.activeDeadlineSeconds: Invalid value: must be less than or equal to previous value")
    old_tol = old.get("tolerations") or []
    if any(t not in (new.get("tolerations") or []) for t in old_tol):
        errors.append("spec.tolerations: Forbidden: existing toleration can not be modified except its tolerationSeconds")

    def strip(spec: dict[str, Any]) -> dict[str, Any]:
        out = {k: v for k, v in spec.items() if k not in MUTABLE_POD_SPEC_FIELDS and k != "priorityClassName"}
        out["containers"] = [{k: v for k, v in c.items() if k != "image"} for c in spec.get("containers") or []]
        out["initContainers"] = [{k: v for k, v in c.items() if k != "image"} for c in spec.get("initContainers") or []]
        aff = copy.deepcopy(spec.get("affinity") or {})
        aff.pop("nodeAffinity", None)
        out["affinity-other"] = aff
        return out

    if strip(old) != strip(new):
        errors.append("spec: Forbidden: pod updates may not change fields other than `spec.containers[*].image`, "
                      "`spec.initContainers[*].image`, `spec.activeDeadlineSeconds`, `spec.tolerations` (only "
                      "additions to existing tolerations), `spec.terminationGracePeriodSeconds`")
    return errors


def _node_selector_narrowing(old: dict[str, Any] | None, new: dict[str, Any] | None) -> list[str]:
    """While gated: an empty/absent required affinity may be set to anything; otherwise the list of terms keeps
    its length and each term only gains requirements (matchExpressions / matchFields appended, none changed)."""
    path = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    old_terms = (old or {}).get("nodeSelectorTerms") or []
    if not old_terms:
        return []
    new_terms = (new or {}).get("nodeSelectorTerms") or []
    if len(new_terms) != len(old_terms):
        return [f"{path}.nodeSelectorTerms: Invalid value: no additions/deletions to non-empty NodeSelectorTerms "
                "list are allowed"]
    errors = []
    for i, (o, n) in enumerate(zip(old_terms, new_terms, strict=True)):
        if not o.get("matchExpressions") and not o.get("matchFields"):
            continue
        for key in ("matchExpressions", "matchFields"):
            olds, news = o.get(key) or [], n.get(key) or []
            if len(news) < len(olds) or news[:len(olds)] != olds:
                errors.append(f"{path}.nodeSelectorTerms[{i}].{key}: Invalid value: only addition of "
                              f"{key} to a term is allowed (existing requirements are immutable)")
    return errors


def restricted_violations(spec: dict[str, Any]) -> list[str]:
    """PodSecurity ``restricted`` (latest), the checks that matter for the portal's pods."""
    out: list[str] = []
    hosts = [k for k in ("hostNetwork", "hostPID", "hostIPC") if spec.get(k)]
    if hosts:
        out.append(f"host namespaces ({', '.join(f'{k}=true' for k in hosts)})")
    pod_ctx = spec.get("securityContext") or {}
    containers = _all_containers(spec)
    privileged = [c["name"] for _, c in containers if (c.get("securityContext") or {}).get("privileged")]
    if privileged:
        out.append(f'privileged (containers {privileged} must not set securityContext.privileged=true)')
    ape = [c["name"] for _, c in containers if (c.get("securityContext") or {}).get("allowPrivilegeEscalation") is not False]
    if ape:
        out.append(f"allowPrivilegeEscalation != false (containers {ape} must set "
                   "securityContext.allowPrivilegeEscalation=false)")
    caps_bad = []
    for _, c in containers:
        caps = (c.get("securityContext") or {}).get("capabilities") or {}
        if "ALL" not in (caps.get("drop") or []) or any(a != "NET_BIND_SERVICE" for a in caps.get("add") or []):
            caps_bad.append(c["name"])
    if caps_bad:
        out.append(f'unrestricted capabilities (containers {caps_bad} must set securityContext.capabilities.drop=["ALL"])')
    volumes = [v.get("name") for v in spec.get("volumes") or [] if "hostPath" in v]
    if volumes:
        out.append(f"restricted volume types (volumes {volumes} use hostPath)")
    other_volumes = [v.get("name") for v in spec.get("volumes") or []
                     if not (set(v) - {"name"}) <= RESTRICTED_VOLUME_TYPES]
    if other_volumes and not volumes:
        out.append(f"restricted volume types (volumes {other_volumes})")
    host_ports = [c["name"] for _, c in containers for p in c.get("ports") or [] if p.get("hostPort")]
    if host_ports:
        out.append(f"hostPort (containers {host_ports} use hostPort)")
    pod_non_root = pod_ctx.get("runAsNonRoot") is True
    non_root_bad = [c["name"] for _, c in containers
                    if (c.get("securityContext") or {}).get("runAsNonRoot", pod_non_root) is not True]
    if non_root_bad:
        out.append(f"runAsNonRoot != true (pod or containers {non_root_bad} must set securityContext.runAsNonRoot=true)")
    if pod_ctx.get("runAsUser") == 0 or any((c.get("securityContext") or {}).get("runAsUser") == 0 for _, c in containers):
        out.append("runAsUser=0 (pod and containers must not set runAsUser=0)")
    pod_seccomp = (pod_ctx.get("seccompProfile") or {}).get("type")
    seccomp_bad = [c["name"] for _, c in containers
                   if ((c.get("securityContext") or {}).get("seccompProfile") or {}).get("type", pod_seccomp)
                   not in ("RuntimeDefault", "Localhost")]
    if seccomp_bad:
        out.append(f'seccompProfile (pod or containers {seccomp_bad} must set securityContext.seccompProfile.type to '
                   '"RuntimeDefault" or "Localhost")')
    return out


# ==================================================================== the HTTP server


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet test output
        pass

    def _serve(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length) if length else b""
        headers = {k.lower(): v for k, v in self.headers.items()}
        response = self.server.fake.handle(self.command, self.path, headers, body)
        if response.drop:
            self.close_connection = True
            try:
                self.connection.shutdown(2)
            except OSError:
                pass
            return
        if response.stream is None:
            data = json.dumps(response.body).encode() if response.body is not None else b""
            self.send_response(response.status)
            self.send_header("Content-Type", response.content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            try:
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                self.close_connection = True
            return
        self.send_response(response.status)
        self.send_header("Content-Type", response.content_type)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        try:
            for chunk in response.stream:
                if chunk:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    self.wfile.flush()
            self.wfile.write(b"0\r\n\r\n")
            self.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _serve


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    fake: FakeKube

    def handle_error(self, request: Any, client_address: Any) -> None:
        import sys

        if not isinstance(sys.exc_info()[1], (BrokenPipeError, ConnectionResetError, TimeoutError)):
            super().handle_error(request, client_address)


@dataclass
class FakeKubeServer:
    """Serve a :class:`FakeKube` on ``127.0.0.1:<port>`` (a free one by default) in a background thread."""

    fake: FakeKube = field(default_factory=FakeKube)
    _server: _Server | None = None
    _thread: threading.Thread | None = None

    def start(self, port: int = 0) -> FakeKubeServer:
        self._server = _Server(("127.0.0.1", port), _Handler)
        self._server.fake = self.fake
        self.fake.url = f"http://127.0.0.1:{self._server.server_port}"
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05},
                                        name="fake-kube-api", daemon=True)
        self._thread.start()
        return self

    @property
    def url(self) -> str:
        return self.fake.url

    def stop(self) -> None:
        self.fake.closing.set()
        with self.fake.lock:
            self.fake.changed.notify_all()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
