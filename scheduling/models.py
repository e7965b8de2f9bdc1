"""Jobs and their lifecycle, the clusters they run on, the scheduling policy and the preemption audit trail.

State changes of a Job are compare-and-set updates (``scheduling.services.jobs.transition``), never a blind
``save()``: a transition names the states it may leave, and loses cleanly when another process got there first.
"""

from __future__ import annotations

import re

from django.conf import settings
from django.core.validators import MaxValueValidator, MinValueValidator, RegexValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

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
from portal.tenancy import scope as tenant_scope
from quotas.models import Flavor
from scheduling.core import tiers as tier_table
from scheduling.core.types import TIERS

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
    state = models.CharField(max_length=10, choices=ClusterState.choices, default=ClusterState.ACTIVE)
    # Lower is cheaper: among clusters that fit a job equally, the engine prefers the lowest rank.
    cost_rank = models.IntegerField(default=0)
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


class JobQuerySet(TenantQuerySet):
    """Members see their department's jobs; a job's owner and its department's admins cancel it and read its
    logs (``change``); its department's admins approve it."""

    owner_path = "owner"
    rules = {VIEW: DEPARTMENT, CHANGE: OWNER_OR_ADMIN, APPROVE: DEPARTMENT_ADMIN, ADMIN: PLATFORM}

    def active(self):
        return self.filter(state__in=ACTIVE_STATES)

    def waiting(self):
        return self.filter(state=JobState.QUEUED)


class Job(models.Model):
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="jobs")
    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="jobs")
    name = models.CharField(max_length=63)
    image = models.CharField(max_length=512)
    command = models.JSONField()
    env = models.JSONField(default=dict, blank=True)
    # The department secrets it uses: [{"secret", "key", "env"} | {"secret", "path"}] (names and keys only;
    # the values stay in workloads.DepartmentSecret, checked at submission by workloads.services.secrets).
    secrets = models.JSONField(default=list, blank=True)
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="jobs")
    # The column keeps its first name, ``gpus`` (the API's word too); the code says which GPUs it means.
    gpus_per_pod = models.PositiveIntegerField(db_column="gpus", validators=[MinValueValidator(1)],
                                               help_text="GPUs per pod")
    pods = models.PositiveIntegerField(default=1, validators=[MinValueValidator(1)])
    cpu_millicores = models.PositiveIntegerField(default=4000)
    memory_mib = models.PositiveIntegerField(default=16384)
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
    # What the job runs with besides its image (workloads app, checked at submission): data sources mounted by
    # name ([{"source", "path", "read_only"}]), its checkpoint directory ({"source", "source_id", "cluster",
    # "path"}, {} for none) and the size of its memory-backed /dev/shm (MiB, counted in the pod's memory).
    mounts = models.JSONField(default=list, blank=True)
    checkpoint = models.JSONField(default=dict, blank=True)
    shm_mb = models.PositiveIntegerField(default=0)
    # Retries (scheduling/core/retries.py): how many times a failed attempt may be retried, and the exit codes
    # that ask for it; platform failures are retried without asking. ``retries``: made so far; ``not_before``:
    # the queued retry's back-off ends then (the engine keeps it out of admission until that instant).
    max_retries = models.PositiveSmallIntegerField(default=0, validators=[MaxValueValidator(10)])
    retry_on_exit_codes = models.JSONField(default=list, blank=True)
    retries = models.PositiveIntegerField(default=0)
    not_before = models.DateTimeField(null=True, blank=True)

    state = models.CharField(max_length=20, choices=JobState.choices, default=JobState.QUEUED, db_index=True)
    reason_code = models.CharField(max_length=40, blank=True)
    reason_message = models.CharField(max_length=300, blank=True)
    reason_detail = models.JSONField(default=dict, blank=True)
    estimated_start = models.DateTimeField(null=True, blank=True)
    attempt = models.PositiveIntegerField(default=1)
    # The cluster of the current attempt: set in the transaction that admits it, before any pod exists, and
    # cleared when the attempt ends (the next attempt may go elsewhere).
    cluster = models.ForeignKey(Cluster, null=True, blank=True, on_delete=models.PROTECT, related_name="jobs")
    # Cluster labels the job requires (every pair must match) and prefers (more matches rank a cluster higher).
    cluster_selector = models.JSONField(default=dict, blank=True)
    cluster_preference = models.JSONField(default=dict, blank=True)
    placement = models.JSONField(default=list, blank=True)
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
            models.CheckConstraint(condition=Q(gpus_per_pod__gte=1) & Q(pods__gte=1), name="job_gpus_positive"),
            models.CheckConstraint(condition=Q(state__in=JobState.values), name="job_state_valid"),
        ]
        indexes = [
            models.Index(fields=["department", "state"]),
            models.Index(fields=["state", "submitted_at", "id"]),
        ]

    def __str__(self) -> str:
        return f"job {self.pk} ({self.name})"

    @property
    def total_gpus(self) -> int:
        return self.gpus_per_pod * self.pods

    @property
    def is_final(self) -> bool:
        return self.state in FINAL_STATES


