"""Clusters, their nodes, and the pods the simulated cluster keeps; the label rules they share with jobs."""

from __future__ import annotations

import re

from django.db import models
from django.db.models import Q
from django.utils import timezone

from quotas.models import Flavor

# A Kubernetes label key: an optional DNS-subdomain prefix and "/", then a name of up to 63 characters; a value:
# up to 63 characters, alphanumeric at both ends (empty allowed). Cluster labels and jobs' cluster selectors use
# the same rules, so a selector an operator copies from a cluster's labels always validates.
LABEL_NAME = r"[A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?"
LABEL_PREFIX = r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?(\.[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?)*"
LABEL_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]{0,61}[A-Za-z0-9])?)?"
_LABEL_NAME = re.compile(LABEL_NAME)
_LABEL_PREFIX = re.compile(LABEL_PREFIX)
_LABEL_VALUE = re.compile(LABEL_VALUE)
MAX_LABELS = 32


def label_problems(labels) -> list[str]:
    """What is wrong with a label mapping ({key: value}, as Kubernetes labels), one message each; [] if fine."""
    if not isinstance(labels, dict):
        return ["Give labels as an object of key: value strings."]
    if len(labels) > MAX_LABELS:
        return [f"At most {MAX_LABELS} labels."]
    problems = []
    for key, value in labels.items():
        if not isinstance(key, str) or not isinstance(value, str):
            problems.append(f"{key!r}: keys and values are strings.")
            continue
        prefix, _, name = key.rpartition("/")
        if "/" in key and (not prefix or len(prefix) > 253 or not _LABEL_PREFIX.fullmatch(prefix)):
            problems.append(f"{key}: the prefix before '/' must be a DNS subdomain (lower-case, up to 253).")
        elif not _LABEL_NAME.fullmatch(name):
            problems.append(f"{key}: a label name is up to 63 letters, digits, '-', '_' or '.', alphanumeric at "
                            "both ends.")
        elif not _LABEL_VALUE.fullmatch(value):
            problems.append(f"{key}={value}: a label value is up to 63 letters, digits, '-', '_' or '.', "
                            "alphanumeric at both ends (or empty).")
    return problems


MAX_TOPOLOGY_LEVELS = 4


def topology_level_problems(levels) -> list[str]:
    """What is wrong with a cluster's topology levels (node label keys, outermost first); [] if fine."""
    if not isinstance(levels, list) or not all(isinstance(k, str) for k in levels):
        return ["Give the levels as a list of node label keys, outermost first (e.g. "
                "[\"topology.kubernetes.io/block\", \"topology.kubernetes.io/rack\", \"kubernetes.io/hostname\"])."]
    if len(levels) > MAX_TOPOLOGY_LEVELS:
        return [f"At most {MAX_TOPOLOGY_LEVELS} levels."]
    if len(set(levels)) != len(levels):
        return ["Each level once."]
    problems = [p.split(": ", 1)[0] + ": not a label key." for p in label_problems(dict.fromkeys(levels, ""))]
    short = [k.rsplit("/", 1)[-1] for k in levels]
    if not problems and len(set(short)) != len(short):
        problems.append("Two levels end in the same name: jobs name a level by its key or by that name.")
    return problems


class ClusterState(models.TextChoices):
    ACTIVE = "active", "Active"
    CORDONED = "cordoned", "Cordoned (no new admissions)"
    DRAINING = "draining", "Draining (no new admissions, running work finishes)"


class BackendKind(models.TextChoices):
    SIMULATED = "simulated", "Simulated"
    KUBERNETES = "kubernetes", "Kubernetes"


