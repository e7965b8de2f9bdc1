"""Input validation and output shapes of the jobs API. Validation only; use cases live in services."""

from __future__ import annotations

import math
import re
from decimal import Decimal, InvalidOperation

from django.conf import settings
from django.core.exceptions import ObjectDoesNotExist
from django.db.models import Max
from django.utils import timezone
from drf_spectacular.utils import extend_schema_field
from rest_framework import serializers

from engine.domains import level_name
from portal.api.serializers import FieldsBuiltOnce, StrictSerializer
from quotas.models import Flavor, FlavorKind, GpuSharing
from scheduling.api.fields import AfterField
from scheduling.api.kinds import READINESS_PATH_RE, kind_problems
from scheduling.models import (
    TEMPLATE_NAME,
    Cluster,
    FailurePolicy,
    Job,
    JobEvent,
    JobKind,
    JobRole,
    JobTemplate,
    TaskType,
    TemplateScope,
    Tier,
    Urgency,
    label_problems,
)
from scheduling.selectors import (
    cpu_pool_nodes,
    flavor_pools,
    lent_gpu_nodes,
    queue_position,
    topology_domains,
)
from scheduling.services import fractions
from scheduling.services.dependencies import dependencies_of
from scheduling.services.sessions import route_url
from workloads.podsecrets import use_problems
from workloads.services.requests import MAX_MOUNTS, mount_shape_problems

# The OCI distribution reference grammar (github.com/distribution/reference, regexp.go):
#   reference := name [ ":" tag ] [ "@" digest ];  name := [domain "/"] path-component ["/" path-component]*
# As container runtimes resolve it, the first component is a registry only when it contains "." or ":" or is
# "localhost"; otherwise it is part of the path, and path components are lower-case. So "UPPER/case" is
# refused (the runtime would refuse it at pull time, long after the job was accepted).
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = (rf"(?:{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})+(?::[0-9]+)?|{_DOMAIN_COMPONENT}:[0-9]+"
           r"|localhost(?::[0-9]+)?|\[[a-fA-F0-9:]+\](?::[0-9]+)?)")
IMAGE_RE = re.compile(
    rf"(?P<name>(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*)"
    r"(?::[A-Za-z0-9_][A-Za-z0-9_.-]{0,127})?"
    r"(?:@[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,})?",
    re.ASCII,
)
IMAGE_NAME_MAX = 255  # the grammar's limit on the name part
ENV_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]*", re.ASCII)
ENV_NAME_MAX = 128
RESERVED_ENV_PREFIXES = ("KUBERNETES_", "NVIDIA_", "PORTAL_")
# The rendezvous the portal gives every pod of a gang (docs/workloads.md, "Multi-node training"); PORTAL_* names
# (the checkpoint directory, the job id, the attempt, ranks) are the portal's too.
RESERVED_ENV_NAMES = {"CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES", "MASTER_ADDR", "MASTER_PORT", "WORLD_SIZE",
                      "RANK", "NODE_RANK"}
MAX_RETRIES = 10
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 _.-]{0,62}$")
MAX_COMMAND_ITEMS = 256
MAX_COMMAND_BYTES = 32 * 1024
MAX_ENV = 100
MAX_RUNTIME_S = 14 * 86400
CPU_RE = re.compile(r"^([0-9]+(?:\.[0-9]{1,3})?)(m?)$")
MEM_RE = re.compile(r"^([0-9]+)(Ki|Mi|Gi|Ti|K|M|G|T)?$")
MEM_MIB = {"Ki": Decimal(1) / 1024, "Mi": 1, "Gi": 1024, "Ti": 1024 * 1024, "K": Decimal(1000) / 1048576,
           "M": Decimal(10**6) / 1048576, "G": Decimal(10**9) / 1048576, "T": Decimal(10**12) / 1048576, None: Decimal(1) / 1048576}


# Variables the simulated cluster reads (runtime in seconds, exit code): checked at submit, because one job's
# "nan" or "1e400" would otherwise reach the simulated kubelet's clock arithmetic.
SIM_NUMBERS = {"SIM_DURATION_S": (0, MAX_RUNTIME_S, False), "SIM_EXIT_CODE": (0, 255, True)}


def _bounded_number(text: str, low: float, high: float, integer: bool) -> bool:
    try:
        number = int(text) if integer else float(text)
    except (TypeError, ValueError, OverflowError):
        return False
    return math.isfinite(number) and low <= number <= high


class StrictIntegerField(serializers.IntegerField):
    """An integer that must be a JSON integer: no 2.5, no "2", no true."""

    default_error_messages = {"invalid": "A whole number is required (JSON integer, e.g. 2)."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, int):
            self.fail("invalid")
        return super().to_internal_value(data)


class StrictBooleanField(serializers.BooleanField):
    """A boolean that must be a JSON boolean: no "yes", no 1."""

    default_error_messages = {"invalid": "true or false is required (a JSON boolean)."}

    def to_internal_value(self, data):
        if not isinstance(data, bool):
            self.fail("invalid")
        return data


@extend_schema_field({"type": "string", "example": "500m", "description": "cores or millicores"})
class CpuField(serializers.Field):
    default_error_messages = {"invalid": 'CPU as cores ("4", 0.5) or millicores ("500m").',
                              "range": "CPU must be between 100m and 256 cores."}

    def to_internal_value(self, data):
        if isinstance(data, bool):
            self.fail("invalid")
        m = CPU_RE.match(str(data).strip())
        if not m:
            self.fail("invalid")
        try:
            milli = int(Decimal(m.group(1)) * (1 if m.group(2) else 1000))
        except InvalidOperation:
            self.fail("invalid")
        if not 100 <= milli <= 256_000:
            self.fail("range")
        return milli

    def to_representation(self, value):
        return f"{value}m"


@extend_schema_field({"type": "string", "example": "16Gi", "description": "Kubernetes quantity"})
class MemoryField(serializers.Field):
    default_error_messages = {"invalid": 'Memory as a Kubernetes quantity, e.g. "16Gi" or "512Mi".',
                              "range": "Memory must be between 128Mi and 4Ti."}

    def to_internal_value(self, data):
        if isinstance(data, bool) or not isinstance(data, str | int):
            self.fail("invalid")
        m = MEM_RE.match(str(data).strip())
        if not m:
            self.fail("invalid")
        mib = int(Decimal(m.group(1)) * MEM_MIB[m.group(2)])
        if not 128 <= mib <= 4 * 1024 * 1024:
            self.fail("range")
        return mib

    def to_representation(self, value):
        return f"{value}Mi"


