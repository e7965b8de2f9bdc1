"""Jobs and their lifecycle: states, the allowed transitions, the tier, urgency and task vocabularies, and
the append-only timeline.

State changes of a Job are compare-and-set updates (``scheduling.services.jobs.transition``), never a blind
``save()``: a transition names the states it may leave, and loses cleanly when another process got there first."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator
from django.db import models
from django.db.models import Case, F, FloatField, Q, Value, When
from django.db.models.functions import Coalesce
from django.utils import timezone

from engine import tiers as tier_table
from engine.types import TIERS
from portal.models import AppendOnlyModel, Department
from portal.tenancy import (
    ADMIN,
    APPROVE,
    CHANGE,
    DEPARTMENT,
    DEPARTMENT_ADMIN,
    OWNER,
    OWNER_OR_ADMIN,
    PLATFORM,
    VIEW,
    TenantQuerySet,
)
from quotas.models import Flavor
from scheduling.models.clusters import Cluster


class JobState(models.TextChoices):
    PENDING_APPROVAL = "pending_approval", "Pending approval"
    QUEUED = "queued", "Queued"
    ADMITTED = "admitted", "Admitted"
    RUNNING = "running", "Running"
    SUCCEEDED = "succeeded", "Succeeded"
    FAILED = "failed", "Failed"
    CANCELLED = "cancelled", "Cancelled"
    PREEMPTED = "preempted", "Preempted"


ACTIVE_STATES = (JobState.ADMITTED, JobState.RUNNING)  # holding GPUs
WAITING_STATES = (JobState.PENDING_APPROVAL, JobState.QUEUED, JobState.PREEMPTED)
FINAL_STATES = (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED)

# The lifecycle: every allowed move. Anything else is refused by transition().
TRANSITIONS: dict[str, tuple[str, ...]] = {
    JobState.PENDING_APPROVAL: (JobState.QUEUED, JobState.CANCELLED, JobState.FAILED),
    JobState.QUEUED: (JobState.ADMITTED, JobState.CANCELLED, JobState.FAILED),
    JobState.ADMITTED: (JobState.RUNNING, JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED,
                        JobState.PREEMPTED, JobState.QUEUED),
    JobState.RUNNING: (JobState.SUCCEEDED, JobState.FAILED, JobState.CANCELLED, JobState.PREEMPTED,
                       JobState.QUEUED),
    JobState.PREEMPTED: (JobState.QUEUED, JobState.CANCELLED),
    JobState.SUCCEEDED: (),
    JobState.FAILED: (),
    JobState.CANCELLED: (),
}


# The tiers are the scheduling core's table (``Tier.REALTIME`` etc. for the ORM), each with its label.
TIER_LABELS = {t.name: t.label for t in tier_table.TABLE}
Tier = models.TextChoices("Tier", [(t.upper(), (t, TIER_LABELS[t])) for t in TIERS])


class Urgency(models.TextChoices):
    LOW = "low", "Low"
    NORMAL = "normal", "Normal"
    HIGH = "high", "High"
    CRITICAL = "critical", "Critical"


class TaskType(models.TextChoices):
    TRAIN = "train", "Training"
    INFERENCE = "inference", "Inference"
    PROCESSING = "processing", "Data processing"


class JobKind(models.TextChoices):
    """What a job is for (docs/sessions.md): work that runs to its end, an interactive session its owner opens
    in the browser, or a service that answers callers at a URL until it is stopped."""

    BATCH = "batch", "Batch"
    SESSION = "session", "Interactive session"
    SERVICE = "service", "Service (endpoint)"


# Connecting to a session (its route, its proxy): its owner alone, department admins included nowhere
# (a session is a shell with its owner's data and secrets; admins stop it and read its logs, docs/sessions.md).
CONNECT = "connect"


class JobQuerySet(TenantQuerySet):
    """Members see their department's jobs; a job's owner and its department's admins cancel it and read its
    logs (``change``); its department's admins approve it; only its owner connects to a session (``connect``)."""

    owner_path = "owner"
    rules = {VIEW: DEPARTMENT, CHANGE: OWNER_OR_ADMIN, APPROVE: DEPARTMENT_ADMIN, ADMIN: PLATFORM, CONNECT: OWNER}

    def active(self):
        return self.filter(state__in=ACTIVE_STATES)

    def waiting(self):
        return self.filter(state=JobState.QUEUED)