# ``Job.total_gpus`` in SQL, for sums and reads over many jobs (``Sum(TOTAL_GPUS)``, ``values_list(..., TOTAL_GPUS)``).
TOTAL_GPUS = F("gpus_per_pod") * F("pods")

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


class AttemptLogQuerySet(TenantQuerySet):
    """A kept log is read like the job's live log: its owner and its department's admins (``change``)."""

    department_path = "job__department"
    owner_path = "job__owner"
    rules = {VIEW: OWNER_OR_ADMIN, CHANGE: OWNER_OR_ADMIN, APPROVE: DEPARTMENT_ADMIN, ADMIN: PLATFORM}


class AttemptLog(models.Model):
    """The tail of one pod's log of one attempt, kept when the attempt ends (its pods, and the cluster's copy of the
    log, go soon after). At most LOG_KEEP_KB of the end of the log; deleted LOG_RETENTION_DAYS after."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="logs")
    attempt = models.PositiveIntegerField()
    pod = models.PositiveIntegerField(default=0)  # the pod's index in its gang
    text = models.TextField(blank=True)
    truncated = models.BooleanField(default=False)  # the log was longer than what was kept
    kept_at = models.DateTimeField(default=timezone.now, db_index=True)

    objects = AttemptLogQuerySet.as_manager()

    class Meta:
        ordering = ["job", "attempt", "pod"]
        constraints = [models.UniqueConstraint(fields=["job", "attempt", "pod"],
                                               name="attemptlog_unique_job_attempt_pod")]

    def __str__(self) -> str:
        return f"log of job {self.job_id} attempt {self.attempt} pod {self.pod}"


# Upper bounds (seconds) of the wait-time histogram's bins; the last bin has no upper bound.
WAIT_BINS_S = (60, 300, 900, 3600, 4 * 3600)
WAIT_BIN_LABELS = ("< 1 min", "1-5 min", "5-15 min", "15-60 min", "1-4 h", "> 4 h")


class ClusterSample(models.Model):
    """One flavor at one instant of the stored time series (written every STATS_INTERVAL_S by a periodic
    task): charts read these rows instead of recomputing history from every job. Whole-cluster figures,
    no department's data."""

    at = models.DateTimeField(db_index=True)
    flavor = models.ForeignKey("quotas.Flavor", on_delete=models.CASCADE, related_name="+")
    total_gpus = models.PositiveIntegerField(default=0)
    busy_gpus = models.PositiveIntegerField(default=0)  # held by admitted and running portal jobs
    free_gpus = models.PositiveIntegerField(default=0)  # on schedulable nodes, used by nobody
    queued = models.JSONField(default=dict)  # tier -> queued jobs
    # tier -> jobs started since the previous sample, counted per bin of WAIT_BINS_S (queued -> started)
    waits = models.JSONField(default=dict)
    preemptions = models.PositiveIntegerField(default=0)  # victims decided since the previous sample

    class Meta:
        ordering = ["at", "flavor"]
        constraints = [models.UniqueConstraint(fields=["at", "flavor"], name="clustersample_unique_at_flavor")]

    def __str__(self) -> str:
        return f"{self.flavor_id} at {self.at:%Y-%m-%d %H:%M}"


class DepartmentSampleQuerySet(TenantQuerySet):
    """A department's samples are read by its members (and platform admins)."""

    department_path = "department"


class DepartmentSample(models.Model):
    """One department's use of one flavor at one instant of the stored time series."""

    at = models.DateTimeField(db_index=True)
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="+")
    flavor = models.ForeignKey("quotas.Flavor", on_delete=models.CASCADE, related_name="+")
    nominal = models.PositiveIntegerField(default=0)
    busy_gpus = models.PositiveIntegerField(default=0)
    borrowed_gpus = models.PositiveIntegerField(default=0)  # beyond its nominal quota
    lent_gpus = models.PositiveIntegerField(default=0)  # of its idle nominal, in use by other departments
    queued_jobs = models.PositiveIntegerField(default=0)

    objects = DepartmentSampleQuerySet.as_manager()

    class Meta:
        ordering = ["at", "department", "flavor"]
        constraints = [models.UniqueConstraint(fields=["at", "department", "flavor"],
                                               name="departmentsample_unique_at_department_flavor")]

    def __str__(self) -> str:
        return f"{self.department_id}/{self.flavor_id} at {self.at:%Y-%m-%d %H:%M}"