class FlavorField(serializers.SlugRelatedField):
    """A flavor by name, read together with the GPUs of its largest node (``largest_node_gpus``, None when no
    node offers it) in one query. Flavors already read by this field instance are reused, so a list of jobs
    costs one query per distinct flavor."""

    def __init__(self, **kwargs):
        kwargs.setdefault("slug_field", "name")
        kwargs.setdefault("queryset", Flavor.objects.annotate(largest_node_gpus=Max("nodes__gpus")))
        super().__init__(**kwargs)

    @property
    def seen(self) -> dict[str, Flavor]:
        """The flavors this instance read, by name (made on first use: copies of a field share what its
        ``__init__`` made, ``FieldsBuiltOnce``)."""
        return self.__dict__.setdefault("_seen", {})

    def to_internal_value(self, data):
        if isinstance(data, str) and data in self.seen:
            return self.seen[data]
        try:
            flavor = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            if getattr(exc.detail[0], "code", None) != "does_not_exist":
                raise
            names = ", ".join(Flavor.objects.order_by("name").values_list("name", flat=True)) or "none yet"
            raise serializers.ValidationError(f"No flavor {data!r}. The flavors are: {names}.",
                                              code="does_not_exist") from None
        self.seen[flavor.name] = flavor
        return flavor


ROLE_NAME_RE = re.compile(r"^[a-z]([a-z0-9-]{0,18}[a-z0-9])?$")
MAX_ROLES = 8
# What a job of roles sets per role, never at the top: the job's size is its roles'.
ROLE_SIZED = {"pods": "pods", "gpus": "gpus", "cpu": "cpu", "memory": "memory", "shm_mb": "shm_mb"}


class RoleSerializer(StrictSerializer):
    """One role of a job (docs/workloads.md, "Shapes"): a group of identical pods with its own size."""

    name = serializers.CharField(max_length=20, help_text="lower-case letters, digits and -, e.g. trainer, data")
    pods = StrictIntegerField(min_value=1, max_value=64)
    image = serializers.CharField(max_length=512, required=False, default="", allow_blank=True,
                                  help_text="default: the job's image")
    command = serializers.ListField(child=serializers.CharField(max_length=8192, trim_whitespace=False),
                                    required=False, allow_null=True, default=None, min_length=1,
                                    max_length=MAX_COMMAND_ITEMS, help_text="default: the job's command")
    gpus = StrictIntegerField(min_value=0, max_value=64, required=False, default=0, source="gpus_per_pod",
                              help_text="GPUs per pod; 0: the role runs on a CPU pool")
    cpu = CpuField(required=False, default=4000, source="cpu_millicores")
    memory = MemoryField(required=False, default=16384, source="memory_mib")
    shm_mb = StrictIntegerField(min_value=0, required=False, default=0)
    flavor = FlavorField(required=False, allow_null=True, default=None,
                         help_text="a role without GPUs: the CPU pool (default: the job's, or the lab's only one)")
    failure_policy = serializers.ChoiceField(choices=FailurePolicy.choices, required=False,
                                             default=FailurePolicy.RESTART_ATTEMPT)

    def validate_name(self, value):
        if not ROLE_NAME_RE.match(value):
            raise serializers.ValidationError("Lower-case letters, digits and -, starting with a letter.",
                                              code="invalid_name")
        return value

    def validate_image(self, value):
        if value and not IMAGE_RE.match(value):
            raise serializers.ValidationError("Not a valid image reference.", code="invalid_image")
        return value

    def validate(self, attrs):
        if attrs["shm_mb"] * 2 > attrs["memory_mib"]:
            raise serializers.ValidationError({"shm_mb": ["At most half the role's memory."]}, code="invalid")
        return attrs


def shape_problems(attrs: dict, given: set[str]) -> dict[str, list]:
    """The job's shape (docs/workloads.md, "Shapes"), made whole: with ``roles``, the GPU gang's ``pods`` and
    ``gpus_per_pod`` and the roles' CPU pools are set from them; without, the one role is the job itself. The
    field errors of a shape that could never run (keyed ``roles`` for a role, with its position)."""
    flavor, roles = attrs.get("flavor"), attrs.get("roles")
    errors: dict[str, list] = {}
    if roles is None:
        g = attrs.get("gpus_per_pod")
        if g is None:
            return {"gpus": [serializers.ErrorDetail("This field is required.", code="required")]}
        if flavor is not None and flavor.is_cpu and g > 0:
            errors["gpus"] = [serializers.ErrorDetail(
                f"{flavor.name!r} is a CPU pool: its nodes have no GPUs. Ask for 0, or a GPU flavor.", code="cpu_pool")]
        elif flavor is not None and flavor.is_cpu:
            # A pod larger than every node of its pool would wait forever: refused now, as a role's is. Nodes
            # whose size the inventory has not reported yet say nothing either way.
            sizes = [(c, m) for c, m in cpu_pool_nodes(flavor_id=flavor.pk) if c > 0 and m > 0]
            cpu, mem = attrs.get("cpu_millicores", 0), attrs.get("memory_mib", 0)
            if sizes and not any(c >= cpu and m >= mem for c, m in sizes):
                most = max(sizes)
                short = "cpu" if not any(c >= cpu for c, _ in sizes) else "memory"  # (the field to change)
                errors[short] = [serializers.ErrorDetail(
                    f"One pod of {cpu}m and {mem}Mi fits no node of {flavor.name!r} (its largest: {most[0]}m, "
                    f"{most[1]}Mi).", code="exceeds_largest_node")]
        return errors
    for name in sorted(ROLE_SIZED.keys() & given):
        errors[name] = [serializers.ErrorDetail("A job of roles sets this per role.", code="set_per_role")]
    names = [r["name"] for r in roles]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        errors["roles"] = [serializers.ErrorDetail(f"Two roles are named {twice[0]!r}: each role needs its own name.",
                                                   code="duplicate_name")]
        return errors
    gpu = [r for r in roles if r["gpus_per_pod"] > 0]
    if flavor is None:
        return errors
    if gpu and flavor.is_cpu:
        errors["flavor"] = [serializers.ErrorDetail(
            f"{flavor.name!r} is a CPU pool; roles with GPUs need the GPU flavor as the job's flavor.", code="cpu_pool")]
    elif not gpu and not flavor.is_cpu:
        errors["flavor"] = [serializers.ErrorDetail(
            "No role uses GPUs: the job runs on a CPU pool, so name one as its flavor "
            f"({', '.join(cpu_pool_names()) or 'the lab has none yet'}).", code="needs_cpu_pool")]
    elif len({r["gpus_per_pod"] for r in gpu}) > 1:
        errors["roles"] = [serializers.ErrorDetail(
            "The roles with GPUs form one gang and ask for the same GPUs per pod.", code="mixed_gpus")]
    if errors:
        return errors
    pools = cpu_pool_names()
    for i, r in enumerate(roles):
        if r["gpus_per_pod"] > 0:
            if r["flavor"] is not None and r["flavor"] != flavor:
                errors[f"roles.{i}.flavor"] = [serializers.ErrorDetail(
                    "A role with GPUs runs on the job's flavor.", code="invalid")]
            r["flavor"] = None
            continue
        if r["flavor"] is None:
            if flavor.is_cpu:
                r["flavor"] = flavor
            elif len(pools) == 1:
                r["flavor"] = Flavor.objects.get(name=pools[0])
            else:
                errors[f"roles.{i}.flavor"] = [serializers.ErrorDetail(
                    f"Name the CPU pool this role runs on ({', '.join(pools) or 'the lab has none yet'}).",
                    code="required")]
                continue
        if not r["flavor"].is_cpu:
            errors[f"roles.{i}.flavor"] = [serializers.ErrorDetail(
                f"{r['flavor'].name!r} is not a CPU pool.", code="not_cpu_pool")]
            continue
        sizes = cpu_pool_nodes(flavor_id=r["flavor"].pk)
        if not any(c >= r["cpu_millicores"] and m >= r["memory_mib"] for c, m in sizes):
            most = max(sizes, default=(0, 0))
            errors[f"roles.{i}.cpu"] = [serializers.ErrorDetail(
                f"One pod of {r['cpu_millicores']}m and {r['memory_mib']}Mi fits no node of {r['flavor'].name!r} "
                f"(its largest: {most[0]}m, {most[1]}Mi).", code="exceeds_largest_node")]
    if errors:
        return errors
    first = gpu[0] if gpu else roles[0]
    attrs["gpus_per_pod"] = first["gpus_per_pod"]
    attrs["pods"] = sum(r["pods"] for r in (gpu or roles))
    attrs["cpu_pods"] = sum(r["pods"] for r in roles if r["gpus_per_pod"] == 0) if gpu else 0
    attrs["cpu_millicores"], attrs["memory_mib"] = first["cpu_millicores"], first["memory_mib"]
    return errors