class Cluster(models.Model):
    """A cluster the portal dispatches to: the simulated one or a Kubernetes cluster. One is the default.

    How to reach a Kubernetes cluster is stored as references only, never the credentials themselves: a path to
    a kubeconfig file (typically a mounted Secret), or the name of an environment variable that holds a
    kubeconfig (set from a Secret), plus a context; or the service account of the pod the portal runs in.
    With none of them the default cluster uses the process-wide ``KUBECONFIG`` setting.
    """

    name = models.SlugField(max_length=40, unique=True)
    backend = models.CharField(max_length=20, choices=BackendKind.choices, default=BackendKind.SIMULATED)
    is_default = models.BooleanField(default=False)
    kubeconfig = models.CharField(max_length=500, blank=True, help_text="path of a kubeconfig file")
    kubeconfig_env = models.CharField(max_length=100, blank=True,
                                      help_text="name of an environment variable holding a kubeconfig")
    context = models.CharField(max_length=253, blank=True, help_text="kubeconfig context (blank: its current one)")
    in_cluster = models.BooleanField(default=False, help_text="use the portal pod's own service account")
    namespace_template = models.CharField(max_length=100, blank=True,
                                          help_text="e.g. gpu-{department}; blank: KUBE_NAMESPACE_TEMPLATE")
    labels = models.JSONField(default=dict, blank=True)
    # Node label keys grouping the cluster's nodes into network domains, outermost first (block, rack, host):
    # the engine places a gang within the smallest domain that holds it (docs/scheduling.md, "Topology").
    topology_levels = models.JSONField(default=list, blank=True)
    state = models.CharField(max_length=10, choices=ClusterState.choices, default=ClusterState.ACTIVE)
    # Lower is cheaper: among clusters that fit a job equally, the engine prefers the lowest rank.
    cost_rank = models.IntegerField(default=0)
    # CPU work on GPU nodes (off while blank): the CPU pool whose CPU-only pods may also run on this cluster's GPU
    # nodes, in what each node has beyond its GPU pods' requests and a reserve per GPU not held by them, so that
    # GPU work arriving later still finds the CPU and memory it needs beside its GPU.
    cpu_on_gpu_nodes = models.ForeignKey(Flavor, null=True, blank=True, on_delete=models.PROTECT, related_name="+",
                                         help_text="CPU pool that may use the GPU nodes' spare CPU (blank: off)")
    gpu_reserve_cores = models.PositiveIntegerField(default=4, help_text="cores kept per GPU for its GPU pods")
    gpu_reserve_memory_gib = models.PositiveIntegerField(default=32, help_text="GiB kept per GPU for its GPU pods")
    reachable = models.BooleanField(default=True)
    last_sync_at = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)

    class Meta:
        ordering = ["name"]
        constraints = [
            models.UniqueConstraint(fields=["is_default"], condition=Q(is_default=True), name="one_default_cluster"),
            models.CheckConstraint(condition=Q(state__in=ClusterState.values), name="cluster_state_valid"),
            models.CheckConstraint(condition=Q(backend__in=BackendKind.values), name="cluster_backend_valid"),
        ]

    def __str__(self) -> str:
        return self.name


class Node(models.Model):
    """One node's GPUs of one flavor, as last reported by the cluster backend (inventory)."""

    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="nodes")
    name = models.CharField(max_length=253)
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="nodes")
    gpus = models.PositiveIntegerField()
    used_by_others = models.PositiveIntegerField(default=0)
    # The node's allocatable cores and memory: a CPU pool's node offers them to CPU work; a GPU node's (0 when
    # unknown) go to its GPUs' jobs, and beyond their reserve to CPU work only where the cluster allows it
    # (``Cluster.cpu_on_gpu_nodes``).
    cpu_millicores = models.PositiveIntegerField(default=0)
    memory_mib = models.PositiveIntegerField(default=0)
    labels = models.JSONField(default=dict, blank=True)
    taints = models.JSONField(default=list, blank=True)
    schedulable = models.BooleanField(default=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["cluster__name", "name", "flavor__name"]
        constraints = [
            models.UniqueConstraint(fields=["cluster", "name", "flavor"], name="node_unique_cluster_name_flavor")
        ]

    def __str__(self) -> str:
        return f"{self.cluster}/{self.name} ({self.gpus}x {self.flavor})"



class SimPod(models.Model):
    """A pod of the simulated cluster backend. Kept in the database so that web, worker and beat processes
    share one simulated cluster and a restart loses nothing (the simulated kubelet is ``advance()``)."""

    cluster = models.CharField(max_length=40, default="default")
    namespace = models.CharField(max_length=63)
    name = models.CharField(max_length=253)
    job_id = models.BigIntegerField(db_index=True)
    attempt = models.PositiveIntegerField()
    index = models.PositiveIntegerField(default=0)
    gated = models.BooleanField(default=True)
    node = models.CharField(max_length=253, blank=True)
    phase = models.CharField(max_length=12, default="Pending")
    reason = models.CharField(max_length=40, blank=True)
    message = models.CharField(max_length=500, blank=True)  # what the kubelet says with the reason
    exit_code = models.IntegerField(null=True, blank=True)
    runtime_s = models.FloatField(default=3600)
    created_at = models.DateTimeField(default=timezone.now)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    log = models.TextField(blank=True)
    # The pod's mounts as the simulated kubelet made them: [{"source", "path", "dir", "read_only"}], "dir" the
    # directory under DATA_DIR that holds the source's files (so attempts share what they wrote).
    mounts = models.JSONField(default=list, blank=True)
    # A session's or service's pod: where its app answers on loopback (host:port) and the stand-in process
    # that serves it (scheduling/backends/standin.py), ended with the pod.
    address = models.CharField(max_length=64, blank=True)
    pid = models.PositiveIntegerField(null=True, blank=True)
    # The container's environment as the Kubernetes backend would set it (the job's env, the portal's variables,
    # the rendezvous of a gang): name -> value. Secrets are not in it (the log names them, never a value).
    env = models.JSONField(default=dict, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "namespace", "name"], name="simpod_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.phase})"