class PolicyVersion(models.Model):
    """Every version of the scheduling policy is kept; the highest version is in force."""

    version = models.PositiveIntegerField(unique=True)
    data = models.JSONField()
    author = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL)
    created_at = models.DateTimeField(default=timezone.now)
    comment = models.CharField(max_length=300, blank=True)

    class Meta:
        ordering = ["-version"]

    def __str__(self) -> str:
        return f"policy v{self.version}"


class Preemption(models.Model):
    """The durable audit record of one preemption decision and what became of it."""

    preemptor = models.ForeignKey(Job, null=True, on_delete=models.SET_NULL, related_name="preemptions_caused")
    reason = models.CharField(max_length=20)  # priority | reclaim
    message = models.CharField(max_length=500, blank=True)
    policy_version = models.PositiveIntegerField(default=0)
    decided_at = models.DateTimeField(default=timezone.now, db_index=True)

    class Meta:
        ordering = ["-decided_at", "-id"]

    def __str__(self) -> str:
        return f"preemption {self.pk} ({self.reason}) for job {self.preemptor_id}"


class PreemptionVictim(models.Model):
    class Status(models.TextChoices):
        DECIDED = "decided"
        REQUESTED = "requested"
        BLOCKED = "blocked"  # 429: a PodDisruptionBudget forbade the eviction
        EVICTED = "evicted"
        REQUEUED = "requeued"
        RESTARTED = "restarted"

    preemption = models.ForeignKey(Preemption, on_delete=models.CASCADE, related_name="victims")
    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="preempted_by")
    attempt = models.PositiveIntegerField()
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.DECIDED)
    gpu_seconds_lost = models.PositiveIntegerField(default=0)
    eviction_requested_at = models.DateTimeField(null=True, blank=True)
    evicted_at = models.DateTimeField(null=True, blank=True)
    requeued_at = models.DateTimeField(null=True, blank=True)
    restarted_at = models.DateTimeField(null=True, blank=True)

    objects = JobRelatedQuerySet.as_manager()

    class Meta:
        ordering = ["preemption_id", "job_id"]
        constraints = [
            models.UniqueConstraint(fields=["preemption", "job"], name="victim_unique_preemption_job"),
        ]

    def __str__(self) -> str:
        return f"victim job {self.job_id} a{self.attempt}: {self.status}"


# A victim whose eviction is decided, requested or accepted and whose pods may still hold their GPUs.
IN_FLIGHT = (PreemptionVictim.Status.DECIDED, PreemptionVictim.Status.REQUESTED, PreemptionVictim.Status.EVICTED)


class ApprovalQuerySet(TenantQuerySet):
    """Decisions on jobs are read like the jobs: by their department's members."""

    department_path = "job__department"


class Approval(models.Model):
    """A department admin's decision on a job that waited in pending_approval.

    Its table keeps the name it had when it lived in quotas (``quotas_approval``): the model moved with its
    use case (``scheduling.services.job_approvals``), the rows did not."""

    DECISIONS = (("approved", "Approved"), ("rejected", "Rejected"))

    job = models.OneToOneField(Job, on_delete=models.CASCADE, related_name="approval")
    decision = models.CharField(max_length=10, choices=DECISIONS)
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL, related_name="+")
    comment = models.TextField(blank=True)
    reason = models.CharField(max_length=300, blank=True, help_text="why approval was required")
    decided_at = models.DateTimeField(default=timezone.now)

    objects = ApprovalQuerySet.as_manager()

    class Meta:
        db_table = "quotas_approval"
        ordering = ["-decided_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(decision__in=["approved", "rejected"]), name="approval_valid"),
        ]

    def __str__(self) -> str:
        return f"job {self.job_id} {self.decision}"


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

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["cluster", "namespace", "name"], name="simpod_unique_name"),
        ]

    def __str__(self) -> str:
        return f"{self.namespace}/{self.name} ({self.phase})"