def cpu_pool_names() -> list[str]:
    return list(Flavor.objects.filter(kind=FlavorKind.CPU).order_by("name").values_list("name", flat=True))


def size_range_problems(attrs: dict) -> dict[str, list]:
    """A size range (``min_pods``) fits a batch job of one GPU role that checkpoints, and runs from at least one
    pod to at most ``pods``; a global batch size needs a size range and one sample per GPU at the largest size."""
    low, batch = attrs.get("min_pods"), attrs.get("global_batch_size")
    errors: dict[str, list] = {}

    def say(field: str, text: str, code: str) -> None:
        errors.setdefault(field, []).append(serializers.ErrorDetail(text, code=code))

    if low is not None:
        pods = attrs.get("pods", 1)
        if attrs.get("kind", JobKind.BATCH) != JobKind.BATCH:
            say("min_pods", "Only a batch job can be resizable: a session or service keeps its size.",
                "resizable_kind")
        elif attrs.get("roles"):
            say("min_pods", "A job of roles cannot be resizable: a size range applies to the pods of one role.",
                "resizable_roles")
        elif not attrs.get("gpus_per_pod"):
            say("min_pods", "A resizable job needs GPUs per pod (gpus of 1 or more).", "resizable_gpus")
        elif attrs.get("share_milli"):
            # a resize adds or removes whole pods on whole GPUs; a shared GPU's fractions are placed one by one
            say("min_pods", "A job on a fraction of a GPU cannot be resizable: ask for whole GPUs to resize.",
                "resizable_fraction")
        elif low > pods:
            say("min_pods", f"The minimum ({low} pods) is above the maximum (pods: {pods}).", "min_above_max")
        elif attrs.get("checkpoint_interval_s") is None:
            say("checkpoint_interval_s", "A resizable job changes size at its checkpoints: declare how often it "
                "saves one.", "resizable_needs_checkpoints")
    if batch is not None:
        if low is None:
            say("global_batch_size", "A global batch size is kept across resizes: set min_pods too.",
                "batch_needs_size_range")
        elif batch < attrs.get("pods", 1) * (attrs.get("gpus_per_pod") or 1):
            say("global_batch_size", "The global batch size must give every GPU at least one sample at the "
                "largest size.", "batch_too_small")
    return errors