class Job(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="jobs")
    # The submitter's team when it was submitted (null: none, or a department without teams): its GPUs count
    # against that team's quota split, whatever team the submitter moves to later.
    team = models.ForeignKey("portal.Team", null=True, blank=True, on_delete=models.PROTECT, related_name="jobs")
    name = models.CharField(max_length=63)
    image = models.CharField(max_length=512)
    command = models.JSONField()
    env = models.JSONField(default=dict, blank=True)
    # The department secrets it uses: [{"secret", "key", "env"} | {"secret", "path"}] (names and keys only;
    # the values stay in workloads.DepartmentSecret, checked at submission by workloads.services.secrets).
    secrets = models.JSONField(default=list, blank=True)
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="jobs")
    # The column keeps its first name, ``gpus`` (the API's word too); the code says which GPUs it means.
    # ``pods`` x ``gpus_per_pod`` is the job's GPU gang: the pods of its roles with GPUs (they share the flavor
    # and the GPUs per pod), so ``total_gpus`` is one number however many roles. A CPU-only job has
    # ``gpus_per_pod`` 0 and ``pods`` all of its pods. The roles themselves are ``JobRole`` rows.
    gpus_per_pod = models.PositiveIntegerField(db_column="gpus", validators=[MinValueValidator(0)],
                                               help_text="GPUs per pod")
    pods = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    # How many ``JobRole`` rows it has: a job of one role is described by its own columns as well (the role
    # mirrors them), so the cycle reads roles only for the jobs of more than one.
    role_count = models.PositiveSmallIntegerField(default=1)
    # The pods of its roles without GPUs beside a GPU gang (0 for a job of one role and for a CPU-only job,
    # whose ``pods`` are all of its pods): ``all_pods`` is every pod an attempt makes.
    cpu_pods = models.PositiveIntegerField(default=0)
    cpu_millicores = models.PositiveIntegerField(default=4000)
    memory_mib = models.PositiveIntegerField(default=16384)
    # A fraction of one GPU per GPU pod (docs/fractions.md; ``gpus_per_pod`` is then 1), on a flavor that shares
    # its GPUs: GPU memory in MiB and optionally a compute share in per cent (HAMi), or replicas (time-slicing /
    # MPS). All 0: whole GPUs. ``share_milli`` is the fraction of a GPU it is (``engine.fractions.fraction``),
    # kept with the row so that sums over many jobs (quotas, the ledger, the cluster page) need no flavor.
    gpu_memory_mib = models.PositiveIntegerField(default=0)
    gpu_cores = models.PositiveSmallIntegerField(default=0)
    gpu_replicas = models.PositiveSmallIntegerField(default=0)
    share_milli = models.PositiveIntegerField(default=0)
    tier = models.CharField(max_length=10, choices=Tier.choices, default=Tier.ELASTIC)
    urgency = models.CharField(max_length=10, choices=Urgency.choices, default=Urgency.NORMAL)
    task_type = models.CharField(max_length=12, choices=TaskType.choices, default=TaskType.TRAIN)
    user_tier = models.CharField(max_length=20, default="standard")
    deadline = models.DateTimeField(null=True, blank=True)
    max_runtime_s = models.PositiveIntegerField(default=3600)
    bid = models.PositiveIntegerField(default=0, help_text="max milli-credits per GPU-hour on borrowed GPUs")
    termination_grace_s = models.PositiveIntegerField(default=30)
    # How often the job saves a checkpoint it resumes from; the scheduler prefers to preempt jobs that just saved
    # one and lets a reserved head evict them near a checkpoint. Null: unknown (all work since the start is at
    # risk, so the job is evicted only for realtime work or a reclaim).
    checkpoint_interval_s = models.PositiveIntegerField(null=True, blank=True)
    pdb_min_available = models.PositiveIntegerField(null=True, blank=True)
    # A resizable job's size range ("elastic jobs" in the sense of a changing size; not the elastic tier): it may
    # run on ``min_pods`` to ``pods`` pods of its GPU gang (null: always ``pods``), changing size at its checkpoints
    # (engine/resize.py). ``global_batch_size``: the batch its workers share, so that each is told its per-worker
    # batch and gradient-accumulation steps at every size (null: not declared).
    min_pods = models.PositiveIntegerField(null=True, blank=True)
    global_batch_size = models.PositiveIntegerField(null=True, blank=True)
    # A resizable job's size in the current attempt (null: ``pods``; set when it is admitted, changed by each
    # resize applied, cleared with the attempt), and the resize decided for it that waits for its checkpoint
    # or for its pods to be added or removed (null: none; ``scheduling.services.resizes`` says what it holds).
    current_pods = models.PositiveIntegerField(null=True, blank=True)
    resize = models.JSONField(null=True, blank=True)
    # What the job runs with besides its image (workloads app, checked at submission): data sources mounted by
    # name ([{"source", "path", "read_only"}]), its checkpoint directory ({"source", "source_id", "cluster",
    # "path"}, {} for none) and the size of its memory-backed /dev/shm (MiB, counted in the pod's memory).
    mounts = models.JSONField(default=list, blank=True)
    checkpoint = models.JSONField(default=dict, blank=True)
    shm_mb = models.PositiveIntegerField(default=0)
    # Retries (engine/retries.py): how many times a failed attempt may be retried, and the exit codes
    # that ask for it; platform failures are retried without asking. ``retries``: made so far; ``not_before``:
    # the queued retry's back-off ends then (the engine keeps it out of admission until that instant).
    max_retries = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(10)])
    retry_on_exit_codes = models.JSONField(default=list, blank=True)
    retries = models.PositiveIntegerField(default=0)
    not_before = models.DateTimeField(null=True, blank=True)
    # Expedited requeue (engine/retries.py, ``expedite``): since when the queued job waits first in its tier after
    # its pods were lost to a node failure (null: in its normal place), and how many expedited requeues it has
    # had (the policy caps them per job).
    expedited_at = models.DateTimeField(null=True, blank=True)
    expedited_requeues = models.PositiveIntegerField(default=0)
    # Preemptibility apart from the tier (quotas' ``PreemptionLimit``, checked at submission): the job's own
    # choice (null: its tier's), and the surcharge on the base price that a non-preemptible job pays (percent).
    preemptible = models.BooleanField(null=True, blank=True)
    price_surcharge_pct = models.PositiveIntegerField(default=0)
    # The notice before preemption it asked for (0: none, evicted at once), within its department's limit for
    # its tier; its pods see the notice in a file (docs/scheduling.md, "Notice before preemption").
    notice_s = models.PositiveIntegerField(default=0)
    # Sweeps: the array the job is a task of and its index there (``scheduling.models.sweeps``), and since when
    # it is held (kept in the queue with its submission time, never admitted; null: not held).
    array = models.ForeignKey("scheduling.JobArray", null=True, blank=True, on_delete=models.PROTECT,
                              related_name="tasks")
    array_index = models.PositiveIntegerField(null=True, blank=True)
    held_at = models.DateTimeField(null=True, blank=True)

    # Sessions and services (docs/sessions.md): the container port the route reaches, the path that answers
    # 200 once the app is ready, the lab's session image it was started from (blank: the user's own image),
    # whether its pod is ready (read from the pod's Ready condition), and when its owner was warned that the
    # lifetime ends.
    kind = models.CharField(max_length=10, choices=JobKind.choices, default=JobKind.BATCH)
    port = models.PositiveIntegerField(null=True, blank=True,
                                       validators=[MinValueValidator(1), MaxValueValidator(65535)])
    readiness_path = models.CharField(max_length=200, blank=True)
    session_image = models.CharField(max_length=63, blank=True)
    ready = models.BooleanField(default=False)
    end_warned_at = models.DateTimeField(null=True, blank=True)

    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.QUEUED, db_index=True)
    reason_code = models.CharField(max_length=40, blank=True)
    reason_message = models.CharField(max_length=300, blank=True)
    reason_detail = models.JSONField(default=dict, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)
    # When an admission cycle last wrote the waiting job's reason (whichever cycle worker did): a message whose
    # figures alone moved is rewritten only once this is old enough (``scheduling.services.cycle``).
    explained_at = models.DateTimeField(null=True, blank=True)
    # The job's place in the engine's pending order as the last cycle saw it (``scheduling.services.
    # queue_ranks``): only its order among the queued jobs means anything; None until a cycle looked at it.
    queue_rank = models.BigIntegerField(null=True, blank=True)
    attempt = models.PositiveIntegerField(default=1)
    # The cluster of the current attempt: set in the transaction that admits it, before any pod exists, and
    # cleared when the attempt ends (the next attempt may go elsewhere).
    cluster = models.ForeignKey(Cluster, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs")
    # Cluster labels the job requires (every pair must match) and prefers (more matches rank a cluster higher).
    cluster_selector = models.JSONField(default=dict, blank=True)
    cluster_preference = models.JSONField(default=dict, blank=True)
    # A topology level (a node label key of its cluster's levels) its pods must (required) or should sit within
    # one domain of; blank: none named (a gang then prefers the most compact placement).
    topology_level = models.CharField(max_length=317, blank=True)
    topology_required = models.BooleanField(default=False)
    placement = models.JSONField(default=list, blank=True)
    # A fractional job's shared GPU per GPU pod of ``placement``: the device index the engine chose on its node
    # (``engine.fractions``: the portal's numbering of the node's shared GPUs); empty for whole GPUs.
    gpu_devices = models.JSONField(default=list, blank=True)
    borrowed = models.BooleanField(default=False)
    price = models.PositiveIntegerField(null=True, blank=True, help_text="clearing price when borrowed")
    exit_code = models.IntegerField(null=True, blank=True)
    preemption_count = models.PositiveIntegerField(default=0)

    submitted_at = models.DateTimeField(default=timezone.now, db_index=True)  # original, kept across attempts
    queued_at = models.DateTimeField(null=True, blank=True)
    admitted_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    last_preempted_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField(auto_now=True)

    idempotency_key = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001 - NULL = no key
    request_hash = models.CharField(max_length=64, blank=True)

    objects = JobQuerySet.as_manager()

    class Meta:
        ordering = ["-submitted_at", "-id"]
        constraints = [
            models.UniqueConstraint(
                fields=["owner", "idempotency_key"],
                condition=Q(idempotency_key__isnull=False),
                name="job_unique_owner_idempotency_key",
            ),
            models.CheckConstraint(condition=Q(gpus_per_pod__gte=0) & Q(pods__gte=1), name="job_pods_positive"),
            models.CheckConstraint(condition=Q(state__in=JobState.values), name="job_state_valid"),
            models.UniqueConstraint(fields=["array", "array_index"], condition=Q(array__isnull=False),
                                    name="job_unique_array_index"),
            models.CheckConstraint(condition=Q(array__isnull=True, array_index__isnull=True)
                                   | Q(array__isnull=False, array_index__isnull=False), name="job_array_index_set"),
        ]
        indexes = [
            models.Index(fields=["department", "state"]),
            models.Index(fields=["state", "submitted_at", "id"]),
        ]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.name})"

    @property
    def size(self) -> int:
        """Its GPU gang's pods now: a resizable job's current size, ``pods`` for every other."""
        return self.pods if self.current_pods is None else self.current_pods

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_pod * self.size

    @property
    def is_fractional(self) -> bool:
        return self.share_milli > 0

    @property
    def fraction_text(self) -> str:
        """"0.25 GPU (20 GiB, 30% compute)" for a fractional job, "" otherwise (docs/fractions.md)."""
        if not self.share_milli:
            return ""
        if self.gpu_replicas:
            what = f"{self.gpu_replicas} replica{'s' if self.gpu_replicas != 1 else ''}"
        else:
            what = f"{self.gpu_memory_mib / 1024:g} GiB" + (f", {self.gpu_cores}% compute" if self.gpu_cores else "")
        return f"{self.share_milli / 1000:g} GPU ({what})"

    @property
    def gpu_share(self) -> float:
        """The GPUs its quota, price and ledger count: whole GPUs, or its pods' fractions of one."""
        if self.share_milli:
            return self.size * self.share_milli / 1000
        return float(self.gpus_per_pod * self.size)

    def cpu_work(self) -> tuple[tuple[int, int, int], ...]:
        """Per CPU pool, (flavor id, millicores, MiB) of the roles without GPUs, all pods together (what its CPU
        quotas and prices count); empty for a job of GPUs only. A job of several roles reads its roles once
        (the cycle's snapshot sets them for all such jobs in one query)."""
        cached = getattr(self, "_cpu_work", None)
        if cached is not None:
            return cached
        if self.role_count < 2:
            work = ((self.flavor_id, self.pods * self.cpu_millicores, self.pods * self.memory_mib),) \
                if self.gpus_per_pod == 0 else ()
        else:
            sums: dict[int, tuple[int, int]] = {}
            for flavor_id, pods, cpu, mem in self.roles.filter(gpus_per_pod=0).values_list(
                    "flavor_id", "pods", "cpu_millicores", "memory_mib"):
                c, m = sums.get(flavor_id, (0, 0))
                sums[flavor_id] = (c + pods * cpu, m + pods * mem)
            work = tuple((f, c, m) for f, (c, m) in sorted(sums.items()))
        self._cpu_work = work
        return work

    @property
    def all_pods(self) -> int:
        """Every pod of an attempt, all roles together (``size`` is the GPU gang's now)."""
        return self.size + self.cpu_pods

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES

    @property
    def has_route(self) -> bool:
        """A session or a service: reached through its route (/s/<id>/), not only by its logs."""
        return self.kind in (JobKind.SESSION, JobKind.SERVICE)