class NamespaceQuotaRefusal(models.Model):
    """A namespace ResourceQuota refused the pods of an admitted attempt (403 "exceeded quota").

    One row per refused attempt. It carries that start's one retry chain (``step`` of the back-off and when the
    next try is due, so a reconciler run or a duplicate task never starts a second chain), and it tells the
    engine that the department's namespace on that cluster does not take a request of this size: such jobs are
    kept off that cluster (reason ``namespace_quota``) until the namespace's quotas change (``quota_version``,
    their ``name@resourceVersion`` as read after the refusal, compared by the sync) or ``expires_at`` passes.
    ``cleared_at`` is set when either happened (or the quota let the attempt's pods in after all)."""

    job = models.ForeignKey(Job, on_delete=models.CASCADE, related_name="quota_refusals")
    attempt = models.PositiveIntegerField()
    cluster = models.ForeignKey(Cluster, on_delete=models.CASCADE, related_name="+")
    namespace = models.CharField(max_length=253)
    total_gpus = models.PositiveIntegerField(db_column="gpus", help_text="the GPUs of the refused request (all its pods)")
    request = models.JSONField(default=dict, blank=True, help_text="the refused pods' requests")
    quota_version = models.CharField(max_length=500, blank=True)
    quotas = models.JSONField(default=dict, blank=True, help_text="the namespace's quotas (hard, used) as read")
    message = models.TextField(blank=True)
    refused_at = models.DateTimeField()
    step = models.PositiveIntegerField(default=1)
    next_retry_at = models.DateTimeField()
    expires_at = models.DateTimeField()
    cleared_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["job", "attempt"], name="one_quota_refusal_per_attempt")]
        indexes = [models.Index(fields=["cluster", "cleared_at"], name="quota_refusal_in_force")]

    def __str__(self) -> str:
        return f"job {self.job_id} attempt {self.attempt}: {self.namespace} quota"


class TemplateScope(models.TextChoices):
    PERSONAL = "personal", "Personal"
    DEPARTMENT = "department", "Department"


# A template's name: what `gpup submit --template NAME` and a lab file spell, so no spaces.
TEMPLATE_NAME = r"[A-Za-z0-9][A-Za-z0-9_.-]{0,62}"


class JobTemplateQuerySet(TenantQuerySet):
    """A personal template is its owner's alone (as an API token: not even a platform admin reads it); a
    department template is read by the department's members and changed (edited, deleted) by its admins and
    by platform admins. Creating one is the same rule: only a department admin publishes to the department.

    Two rules in one table, so ``restrict`` and ``permits`` are the union of the two scopes, each decided by
    ``portal.tenancy.scope`` like every other rule."""

    owner_path = "owner"
    rules = {VIEW: DEPARTMENT, CHANGE: DEPARTMENT_ADMIN, ADMIN: PLATFORM}

    def _department_rule(self, action) -> str:
        return self.rules.get(str(action), PLATFORM)

    def restrict(self, user, action=VIEW):
        personal = tenant_scope(user, OWNER)
        shared = tenant_scope(user, self._department_rule(action))
        q = Q(pk__in=[])
        if personal.owner_id is not None:
            q |= Q(scope=TemplateScope.PERSONAL, owner_id=personal.owner_id)
        if shared.everything:
            q |= Q(scope=TemplateScope.DEPARTMENT)
        elif shared.department_id is not None:
            q |= Q(scope=TemplateScope.DEPARTMENT, department_id=shared.department_id)
        return self.filter(q)

    def permits(self, user, obj, action) -> bool:
        if obj.scope == TemplateScope.PERSONAL:
            owner_id = tenant_scope(user, OWNER).owner_id
            return owner_id is not None and owner_id == obj.owner_id
        shared = tenant_scope(user, self._department_rule(action))
        return shared.everything or (shared.department_id is not None and shared.department_id == obj.department_id)


class JobTemplate(models.Model):
    """A saved job submission with a name: personal (its owner's) or the department's.

    ``spec`` holds exactly the fields of a job submission (POST /api/v1/jobs), validated by the same serializer
    when saved and again, merged with the submission's own fields, when a job is submitted from it."""

    name = models.CharField(max_length=63, validators=[RegexValidator(f"^{TEMPLATE_NAME}$")])
    scope = models.CharField(max_length=10, choices=TemplateScope.choices, default=TemplateScope.PERSONAL)
    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="job_templates")
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                              related_name="job_templates", help_text="personal templates only")
    description = models.CharField(max_length=500, blank=True)
    spec = models.JSONField(default=dict)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(auto_now=True)

    objects = JobTemplateQuerySet.as_manager()

    class Meta:
        ordering = ["scope", "name", "id"]
        constraints = [
            # NULL owners never collide in a unique index, so each scope gets its own constraint.
            models.UniqueConstraint(fields=["department", "owner", "name"], condition=Q(scope="personal"),
                                    name="jobtemplate_unique_personal_name"),
            models.UniqueConstraint(fields=["department", "name"], condition=Q(scope="department"),
                                    name="jobtemplate_unique_department_name"),
            models.CheckConstraint(
                condition=(Q(scope="personal") & Q(owner__isnull=False)) | (Q(scope="department") & Q(owner__isnull=True)),
                name="jobtemplate_owner_matches_scope"),
        ]

    def __str__(self) -> str:
        return f"template {self.name} ({self.scope})"
