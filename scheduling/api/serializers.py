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

from portal.api.serializers import FieldsBuiltOnce, StrictSerializer
from quotas.models import Flavor
from scheduling.api.fields import AfterField
from scheduling.api.kinds import READINESS_PATH_RE, kind_problems
from scheduling.models import (
    TEMPLATE_NAME,
    Cluster,
    Job,
    JobEvent,
    JobKind,
    JobTemplate,
    TaskType,
    TemplateScope,
    Tier,
    Urgency,
    label_problems,
)
from scheduling.selectors import flavor_pools, queue_position
from scheduling.services.dependencies import dependencies_of
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
    gpus = StrictIntegerField(min_value=1, max_value=64, source="gpus_per_pod", help_text="GPUs per pod")
    pods = StrictIntegerField(min_value=1, max_value=64, required=False, default=1,
                              help_text="pods admitted all-or-nothing (gang)")
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
        if flavor.largest_node_gpus is None:
            raise serializers.ValidationError(f"No node offers flavor {flavor.name!r}.", code="no_nodes")
        return flavor

    def validate_gpus(self, value):
        # ``flavor`` is declared before ``gpus``, so the item's flavor (if valid) was read already.
        flavor = self.fields["flavor"].seen.get(self._item_flavor) if isinstance(self._item_flavor, str) else None
        largest = None if flavor is None else flavor.largest_node_gpus
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
        if "flavor" in attrs and "gpus_per_pod" in attrs:
            self._check_gang_fits(attrs["flavor"], attrs["gpus_per_pod"], attrs.get("pods", 1),
                                  attrs.get("cluster_selector") or {})
        return attrs

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

    class Meta:
        model = JobEvent
        fields = ["at", "attempt", "kind", "from_state", "to_state", "reason_code", "message", "data", "actor"]


class JobSerializer(FieldsBuiltOnce, serializers.ModelSerializer):
    owner = serializers.SlugRelatedField(slug_field="username", read_only=True)
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)
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

    class Meta:
        model = Job
        fields = [
            "id", "name", "owner", "department", "state", "reason", "estimated_start", "kind", "session_image",
            "port", "readiness_path", "ready", "url", "array", "array_index", "held", "held_at", "after", "image",
            "command",
            "env", "secrets", "flavor", "gpus", "pods", "cpu", "memory", "tier", "urgency", "task_type", "user_tier",
            "deadline", "max_runtime_s", "bid", "termination_grace_s", "checkpoint_interval_s", "pdb_min_available",
            "cluster_selector", "cluster_preference", "mounts", "checkpoint", "shm_mb", "max_retries",
            "retry_on_exit_codes", "retries", "attempt",
            "cluster", "placement", "borrowed", "price", "exit_code", "preemption_count", "submitted_at",
            "admitted_at", "started_at", "finished_at",
        ]
        read_only_fields = fields

    def get_url(self, job) -> str | None:
        return f"{settings.SESSION_URL}/s/{job.pk}/" if job.has_route else None

    def get_held(self, job) -> bool:
        return job.held_at is not None

    @extend_schema_field({"type": "array", "items": {"type": "object"}})
    def get_after(self, job) -> list[dict]:
        """What the job waits for, as submitted (``{"condition", "job" | "array"}``)."""
        return dependencies_of(job)

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


class JobDetailSerializer(JobSerializer):
    events = JobEventSerializer(many=True, read_only=True)
    queue_position = serializers.SerializerMethodField()

    class Meta(JobSerializer.Meta):
        fields = [*JobSerializer.Meta.fields, "queue_position", "events"]
        read_only_fields = fields

    def get_queue_position(self, job) -> int | None:
        return queue_position(job=job)


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