class JobSubmitSerializer(FieldsBuiltOnce, StrictSerializer):
    name = serializers.CharField(max_length=63)
    kind = serializers.ChoiceField(choices=JobKind.choices, required=False, default=JobKind.BATCH,
                                   help_text="batch (runs to its end), session (opened in the browser) or service "
                                   "(an endpoint until stopped); docs/sessions.md")
    image = serializers.CharField(max_length=512, required=False,
                                  help_text="required, except for a session started from a lab session image")
    session_image = serializers.CharField(
        max_length=63, required=False, default="", allow_blank=True,
        help_text="sessions: one of the lab's session images (GET /api/v1/session-images), which sets the image, "
        "port and readiness path")
    port = StrictIntegerField(min_value=1, max_value=65535, required=False, allow_null=True, default=None,
                              help_text="sessions and services: the container port the route reaches")
    readiness_path = serializers.CharField(max_length=200, required=False, default="", allow_blank=True,
                                           help_text="sessions and services: answers 200 once the app is ready")
    command = serializers.ListField(child=serializers.CharField(max_length=8192, trim_whitespace=False),
                                    required=False, allow_empty=False, min_length=1, max_length=MAX_COMMAND_ITEMS,
                                    help_text="required for batch jobs; sessions and services may run the image's "
                                    "own entrypoint")
    env = serializers.DictField(child=serializers.CharField(max_length=32768, allow_blank=True,
                                                            trim_whitespace=False), required=False, default=dict)
    secrets = serializers.JSONField(
        required=False, default=list,
        help_text='department secrets: [{"secret": "wandb", "key": "api_key", "env": "WANDB_API_KEY"} | '
        '{"secret": "hf", "path": "/etc/secrets/hf"}] (names and keys only; GET /api/v1/secrets lists them)')
    flavor = FlavorField()
    gpus = StrictIntegerField(min_value=0, max_value=64, source="gpus_per_pod", required=False,
                              help_text="GPUs per pod (0 on a CPU pool); a job of roles sets them per role")
    pods = StrictIntegerField(min_value=1, max_value=64, required=False, default=1,
                              help_text="pods admitted all-or-nothing (gang)")
    gpu_memory_gib = serializers.FloatField(
        min_value=0.125, max_value=1024, required=False, allow_null=True, default=None,
        help_text="a fraction of one GPU per pod, on a flavor that shares GPUs by memory (HAMi): the GPU memory "
        "in GiB (docs/fractions.md)")
    gpu_cores = StrictIntegerField(
        min_value=1, max_value=100, required=False, allow_null=True, default=None,
        help_text="with gpu_memory_gib: the share of the GPU's compute in per cent (default: not limited)")
    gpu_replicas = StrictIntegerField(
        min_value=1, max_value=64, required=False, allow_null=True, default=None,
        help_text="a fraction of one GPU per pod, on a flavor shared by time-slicing or MPS replicas: how many of "
        "its replicas")
    roles = RoleSerializer(many=True, required=False, allow_empty=False, max_length=MAX_ROLES,
                           help_text="a job made of roles (docs/workloads.md, \"Shapes\"): each with its own pods, "
                           "image, command, GPUs (0 allowed), CPU, memory and failure policy")
    cpu = CpuField(required=False, default=4000, source="cpu_millicores")  # defaults skip parsing
    memory = MemoryField(required=False, default=16384, source="memory_mib")
    tier = serializers.ChoiceField(choices=Tier.choices, required=False,
                                   help_text="default: elastic; realtime for sessions (always) and services")
    urgency = serializers.ChoiceField(choices=Urgency.choices, required=False, default=Urgency.NORMAL)
    task_type = serializers.ChoiceField(choices=TaskType.choices, required=False, default=TaskType.TRAIN)
    deadline = serializers.DateTimeField(required=False, allow_null=True, default=None)
    max_runtime_s = StrictIntegerField(min_value=60, max_value=MAX_RUNTIME_S, required=False, default=3600)
    bid = StrictIntegerField(min_value=0, max_value=10**9, required=False, default=0,
                             help_text="max milli-credits per GPU-hour offered for borrowed capacity")
    termination_grace_s = StrictIntegerField(min_value=0, max_value=3600, required=False, default=30)
    checkpoint_interval_s = StrictIntegerField(
        min_value=60, max_value=MAX_RUNTIME_S, required=False, allow_null=True, default=None,
        help_text="seconds between the checkpoints the job resumes from (null: none or unknown); jobs that declare "
        "it lose at most that much work when preempted, and are preempted near a checkpoint",
    )
    pdb_min_available = StrictIntegerField(min_value=1, max_value=64, required=False, allow_null=True,
                                           default=None)
    min_pods = StrictIntegerField(
        min_value=1, max_value=64, required=False, allow_null=True, default=None,
        help_text="a resizable job (docs/workloads.md, \"Resizable jobs\"): it runs on min_pods to pods pods "
        "(pods is then its maximum), grows into idle GPUs and shrinks instead of being preempted, at its "
        "checkpoints; needs checkpoint_interval_s. null: always pods")
    global_batch_size = StrictIntegerField(
        min_value=1, max_value=10**7, required=False, allow_null=True, default=None,
        help_text="a resizable job's global batch size: at each size its workers are told the per-worker batch "
        "and gradient-accumulation steps that keep it (PORTAL_PER_WORKER_BATCH, PORTAL_GRAD_ACCUM_STEPS)")
    preemptible = StrictBooleanField(
        required=False, allow_null=True, default=None,
        help_text="apart from the tier: false asks that an elastic or backfill job never be preempted (within the "
        "lab's limits for the department and tier, at their surcharge; it then borrows nothing), true lets a "
        "realtime job be preempted; null: the tier's")
    notice_s = StrictIntegerField(
        min_value=0, max_value=3600, required=False, default=0,
        help_text="seconds of notice the job needs before it is preempted (0: none): its pods see the notice in the "
        "file PORTAL_NOTICE_FILE names, and may answer 'checkpoint written' to be evicted at once; at most the "
        "lab's limit for the department and tier (docs/scheduling.md, 'Notice before preemption')")
    max_retries = StrictIntegerField(min_value=0, max_value=MAX_RETRIES, required=False, default=0,
                                     help_text="times a failed attempt may be retried (platform failures are "
                                     "retried without asking; docs/workloads.md)")
    retry_on_exit_codes = serializers.ListField(
        child=StrictIntegerField(min_value=1, max_value=255), required=False, default=list, max_length=32,
        help_text="exit codes of the main container that ask for a retry (137: also out of memory)")
    cluster_selector = serializers.DictField(
        child=serializers.CharField(max_length=63, allow_blank=True), required=False, default=dict,
        help_text="cluster labels the job requires, e.g. {\"data\": \"campus\"}: only clusters with all of them")
    cluster_preference = serializers.DictField(
        child=serializers.CharField(max_length=63, allow_blank=True), required=False, default=dict,
        help_text="cluster labels the job prefers: among clusters that fit, more matches go first")
    topology_level = serializers.CharField(
        max_length=317, required=False, allow_blank=True, default="",
        help_text="a topology level of the job's cluster (a node label key of its topology_levels, or its last "
        "part: \"rack\"): its pods sit within one domain of it (required) or should (preferred); blank: a gang "
        "prefers the most compact placement")
    topology_required = serializers.BooleanField(
        required=False, default=False,
        help_text="the pods must sit within one domain of topology_level: the job waits rather than spread")
    mounts = serializers.JSONField(
        required=False, default=list,
        help_text=f'data sources mounted by name, at most {MAX_MOUNTS}: [{{"source": "imagenet", "path": "/data", '
        '"read_only": true}] (read-only unless false, on a writable source)')
    checkpoint = serializers.JSONField(
        required=False, default=None,
        help_text='a checkpoint directory kept across attempts: {"source": "scratch", "path": "/checkpoint", '
        '"cluster": "..."} or true (the department\'s writable source); its path is in PORTAL_CHECKPOINT_DIR')
    after = AfterField(required=False, default=list)
    shm_mb = StrictIntegerField(
        required=False, allow_null=True, default=None,
        help_text="size of the memory-backed /dev/shm in MiB, counted in the pod's memory (default: SHM_DEFAULT_MB, "
        "at most half the memory)")

    def unknown_field_message(self, name: str) -> str:
        return f"Unknown field {name!r}. Jobs cannot set raw pod fields."

    def to_internal_value(self, data):
        self._item_flavor = data.get("flavor") if isinstance(data, dict) else None  # per item: one child
        self._given = set(data) if isinstance(data, dict) else set()
        try:
            return super().to_internal_value(data)  # serializer validates a whole list
        except serializers.ValidationError as exc:
            # A batch job's image and command are required like any field: said with the other field errors,
            # not only once they are fixed (validate() decides the other kinds' rules).
            if isinstance(data, dict) and data.get("kind", JobKind.BATCH) == JobKind.BATCH and isinstance(
                    exc.detail, dict):
                for field in ("image", "command"):
                    if field not in data:
                        exc.detail.setdefault(field, [serializers.ErrorDetail("This field is required.",
                                                                              code="required")])
            raise

    def validate_name(self, value):
        if not NAME_RE.match(value):
            raise serializers.ValidationError("Letters, digits, space, '_', '.', '-'; up to 63; starts alnum.")
        return value

    def validate_image(self, value):
        m = IMAGE_RE.fullmatch(value)
        if m is None or len(m.group("name")) > IMAGE_NAME_MAX:
            raise serializers.ValidationError(
                "Not a valid image reference (e.g. nvcr.io/nvidia/pytorch:24.05-py3 or repo/img@sha256:...).",
                code="invalid_image",
            )
        return value

    def validate_command(self, value):
        if any(not part for part in value):
            raise serializers.ValidationError("Command arguments must not be empty strings.", code="blank")
        if sum(len(p.encode()) for p in value) > MAX_COMMAND_BYTES:
            raise serializers.ValidationError(f"The command is longer than {MAX_COMMAND_BYTES} bytes.",
                                              code="too_long")
        return value

    def validate_env(self, value):
        if len(value) > MAX_ENV:
            raise serializers.ValidationError(f"At most {MAX_ENV} variables.", code="too_many")
        bad = []
        for key in value:
            if len(key) > ENV_NAME_MAX:
                bad.append(f"{key[:40]!r}... is longer than {ENV_NAME_MAX} characters.")
            elif not ENV_NAME_RE.fullmatch(key):
                bad.append(f"{key!r} is not a valid variable name.")
            elif key in RESERVED_ENV_NAMES or key.startswith(RESERVED_ENV_PREFIXES):
                bad.append(f"{key!r} is reserved for the platform.")
            elif key in SIM_NUMBERS and not _bounded_number(value[key], *SIM_NUMBERS[key]):
                low, high, integer = SIM_NUMBERS[key]
                bad.append(f"{key} must be a finite {'whole ' if integer else ''}number from {low} to {high}.")
        if bad:
            raise serializers.ValidationError(bad, code="invalid_env")
        return value

    def _cluster_labels(self) -> list[dict]:
        """Every cluster's labels, read once per serializer (a batch checks all its items against one read)."""
        if not hasattr(self, "_clusters_seen"):
            self._clusters_seen = [c or {} for c in Cluster.objects.values_list("labels", flat=True)]
        return self._clusters_seen

    def validate_cluster_selector(self, value):
        problems = label_problems(value)
        if problems:
            raise serializers.ValidationError(problems, code="invalid_label")
        if value and not any(all(labels.get(k) == v for k, v in value.items()) for labels in self._cluster_labels()):
            raise serializers.ValidationError(
                "No cluster has all of these labels (GET /api/v1/clusters lists each cluster's labels).",
                code="no_matching_cluster")
        return value

    def validate_cluster_preference(self, value):
        problems = label_problems(value)
        if problems:
            raise serializers.ValidationError(problems, code="invalid_label")
        return value

    def validate_mounts(self, value):
        problems = mount_shape_problems(value)
        if problems:
            raise serializers.ValidationError(problems, code="invalid_mounts")
        return value

    def validate_checkpoint(self, value):
        if value is not None and not isinstance(value, bool | dict):
            raise serializers.ValidationError('Give true or {"source": "name", "path": "/checkpoint"}.',
                                              code="invalid")
        return value

    def validate_deadline(self, value):
        if value is not None and value <= timezone.now():
            raise serializers.ValidationError("The deadline is in the past.", code="past")
        return value

    def validate_flavor(self, flavor):
        if flavor.largest_node_gpus is None and not (flavor.is_cpu and lent_gpu_nodes(flavor_id=flavor.pk)):
            raise serializers.ValidationError(f"No node offers flavor {flavor.name!r}.", code="no_nodes")
        return flavor

    def validate_roles(self, roles):
        # Each role with GPUs on one node of the job's flavor (the gang as a whole is checked in ``validate``).
        for role in roles:
            if role["gpus_per_pod"]:
                self.validate_gpus(role["gpus_per_pod"])
        return roles

    def validate_gpus(self, value):
        # ``flavor`` is declared before ``gpus``, so the item's flavor (if valid) was read already.
        flavor = self.fields["flavor"].seen.get(self._item_flavor) if isinstance(self._item_flavor, str) else None
        if value == 0 and flavor is not None and not flavor.is_cpu:
            raise serializers.ValidationError(
                f"A job without GPUs runs on a CPU pool, not on {flavor.name!r}'s GPU nodes: set flavor to one "
                f"({', '.join(cpu_pool_names()) or 'the lab has none yet'}).", code="needs_cpu_pool")
        largest = None if flavor is None or flavor.is_cpu else flavor.largest_node_gpus  # (a CPU pool: ``validate``)
        if largest is not None and value > largest:
            raise serializers.ValidationError(
                f"{value} GPUs per pod do not fit on any node: the largest node of this type has {largest}. "
                "Use several pods (a gang) instead.",
                code="exceeds_largest_node",
            )
        return value

    def validate_retry_on_exit_codes(self, value):
        if len(set(value)) != len(value):
            raise serializers.ValidationError("List each exit code once.", code="duplicate")
        return sorted(value)

    def validate_readiness_path(self, value):
        if value and not READINESS_PATH_RE.match(value):
            raise serializers.ValidationError("A path starting with '/', without spaces (e.g. /healthz).",
                                              code="invalid_path")
        return value

    def validate(self, attrs):
        errors = kind_problems(attrs)
        if errors:
            raise serializers.ValidationError(errors, code="invalid")
        if attrs.get("pdb_min_available") is not None and attrs["pdb_min_available"] > attrs.get("pods", 1):
            raise serializers.ValidationError(
                {"pdb_min_available": ["Cannot exceed the number of pods."]}, code="invalid")
        if attrs.get("retry_on_exit_codes") and not attrs.get("max_retries"):
            raise serializers.ValidationError(
                {"retry_on_exit_codes": ["Set max_retries too: without it no exit code is retried."]},
                code="invalid")
        # The shape here (with the job's env); which secrets exist is the department's, checked at submission.
        # Other mount paths of the job (its data sources' and checkpoint's, where the job has them) must not
        # overlap a secret's directory.
        mounts = [m["path"] for m in [*(attrs.get("mounts") or []), attrs.get("checkpoint")]
                  if isinstance(m, dict) and isinstance(m.get("path"), str)]
        problems = use_problems(attrs.get("secrets", []), env=attrs.get("env") or {}, mounts=mounts)
        if problems:
            raise serializers.ValidationError(
                {"secrets": [serializers.ErrorDetail(p, code="invalid_secret") for p in problems]})
        memory_gib, cores, replicas = (attrs.pop("gpu_memory_gib", None), attrs.pop("gpu_cores", None),
                                       attrs.pop("gpu_replicas", None))
        flavor = attrs.get("flavor")
        fractional = memory_gib is not None or cores is not None or replicas is not None
        if (not fractional and attrs.get("kind") == JobKind.SESSION and not attrs.get("roles")
                and attrs.get("gpus_per_pod") in (None, 1)):
            # The lab's default share for sessions on a shared GPU type: a notebook rarely needs a whole GPU,
            # and one asking for several GPUs, or a size of its own, keeps what it asked for.
            default = fractions.session_default(flavor, settings.SESSION_DEFAULT_GPU_FRACTION)
            if default is not None:
                memory_gib, replicas = default.get("gpu_memory_gib"), default.get("gpu_replicas")
                fractional = True
        problems = fractions.request_problems(flavor, gpus=attrs.get("gpus_per_pod"), memory_gib=memory_gib,
                                              cores=cores, replicas=replicas)
        if problems:
            raise serializers.ValidationError(
                {k: [serializers.ErrorDetail(v, code="invalid_fraction")] for k, v in problems.items()})
        if fractional and not attrs.get("roles"):
            attrs["gpus_per_pod"] = 1
        elif (not fractional and flavor is not None and flavor.sharing == GpuSharing.REPLICAS
              and attrs.get("gpus_per_pod")):
            raise serializers.ValidationError({"gpus": [serializers.ErrorDetail(
                f"Every GPU of {flavor.name!r} is shared as {flavor.replicas_per_gpu} replicas: ask for "
                "gpu_replicas, or whole GPUs of another flavor.", code="invalid_fraction")]})
        shape = shape_problems(attrs, getattr(self, "_given", set()))
        if shape:
            raise serializers.ValidationError(shape, code="invalid")
        if fractional:
            if attrs.get("gpus_per_pod") != 1:
                raise serializers.ValidationError({"roles": [serializers.ErrorDetail(
                    "A fraction is a part of one GPU per pod: the roles with GPUs ask for 1 each.",
                    code="invalid_fraction")]})
            attrs["gpu_memory_mib"] = round((memory_gib or 0) * fractions.MIB_PER_GIB)
            attrs["gpu_cores"], attrs["gpu_replicas"] = cores or 0, replicas or 0
            attrs["share_milli"] = fractions.share_milli(flavor, memory_mib=attrs["gpu_memory_mib"],
                                                         cores=attrs["gpu_cores"], replicas=attrs["gpu_replicas"])
        size = size_range_problems(attrs)
        if size:
            raise serializers.ValidationError(size, code="invalid")
        if "flavor" in attrs and attrs.get("gpus_per_pod"):
            self._check_gang_fits(attrs["flavor"], attrs["gpus_per_pod"], attrs.get("pods", 1),
                                  attrs.get("cluster_selector") or {})
        if attrs.get("topology_level") or attrs.get("topology_required"):
            attrs["topology_level"] = self._check_topology(attrs)
        return attrs

    def _check_topology(self, attrs) -> str:
        """The level the job names, as its label key: a level of a cluster it may run on (by key or by its last
        part), declared by one that could hold the whole gang within one of its domains when it is required.
        Otherwise the job could never be placed as it asks, and says so now."""
        level, required = attrs.get("topology_level") or "", attrs.get("topology_required", False)
        if not level:
            raise serializers.ValidationError({"topology_level": [serializers.ErrorDetail(
                "Name the level its pods must share (e.g. \"rack\").", code="required")]})
        flavor = attrs.get("flavor")
        if flavor is None or not attrs.get("gpus_per_pod"):
            raise serializers.ValidationError({"topology_level": [serializers.ErrorDetail(
                "Only a job with GPUs is placed by topology.", code="invalid")]})
        selector = attrs.get("cluster_selector") or {}
        clusters = [name for name, labels, _ in flavor_pools(flavor_id=flavor.pk)
                    if all(labels.get(k) == v for k, v in selector.items())]
        domains = topology_domains(flavor_id=flavor.pk, clusters=clusters)
        keys = {k for levels in domains.values() for k in levels}
        key = level if level in keys else next((k for k in sorted(keys) if k.rsplit("/", 1)[-1] == level), None)
        if key is None:
            known = ", ".join(sorted(keys)) or "none: no cluster it may run on declares topology levels"
            raise serializers.ValidationError({"topology_level": [serializers.ErrorDetail(
                f"Unknown topology level {level!r} (the levels of the clusters it may run on: {known}).",
                code="unknown_level")]})
        if required:
            g, pods = attrs["gpus_per_pod"], attrs.get("pods", 1)
            room = max((sum(n // g for n in nodes) for levels in domains.values()
                        for nodes in levels.get(key, {}).values()), default=0)
            if pods > room:
                largest = max((sum(nodes) for levels in domains.values() for nodes in levels.get(key, {}).values()),
                              default=0)
                raise serializers.ValidationError({"topology_level": [serializers.ErrorDetail(
                    f"{pods} pods x {g} GPUs never fit in one {level_name(key)}: the largest has {largest} "
                    f"GPUs of {flavor.name!r}, room for {room} such pods.", code="exceeds_largest_domain")]})
        return key

    def _check_gang_fits(self, flavor: Flavor, gpus: int, pods: int, selector: dict) -> None:
        """The whole gang on one cluster (a job never spans clusters): the clusters its selector allows must
        offer the flavor, and one of them must hold all its pods at once, counting every node of the flavor
        as empty. Otherwise the job could never start, and says so now rather than wait for ever."""
        seen = getattr(self, "_pools_seen", None)
        if seen is None:
            seen = self._pools_seen = {}
        if flavor.pk not in seen:
            seen[flavor.pk] = flavor_pools(flavor_id=flavor.pk)
        every = seen[flavor.pk]
        pools = [p for p in every if all(p[1].get(k) == v for k, v in selector.items())]
        if not pools:
            offering = ", ".join(name for name, _, _ in every) or "none"
            raise serializers.ValidationError({"cluster_selector": [serializers.ErrorDetail(
                f"No cluster with these labels offers {flavor.name!r} (clusters that do: {offering}).",
                code="no_matching_cluster")]})
        room = max(sum(n // gpus for n in nodes) for _, _, nodes in pools)
        if pods > room:
            most = max(sum(nodes) for _, _, nodes in pools)
            raise serializers.ValidationError({"pods": [serializers.ErrorDetail(
                f"{pods} pods x {gpus} GPUs ({pods * gpus} GPUs) never fit at once: a job runs on one cluster, "
                f"and the largest of {flavor.name!r} has {most} GPUs, room for {room} such pods.",
                code="exceeds_largest_pool")]})


class JobBatchSubmitSerializer(StrictSerializer):
    """Several jobs, each validated exactly as a POST /api/v1/jobs body; errors are keyed by the item's
    position (``jobs.3.gpus``)."""

    # One child serializer validates every item, so each distinct flavor is read once per batch.
    jobs = JobSubmitSerializer(many=True, allow_empty=False,
                               help_text="Job bodies as for POST /api/v1/jobs, at most JOBS_BATCH_MAX (500)")

    not_an_object = 'Expected a JSON object: {"jobs": [...]}.'

    def unknown_field_message(self, name: str) -> str:
        return f"Unknown field {name!r}; the body is {{\"jobs\": [...]}}."

    def to_internal_value(self, data):
        jobs = data.get("jobs") if isinstance(data, dict) else None
        problem = None  # checked before any item is validated, and reported on "jobs" itself
        if isinstance(data, dict) and "jobs" in data and jobs is not None and not isinstance(jobs, list):
            problem = ("A JSON list of job bodies is required.", "not_a_list")
        elif isinstance(jobs, list) and not jobs:
            problem = ("The list is empty: submit at least one job.", "empty")
        elif isinstance(jobs, list) and len(jobs) > settings.JOBS_BATCH_MAX:
            problem = (f"At most {settings.JOBS_BATCH_MAX} jobs per batch; this one has {len(jobs)}. Split it.",
                       "too_many")
        if problem:  # reported with any unknown fields, as the base reports them with the other errors
            raise serializers.ValidationError({**self.unknown_errors(data),
                                               "jobs": [serializers.ErrorDetail(problem[0], code=problem[1])]})
        return super().to_internal_value(data)


class JobEventSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    actor = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    role = serializers.CharField(read_only=True, help_text="a job of several roles: the role the event concerns "
                                 "(its pod's, or the one the reason names); empty for the whole job")

    class Meta:
        model = JobEvent
        fields = ["at", "attempt", "kind", "from_state", "to_state", "reason_code", "message", "data", "actor",
                  "role"]


class JobSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True,
                                        help_text="the submitter's team when it was submitted (null: none)")
    flavor = serializers.SlugRelatedField(slug_field="name", read_only=True)
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)
    cpu = CpuField(source="cpu_millicores", read_only=True)
    memory = MemoryField(source="memory_mib", read_only=True)
    gpus = serializers.IntegerField(source="gpus_per_pod", read_only=True, help_text="GPUs per pod")
    reason = serializers.SerializerMethodField()
    checkpoint = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField(help_text="sessions and services: where their route answers")
    held = serializers.SerializerMethodField()
    after = serializers.SerializerMethodField()
    fraction = serializers.SerializerMethodField(
        help_text="a fraction of one GPU per pod (null: whole GPUs): what was asked and the share of a GPU it is")
    size = serializers.SerializerMethodField(
        help_text="a resizable job (null: a fixed size): its pods now (null while queued), its range, and the "
                  "resize under way (null: none)")

    class Meta:
        model = Job
        fields = [
            "id", "name", "owner", "department", "team", "state", "reason", "estimated_start", "kind", "session_image",
            "port", "readiness_path", "ready", "url", "array", "array_index", "held", "held_at", "after", "image",
            "command",
            "env", "secrets", "flavor", "gpus", "pods", "fraction", "cpu", "memory", "tier", "urgency", "task_type", "user_tier",
            "deadline", "max_runtime_s", "bid", "termination_grace_s", "checkpoint_interval_s", "pdb_min_available",
            "min_pods", "global_batch_size", "size",
            "preemptible", "price_surcharge_pct", "notice_s", "expedited_requeues",
            "cluster_selector", "cluster_preference", "topology_level", "topology_required", "mounts", "checkpoint",
            "shm_mb", "max_retries", "retry_on_exit_codes", "retries", "attempt",
            "cluster", "placement", "borrowed", "price", "exit_code", "preemption_count", "submitted_at",
            "admitted_at", "started_at", "finished_at",
        ]
        read_only_fields = fields

    def get_url(self, job) -> str | None:
        return route_url(job.pk) if job.has_route else None

    def get_held(self, job) -> bool:
        return job.held_at is not None

    @extend_schema_field({"type": "object", "nullable": True, "properties": {
        "gpu_memory_gib": {"type": "number", "nullable": True}, "gpu_cores": {"type": "integer", "nullable": True},
        "gpu_replicas": {"type": "integer", "nullable": True}, "share": {"type": "number"}}})
    def get_fraction(self, job) -> dict | None:
        return fractions.describe_request(job)

    @extend_schema_field({"type": "array", "items": {"type": "object"}})
    def get_after(self, job) -> list[dict]:
        """What the job waits for, as submitted (``{"condition", "job" | "array"}``)."""
        return dependencies_of(job)

    @extend_schema_field({"type": "object", "nullable": True, "properties": {
        "pods": {"type": "integer", "nullable": True}, "min_pods": {"type": "integer"}, "max_pods": {"type": "integer"},
        "resize": {"type": "object", "nullable": True}}})
    def get_size(self, job) -> dict | None:
        if job.min_pods is None:
            return None
        rz = job.resize
        return {"pods": job.current_pods, "min_pods": job.min_pods, "max_pods": job.pods,
                "resize": None if not rz else {k: rz.get(k) for k in (
                    "from", "to", "direction", "reason", "for_job", "price", "due_at", "state")}}

    def get_reason(self, job) -> dict:
        return {"code": job.reason_code, "message": job.reason_message, "detail": job.reason_detail}

    def get_checkpoint(self, job) -> dict | None:
        """The job's checkpoint directory: the source, where the pod sees it (PORTAL_CHECKPOINT_DIR), where it
        lives on the source, and when it was deleted (null while kept)."""
        if not job.checkpoint:
            return None
        out = {k: job.checkpoint.get(k) for k in ("source", "cluster", "path")}
        out["sub_path"] = out["deleted_at"] = None
        try:  # read only for the jobs that have one
            row = job.checkpoint_dir
        except ObjectDoesNotExist:
            row = None
        if row is not None:
            out["sub_path"], out["deleted_at"] = row.sub_path, row.deleted_at
        return out


class JobRoleSerializer(serializers.ModelSerializer):
    """A role as the job's page and ``GET /api/v1/jobs/{id}`` show it (blank image, null command: the job's)."""

    gpus = serializers.IntegerField(source="gpus_per_pod", read_only=True)
    cpu = CpuField(source="cpu_millicores", read_only=True)
    memory = MemoryField(source="memory_mib", read_only=True)
    flavor = serializers.SlugRelatedField(slug_field="name", read_only=True, allow_null=True)  # null: the job's flavor

    class Meta:
        model = JobRole
        fields = ["name", "pods", "image", "command", "gpus", "cpu", "memory", "shm_mb", "flavor", "failure_policy"]
        read_only_fields = fields


class JobDetailSerializer(JobSerializer):
    events = JobEventSerializer(many=True, read_only=True)
    queue_position = serializers.SerializerMethodField()
    roles = serializers.SerializerMethodField()

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "queue_position", "events", "roles"]
        read_only_fields = fields

    def get_queue_position(self, job) -> int | None:
        return queue_position(job=job)

    @extend_schema_field(JobRoleSerializer(many=True))
    def get_roles(self, job) -> list[dict]:
        rows = getattr(job, "new_roles", None)  # (a job just submitted: its roles as written)
        if rows is None:
            rows = job.roles.select_related("flavor").order_by("index")
        return JobRoleSerializer(rows, many=True).data