class FailurePolicy(models.TextChoices):
    """What one failed pod of a role does: end the attempt (ranks of a collective cannot go on without it),
    or be replaced alone (data workers, whose loss the others survive)."""

    RESTART_ATTEMPT = "restart-attempt", "Restart the attempt"
    RESTART_POD = "restart-pod", "Restart the pod alone"


class JobRole(models.Model):
    """A group of identical pods inside a job (Kueue's podSet, JobSet's replicated job, Volcano's task).

    Blank ``image`` and null ``command`` mean the job's. A role with ``gpus_per_pod`` 0 runs on a CPU pool
    (``flavor``; null for a role with GPUs, which runs on the job's flavor). ``index`` orders the roles: the
    job's pods are numbered role by role in that order (``Job.placement`` too)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="roles")
    index = models.PositiveSmallIntegerField()
    name = models.CharField(max_length=20)
    pods = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    image = models.CharField(max_length=512, blank=True)
    command = models.JSONField(null=True, blank=True)
    gpus_per_pod = models.PositiveIntegerField(default=0)
    cpu_millicores = models.PositiveIntegerField(default=4000)
    memory_mib = models.PositiveIntegerField(default=16384)
    shm_mb = models.PositiveIntegerField(default=0)
    flavor = models.ForeignKey(Flavor, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    failure_policy = models.CharField(max_length=16, choices=FailurePolicy.choices,
                                      default=FailurePolicy.RESTART_ATTEMPT)

    class Meta:
        ordering = ["job_id", "index"]
        constraints = [
            models.UniqueConstraint(fields=["job", "index"], name="jobrole_unique_index"),
            models.UniqueConstraint(fields=["job", "name"], name="jobrole_unique_name"),
            models.CheckConstraint(condition=Q(pods__gte=1), name="jobrole_pods_positive"),
            models.CheckConstraint(condition=Q(failure_policy__in=FailurePolicy.values),
                                   name="jobrole_failure_policy_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.job_id}/{self.name}: {self.pods} x {self.gpus_per_pod} GPUs"


# ``Job.total_gpus`` in SQL, for sums and reads over many jobs (``Sum(TOTAL_GPUS)``, ``values_list(..., TOTAL_GPUS)``).
TOTAL_GPUS = F("gpus_per_pod") * F("pods")
# ``Job.gpu_share`` in SQL (what quotas, fair share and prices count: a fractional job's share of a GPU per pod).
# A resizable job counts its size now (``current_pods``), every other job its ``pods``.
GPU_SHARE = Case(When(share_milli__gt=0, then=F("pods") * F("share_milli") / Value(1000.0)),
                 default=F("gpus_per_pod") * Coalesce(F("current_pods"), F("pods")) * Value(1.0),
                 output_field=FloatField())

class JobRelatedQuerySet(TenantQuerySet):
    """Rows about a job (its timeline, its preemptions) are read like the job."""

    department_path = "job__department"


class JobEvent(AppendOnlyModel):
    """The append-only timeline of a job: every transition and every decision, with its reason."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="events")
    at = models.DateTimeField(default=timezone.now)
    attempt = models.PositiveIntegerField(default=1)
    kind = models.CharField(max_length=40)  # transition | reason | preemption | eviction | pod | note
    from_state = models.CharField(max_length=20, blank=True)
    to_state = models.CharField(max_length=20, blank=True)
    reason_code = models.CharField(max_length=40, blank=True)
    message = models.CharField(max_length=500, blank=True)
    data = models.JSONField(default=dict, blank=True)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)

    objects = JobRelatedQuerySet.as_manager()

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["job", "at"])]

    def __str__(self) -> str:
        return f"{self.job_id} {self.kind} {self.to_state or self.reason_code}"

    @property
    def role(self) -> str:
        """The role of a job of several roles this event concerns: its pod's (``data.role``), or the role the
        engine's reason names (``data.detail.role``); "" for an event about the whole job."""
        data = self.data if isinstance(self.data, dict) else {}
        detail = data.get("detail") if isinstance(data.get("detail"), dict) else {}
        return str(data.get("role") or detail.get("role") or "")