class JobBatchSerializer(serializers.Serializer):
    """The jobs of a batch, in the order submitted, each as in the jobs list (GET /api/v1/jobs)."""

    jobs = JobSerializer(many=True, read_only=True)


class DependenciesSerializer(StrictSerializer):
    after = AfterField(help_text="what the job waits for from now on ([] : nothing)")


class CancelSerializer(StrictSerializer):
    comment = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


def validate_job_spec(spec) -> dict:
    """A template's spec, checked exactly as a submission: the same serializer, so the same field errors (an
    unknown field, an invalid value, a required field missing). Returns the validated data; raises
    ``serializers.ValidationError`` with the submission's field errors."""
    if not isinstance(spec, dict):
        raise serializers.ValidationError("A job submission body (a JSON object), as for POST /api/v1/jobs.",
                                          code="invalid")
    submission = JobSubmitSerializer(data=spec)
    if not submission.is_valid():
        raise serializers.ValidationError(submission.errors)
    return submission.validated_data


class JobTemplateSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    can_change = serializers.SerializerMethodField()

    class Meta:
        model = JobTemplate
        fields = ["id", "name", "scope", "department", "owner", "description", "spec", "created_by",
                  "created_at", "updated_at", "can_change"]
        read_only_fields = fields

    def get_can_change(self, template) -> bool:
        request = self.context.get("request")
        return request is not None and JobTemplate.objects.permits(request.user, template, "change")


class JobTemplateWriteSerializer(StrictSerializer):
    """A template: a name, personal or the department's, and a submission body validated as POST /api/v1/jobs
    validates it (a template that would not submit is refused with the same field errors)."""

    name = serializers.RegexField(rf"^{TEMPLATE_NAME}$", max_length=63, error_messages={
        "invalid": "Letters, digits, '_', '.', '-'; up to 63; starts with a letter or digit."})
    scope = serializers.ChoiceField(choices=TemplateScope.choices, required=False, default=TemplateScope.PERSONAL)
    description = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    spec = serializers.JSONField(help_text="a job submission body, as for POST /api/v1/jobs")

    def validate_spec(self, value):
        validate_job_spec(value)
        return value


class JobTemplateUpdateSerializer(JobTemplateWriteSerializer):
    """A change of a template: any of name, description, spec (its scope stays what it is)."""

    scope = None

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("partial", True)
        super().__init__(*args, **kwargs)


class QuoteSizeRangeSerializer(serializers.Serializer):
    """A resizable job's costs across its range of sizes (milli-credits, each for its whole max runtime)."""

    min_pods = serializers.IntegerField()
    max_pods = serializers.IntegerField()
    start_pods = serializers.IntegerField(help_text="The size it would start at now (its minimum when it would "
                                          "wait, the size it waits at, or when the estimate is skipped).")
    start_gpus = serializers.IntegerField()
    max_gpus = serializers.IntegerField()
    cost_at_start = serializers.IntegerField(help_text="At `start_pods`, at the job's own rate.")
    cost_at_largest = serializers.IntegerField(
        help_text="Grown to `max_pods`: the GPUs it starts on at its own rate, the grown ones at `grow_rate`.")
    hold = serializers.IntegerField(help_text="What admission holds: the worst case, every GPU of its largest size "
                                    "at its own rate (= `estimated_cost`).")
    grow_rate = serializers.IntegerField(
        help_text="Milli-credits per GPU-hour of a grown GPU now: the flavor's clearing price in the estimate's "
                  "cycle, at least the base price (a later grow pays its own cycle's).")
    grow_basis = serializers.ChoiceField(choices=["clearing", "base"])
    grown_borrowed = serializers.BooleanField(help_text="Always true: grown GPUs are borrowed, preemptible "
                                              "capacity, not refunded when the portal preempts the job.")
    message = serializers.CharField()


class QuoteSerializer(serializers.Serializer):
    """The answer of POST /jobs/quote (milli-credits; nothing is submitted)."""

    flavor = serializers.CharField()
    tier = serializers.CharField()
    gpus_total = serializers.FloatField(help_text="Its GPUs at its largest size (a fraction's share of one).")
    hold_s = serializers.IntegerField()
    gpu_hours = serializers.FloatField()
    base_price = serializers.IntegerField()
    bid = serializers.IntegerField()
    rate = serializers.IntegerField(help_text="The worst-case rate: max(base price, bid).")
    preemptible = serializers.BooleanField()
    surcharge_pct = serializers.IntegerField()
    estimated_cost = serializers.IntegerField(help_text="The hold: worst-case rate x GPUs x max runtime.")
    estimated_credits = serializers.FloatField()
    metered = serializers.BooleanField()
    available = serializers.IntegerField(allow_null=True)
    affordable = serializers.BooleanField()
    needs_approval = serializers.BooleanField()
    approval_reasons = serializers.ListField(child=serializers.CharField())
    free_gpus = serializers.IntegerField()
    quota = serializers.DictField(help_text="The department's quota of the flavor before and after the job.")
    team = serializers.DictField(allow_null=True, help_text="The submitter's team's split (null: in no team).")
    start = serializers.DictField(help_text="The engine's estimate on the current queue with this job added.")
    recommendation = serializers.DictField(allow_null=True, help_text="Right-sizing, from similar past jobs.")
    size_range = QuoteSizeRangeSerializer(allow_null=True, help_text="A resizable job's costs across its range; "
                                          "null for any other job.")
