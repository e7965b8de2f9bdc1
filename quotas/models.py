"""GPU flavors and department quotas (Kueue's vocabulary: nominal quota, borrowing and lending limits)."""

from __future__ import annotations

from django.conf import settings
from django.core.validators import MinValueValidator, RegexValidator
from django.db import models
from django.db.models import F, Q
from django.utils import timezone

from engine.types import TIERS as TIER_NAMES
from portal.models import AppendOnlyModel, Department
from portal.tenancy import (
    ADMIN,
    CHANGE,
    DEPARTMENT,
    DEPARTMENT_ADMIN,
    OWNER_OR_ADMIN,
    PLATFORM,
    VIEW,
    TenantQuerySet,
)

RESOURCE_NAME = RegexValidator(
    r"^([a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*/)?[a-z0-9A-Z]([-a-z0-9A-Z_.]*[a-z0-9A-Z])?$",
    "A Kubernetes extended resource name, e.g. nvidia.com/gpu or nvidia.com/mig-3g.40gb.",
)
FLAVOR_NAME = RegexValidator(r"^[a-z0-9]([a-z0-9.-]{0,38}[a-z0-9])?$", "Lower-case letters, digits, . and -.")


class FlavorKind(models.TextChoices):
    """What a flavor's nodes offer: GPUs of one kind, or CPU and memory only (a CPU pool, for CPU-only work)."""

    GPU = "gpu", "GPU"
    CPU = "cpu", "CPU pool"


class GpuSharing(models.TextChoices):
    """How a flavor's GPUs are shared between pods (``engine.fractions``): not at all (blank), HAMi's
    memory-isolated sharing, or the NVIDIA device plugin's time-slicing / MPS replicas."""

    NONE = "", "not shared"
    HAMI = "hami", "HAMi (GPU memory and compute share)"
    REPLICAS = "replicas", "time-slicing / MPS replicas"


class QuotaResource(models.TextChoices):
    """What a quota row counts: GPUs of a GPU flavor, or cores / GiB of memory of a CPU pool."""

    GPUS = "gpus", "GPUs"
    CPU = "cpu", "CPU cores"
    MEMORY = "memory", "memory (GiB)"


class Flavor(models.Model):
    """A schedulable GPU kind (the Kubernetes resource it is requested as plus the node labels it runs on), or a
    CPU pool (``kind`` cpu: nodes without GPUs, for the roles and jobs that use none).

    MIG profiles are flavors of their own (resource ``nvidia.com/mig-3g.40gb``)."""

    name = models.CharField(max_length=40, unique=True, validators=[FLAVOR_NAME])
    kind = models.CharField(max_length=3, choices=FlavorKind.choices, default=FlavorKind.GPU)
    resource_name = models.CharField(max_length=120, validators=[RESOURCE_NAME], default="nvidia.com/gpu")
    node_labels = models.JSONField(default=dict, blank=True, help_text='e.g. {"gpu-type": "a100"}')
    gpu_memory_gib = models.PositiveIntegerField(default=0)
    description = models.CharField(max_length=200, blank=True)
    # Whether its GPUs may be shared between pods, and how the cluster enforces it (docs/fractions.md): blank,
    # not shared; ``hami``, HAMi's memory-isolated sharing (a pod asks ``nvidia.com/gpu: 1`` with
    # ``nvidia.com/gpumem`` MiB and optionally ``nvidia.com/gpucores`` %; needs ``gpu_memory_gib``);
    # ``replicas``, the NVIDIA device plugin's time-slicing or MPS replicas: each GPU is advertised as
    # ``replicas_per_gpu`` units of ``shared_resource_name`` and every GPU of the flavor's nodes is shared.
    sharing = models.CharField(max_length=8, choices=GpuSharing.choices, blank=True, default="")
    shared_resource_name = models.CharField(max_length=120, blank=True, default="", validators=[RESOURCE_NAME])
    replicas_per_gpu = models.PositiveSmallIntegerField(default=0)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    @property
    def is_mig(self) -> bool:
        return "/mig-" in self.resource_name

    @property
    def is_cpu(self) -> bool:
        return self.kind == FlavorKind.CPU

    @property
    def shareable(self) -> bool:
        return self.kind == FlavorKind.GPU and bool(self.sharing)

    @property
    def share_capacity(self) -> int:
        """What one GPU holds in a fraction's first unit: MiB of memory (HAMi) or replicas (0: not shared)."""
        if self.sharing == GpuSharing.HAMI:
            return self.gpu_memory_gib * 1024
        if self.sharing == GpuSharing.REPLICAS:
            return self.replicas_per_gpu
        return 0


class QuotaQuerySet(TenantQuerySet):
    """Members read their department's quotas; only platform admins change them."""

    rules = {VIEW: DEPARTMENT, CHANGE: PLATFORM, ADMIN: PLATFORM}

    def nominal_by_flavor(self) -> dict[tuple[int, int], int]:
        """{(department id, flavor id): nominal GPUs across clusters}: the global quota's, or for a department
        with per-cluster quotas only, their sum (what it is guaranteed of the flavor in all)."""
        out: dict[tuple[int, int], int] = {}
        scoped: dict[tuple[int, int], int] = {}
        rows = self.filter(resource=QuotaResource.GPUS)  # cores and GiB of CPU pools are not GPUs
        for dept, flavor, cluster, nominal in rows.values_list("department_id", "flavor_id", "cluster_id",
                                                               "nominal").order_by():
            if cluster is None:
                out[(dept, flavor)] = nominal
            else:
                scoped[(dept, flavor)] = scoped.get((dept, flavor), 0) + nominal
        return {**scoped, **out}


class Quota(models.Model):
    """One department's share of one flavor inside the cohort.

    nominal: guaranteed GPUs. borrowing_limit: GPUs above nominal it may borrow from idle capacity (null =
    unlimited). lending_limit: GPUs of its unused nominal it lends to others (null = all of it).
    cluster: null = a global quota (the flavor's GPUs on every cluster); a cluster = that cluster's GPUs of the
    flavor only. A job must fit every quota it counts in (the global one and its cluster's).
    resource: what the numbers count: GPUs of a GPU flavor, or cores or GiB of memory of a CPU pool (one row
    each, with the same nominal / borrowing / lending meaning).
    """

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="quotas")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="quotas")
    # PROTECT: deleting a cluster must not silently drop the guarantees departments hold on it.
    cluster = models.ForeignKey("scheduling.Cluster", null=True, blank=True, on_delete=models.PROTECT,
                                related_name="quotas")
    nominal = models.PositiveIntegerField(default=0)
    borrowing_limit = models.PositiveIntegerField(null=True, blank=True)
    lending_limit = models.PositiveIntegerField(null=True, blank=True)
    resource = models.CharField(max_length=6, choices=QuotaResource.choices, default=QuotaResource.GPUS)

    objects = QuotaQuerySet.as_manager()

    class Meta:
        # The global quota first, then the per-cluster ones (the same on every database).
        ordering = ["department__slug", "flavor__name", F("cluster__name").asc(nulls_first=True)]
        constraints = [
            models.UniqueConstraint(fields=["department", "flavor", "resource"], condition=Q(cluster__isnull=True),
                                    name="quota_unique_department_flavor_resource"),
            models.UniqueConstraint(fields=["department", "flavor", "resource", "cluster"],
                                    condition=Q(cluster__isnull=False),
                                    name="quota_unique_department_flavor_resource_cluster"),
            models.CheckConstraint(condition=Q(resource__in=QuotaResource.values), name="quota_resource_valid"),
            models.CheckConstraint(
                condition=Q(lending_limit__isnull=True) | Q(lending_limit__lte=F("nominal")),
                name="quota_lending_within_nominal",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.department}/{self.key}: {self.nominal}"

    @property
    def key(self) -> str:
        """The flavor, or ``flavor@cluster`` for a per-cluster quota (the simulator's and lab files' key)."""
        return self.flavor.name if self.cluster_id is None else f"{self.flavor.name}@{self.cluster.name}"

    @property
    def scope(self) -> str:
        """Where the quota counts, for pages: the cluster's name or "all clusters"."""
        return "all clusters" if self.cluster_id is None else self.cluster.name


class TeamQuotaQuerySet(TenantQuerySet):
    """A department's members read its teams' splits; its admins set them (a team's admins its limits only,
    ``quotas.services.teams``)."""

    department_path = "team__department"
    rules = {VIEW: DEPARTMENT, CHANGE: DEPARTMENT_ADMIN, ADMIN: PLATFORM}


class TeamQuota(models.Model):
    """A team's split of its department's quota of one GPU flavor (every cluster together): nominal, borrowing
    and lending limits as a department's, lent and borrowed among the department's teams first (engine.teams).
    The teams' nominals of a flavor never add up to more than the department's."""

    team = models.ForeignKey("portal.Team", on_delete=models.CASCADE, related_name="quotas")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="team_quotas")
    nominal = models.PositiveIntegerField(default=0)
    borrowing_limit = models.PositiveIntegerField(null=True, blank=True)
    lending_limit = models.PositiveIntegerField(null=True, blank=True)

    objects = TeamQuotaQuerySet.as_manager()

    class Meta:
        ordering = ["team__department__slug", "team__slug", "flavor__name"]
        constraints = [
            models.UniqueConstraint(fields=["team", "flavor"], name="team_quota_unique_team_flavor"),
            models.CheckConstraint(condition=Q(lending_limit__isnull=True) | Q(lending_limit__lte=F("nominal")),
                                   name="team_quota_lending_within_nominal"),
        ]

    def __str__(self) -> str:
        return f"{self.team}/{self.flavor.name}: {self.nominal}"


class QuotaChangeRequestQuerySet(TenantQuerySet):
    """A department's admins file and read their department's requests; platform admins decide them."""

    owner_path = "requested_by"
    rules = {VIEW: DEPARTMENT_ADMIN, CHANGE: DEPARTMENT_ADMIN, ADMIN: PLATFORM}


class QuotaChangeRequest(models.Model):
    """A department admin's request to change their department's quota of one flavor, with a reason. A
    platform admin approves it (applied through the same validated, audited quota service) or rejects it."""

    class State(models.TextChoices):
        PENDING = "pending", "Pending"
        APPROVED = "approved", "Approved"
        REJECTED = "rejected", "Rejected"
        WITHDRAWN = "withdrawn", "Withdrawn"

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="quota_requests")
    flavor = models.ForeignKey(Flavor, on_delete=models.PROTECT, related_name="quota_requests")
    # null: the global quota (all clusters); a cluster: the department's quota on that cluster only. A cluster
    # is deleted only once no request for it is pending; its decided requests go with it (the audit log keeps
    # them).
    cluster = models.ForeignKey("scheduling.Cluster", null=True, blank=True, on_delete=models.CASCADE,
                                related_name="quota_requests")
    # what the numbers count, as the quota's own (a CPU pool's cores or GiB)
    resource = models.CharField(max_length=6, choices=QuotaResource.choices, default=QuotaResource.GPUS)
    nominal = models.PositiveIntegerField()
    borrowing_limit = models.PositiveIntegerField(null=True, blank=True)
    lending_limit = models.PositiveIntegerField(null=True, blank=True)
    oversubscribe = models.BooleanField(default=False)
    reason = models.TextField()
    state = models.CharField(max_length=10, choices=State.choices, default=State.PENDING, db_index=True)
    requested_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, on_delete=models.SET_NULL,
                                     related_name="+")
    requested_at = models.DateTimeField(default=timezone.now)
    decided_by = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL,
                                   related_name="+")
    decided_at = models.DateTimeField(null=True, blank=True)
    decision_comment = models.TextField(blank=True)

    objects = QuotaChangeRequestQuerySet.as_manager()

    class Meta:
        ordering = ["-requested_at", "-id"]
        constraints = [
            models.CheckConstraint(condition=Q(state__in=["pending", "approved", "rejected", "withdrawn"]),
                                   name="quota_request_state_valid"),
            models.CheckConstraint(
                condition=Q(lending_limit__isnull=True) | Q(lending_limit__lte=F("nominal")),
                name="quota_request_lending_within_nominal",
            ),
        ]

    def __str__(self) -> str:
        scope = f"{self.flavor_id}@{self.cluster_id}" if self.cluster_id else f"{self.flavor_id}"
        return f"quota request {self.pk} {self.department_id}/{scope}: {self.nominal} ({self.state})"


# ------------------------------------------------------------------------------------------ budgets
#
# Money is integer milli-credits (mcr), never floats. 1 credit = 1000 mcr.

# Prices are per tier; the tiers are the scheduling core's (the one list of them).
TIERS = tuple((t, t.capitalize()) for t in TIER_NAMES)


class WalletQuerySet(TenantQuerySet):
    """Members read their department's wallet; its admins change its approval rule (``change``); only
    platform admins move money or set refills (``admin``)."""


class Wallet(models.Model):
    """A department's credits. ``balance`` is what it owns (including what is held); ``held`` is committed
    to admitted jobs. available = balance - held. Changed only by ``quotas.services`` under a row lock, each
    change with a LedgerEntry, so that balance == sum(entries.amount) and held == sum(entries.held_change)."""

    department = models.OneToOneField(Department, on_delete=models.PROTECT, related_name="wallet")
    balance = models.BigIntegerField(default=0)
    held = models.BigIntegerField(default=0)
    created_at = models.DateTimeField(default=timezone.now)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = WalletQuerySet.as_manager()

    class Meta:
        ordering = ["department__slug"]
        constraints = [
            models.CheckConstraint(condition=Q(balance__gte=0), name="wallet_balance_non_negative"),
            models.CheckConstraint(condition=Q(held__gte=0), name="wallet_held_non_negative"),
            models.CheckConstraint(condition=Q(held__lte=F("balance")), name="wallet_held_within_balance"),
        ]

    def __str__(self) -> str:
        return f"wallet {self.department_id}: {self.balance} mcr ({self.held} held)"

    @property
    def available(self) -> int:
        return self.balance - self.held


class AllowanceQuerySet(TenantQuerySet):
    """A researcher sees their own allowance (a colleague's limit and spending are the department admins'
    business); department admins see and change their department's."""

    department_path = "wallet__department"
    owner_path = "user"
    rules = {VIEW: OWNER_OR_ADMIN, CHANGE: DEPARTMENT_ADMIN, ADMIN: PLATFORM}


class Allowance(models.Model):
    """Optional per-user cap inside the department's wallet: what one user may commit (spent + held) per
    period. A job that would exceed it waits for a department admin's approval."""

    PERIODS = (("weekly", "Weekly"), ("monthly", "Monthly"))

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="allowance")
    wallet = models.ForeignKey(Wallet, on_delete=models.CASCADE, related_name="allowances")
    limit = models.BigIntegerField(validators=[MinValueValidator(0)])
    period = models.CharField(max_length=10, choices=PERIODS, default="monthly")

    objects = AllowanceQuerySet.as_manager()

    class Meta:
        ordering = ["wallet_id", "user_id"]
        constraints = [models.CheckConstraint(condition=Q(limit__gte=0), name="allowance_limit_non_negative")]

    def __str__(self) -> str:
        return f"allowance {self.user_id}: {self.limit} mcr/{self.period}"


class UserLimitQuerySet(TenantQuerySet):
    """A department's admins read and set their members' limits (platform admins every department's); a member
    meets theirs as the reason their job waits or the error a submission gets."""

    rules = {VIEW: DEPARTMENT_ADMIN, CHANGE: DEPARTMENT_ADMIN, ADMIN: PLATFORM}


class UserLimit(models.Model):
    """How much one member of a department may hold at once: GPUs (every flavor and cluster together; the
    engine keeps their new jobs waiting, reason ``user_gpu_limit``) and, optionally, queued jobs (a submission
    past it is refused). ``user`` null: the limit of every member who has no row of their own; a member's own
    row replaces the department's whole (docs/sweeps.md, "Per-user limits")."""

    department = models.ForeignKey(Department, on_delete=models.CASCADE, related_name="user_limits")
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="gpu_limits")
    max_gpus = models.PositiveIntegerField(validators=[MinValueValidator(1)])
    max_queued = models.PositiveIntegerField(null=True, blank=True, validators=[MinValueValidator(1)])
    updated_at = models.DateTimeField(auto_now=True)

    objects = UserLimitQuerySet.as_manager()

    class Meta:
        ordering = ["department_id", F("user_id").asc(nulls_first=True)]
        constraints = [
            models.UniqueConstraint(fields=["department"], condition=Q(user__isnull=True),
                                    name="user_limit_one_default_per_department"),
            models.UniqueConstraint(fields=["department", "user"], condition=Q(user__isnull=False),
                                    name="user_limit_one_per_member"),
            models.CheckConstraint(condition=Q(max_gpus__gte=1), name="user_limit_max_gpus_positive"),
            models.CheckConstraint(condition=Q(max_queued__isnull=True) | Q(max_queued__gte=1),
                                   name="user_limit_max_queued_positive"),
        ]

    def __str__(self) -> str:
        return f"user limit {self.department_id}/{self.user_id or '*'}: {self.max_gpus} GPUs"


class LedgerKind(models.TextChoices):
    REFILL = "refill", "Refill"
    HOLD = "hold", "Hold"
    SETTLE = "settle", "Settle"
    RELEASE = "release", "Release"
    REFUND = "refund", "Refund"
    RESIZE = "resize", "Resize"
    ADJUSTMENT = "adjustment", "Adjustment"


class LedgerEntryQuerySet(TenantQuerySet):
    """Members read their department's ledger (and the usage reports made of it); nobody changes it."""

    department_path = "wallet__department"
    owner_path = "user"
    rules = {VIEW: DEPARTMENT}


class LedgerEntry(AppendOnlyModel):
    """One movement of credits. Append-only (Python guards here, a PostgreSQL trigger in the database).

    ``amount`` changes the balance, ``held_change`` the held part:
    refill +a/0, hold 0/+h, settle -c/-c, release 0/-r, refund +r/0, adjustment +-a/0.
    ``balance_after``/``held_after`` are the wallet's values right after this entry (for statements)."""

    wallet = models.ForeignKey(Wallet, on_delete=models.PROTECT, related_name="entries")
    kind = models.CharField(max_length=12, choices=LedgerKind.choices)
    amount = models.BigIntegerField(default=0)
    held_change = models.BigIntegerField(default=0)
    balance_after = models.BigIntegerField()
    held_after = models.BigIntegerField()
    job = models.ForeignKey("scheduling.Job", null=True, blank=True, on_delete=models.PROTECT,
                            related_name="ledger_entries")
    attempt = models.PositiveIntegerField(null=True, blank=True)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                             related_name="+", help_text="whose job (for per-user reports)")
    flavor = models.ForeignKey(Flavor, null=True, blank=True, on_delete=models.PROTECT, related_name="+")
    actor = models.ForeignKey(settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.PROTECT,
                              related_name="+", help_text="who caused it (None = the platform)")
    rate = models.BigIntegerField(null=True, blank=True, help_text="mcr per GPU-hour")
    gpus = models.PositiveIntegerField(default=0, help_text="the job's GPUs over all its pods (total_gpus) the entry is "
                                       "about; 0 for entries about no job (refills, adjustments)")
    gpu_seconds = models.BigIntegerField(default=0, help_text="GPU-seconds charged (settle entries)")
    outcome = models.CharField(max_length=20, blank=True)
    memo = models.CharField(max_length=300, blank=True)
    data = models.JSONField(default=dict, blank=True)
    idempotency_key = models.CharField(max_length=200, unique=True)
    created_at = models.DateTimeField(default=timezone.now, db_index=True)

    objects = LedgerEntryQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        indexes = [
            models.Index(fields=["wallet", "created_at"]),
            models.Index(fields=["job", "attempt"]),
            models.Index(fields=["kind", "created_at"]),
        ]
        constraints = [
            models.CheckConstraint(condition=Q(kind__in=LedgerKind.values), name="ledger_kind_valid"),
            models.CheckConstraint(
                condition=(
                    Q(kind="refill", amount__gt=0, held_change=0)
                    | Q(kind="hold", amount=0, held_change__gt=0)
                    | Q(kind="settle", amount__lte=0, held_change=F("amount"))
                    | Q(kind="release", amount=0, held_change__lt=0)
                    | Q(kind="refund", amount__gt=0, held_change=0)
                    # a resizable attempt's new size: a grow's GPUs held more, a shrink's nothing (settled at the end)
                    | Q(kind="resize", amount=0, held_change__gte=0)
                    | Q(kind="adjustment", held_change=0)
                ),
                name="ledger_kind_signs",
            ),
            models.CheckConstraint(condition=Q(balance_after__gte=0) & Q(held_after__gte=0)
                                   & Q(held_after__lte=F("balance_after")), name="ledger_after_valid"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.amount:+d}/{self.held_change:+d} ({self.idempotency_key})"



class Price(models.Model):
    """Base price per GPU-hour of one flavor in one tier (realtime dearer), in milli-credits. Work inside a
    department's nominal quota pays it; borrowed work pays the cycle's clearing price instead."""

    flavor = models.ForeignKey(Flavor, on_delete=models.CASCADE, related_name="prices")
    tier = models.CharField(max_length=10, choices=TIERS)
    per_gpu_hour = models.PositiveBigIntegerField()
    # A CPU pool's prices (what its roles and CPU-only jobs pay): per core-hour and per GiB-hour of memory.
    per_core_hour = models.PositiveBigIntegerField(default=0)
    per_gib_hour = models.PositiveBigIntegerField(default=0)
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["flavor__name", "tier"]
        constraints = [
            models.UniqueConstraint(fields=["flavor", "tier"], name="price_unique_flavor_tier"),
            models.CheckConstraint(condition=Q(per_gpu_hour__gte=0), name="price_non_negative"),
        ]

    def __str__(self) -> str:
        return f"{self.flavor_id}/{self.tier}: {self.per_gpu_hour} mcr/GPU-h"


class DepartmentRuleQuerySet(TenantQuerySet):
    """Refill and approval rules, refill records: members read their department's; who changes them is
    decided on the department's wallet (``WalletQuerySet``)."""


class RefillRule(models.Model):
    """How a department's wallet is refilled each period: a fixed amount, or an amount per nominal GPU of
    its quotas (proportional to nominal quota)."""

    PERIODS = (("weekly", "Weekly"), ("monthly", "Monthly"))
    MODES = (("fixed", "Fixed amount"), ("per_nominal_gpu", "Per nominal GPU"))

    department = models.OneToOneField(Department, on_delete=models.CASCADE, related_name="refill_rule")
    mode = models.CharField(max_length=20, choices=MODES, default="fixed")
    amount = models.PositiveBigIntegerField(default=0, help_text="mcr per period (fixed) or per nominal GPU")
    period = models.CharField(max_length=10, choices=PERIODS, default="monthly")
    active = models.BooleanField(default=True)
    updated_at = models.DateTimeField(default=timezone.now)

    objects = DepartmentRuleQuerySet.as_manager()

    class Meta:
        ordering = ["department__slug"]
        constraints = [models.CheckConstraint(condition=Q(amount__gte=0), name="refill_amount_non_negative")]

    def __str__(self) -> str:
        return f"refill {self.department_id}: {self.amount} {self.mode} {self.period}"


class RefillRecord(models.Model):
    """Proof that a department was refilled for a period ("2026-11" or "2026-W48"): unique, so a refill
    happens exactly once per department and period however often beat fires."""

    department = models.ForeignKey(Department, on_delete=models.PROTECT, related_name="refills")
    period = models.CharField(max_length=10)
    amount = models.BigIntegerField()
    entry = models.OneToOneField(LedgerEntry, null=True, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    objects = DepartmentRuleQuerySet.as_manager()

    class Meta:
        ordering = ["-created_at", "-id"]
        constraints = [
            models.UniqueConstraint(fields=["department", "period"], name="refill_once_per_period"),
        ]

    def __str__(self) -> str:
        return f"refill {self.department_id} {self.period}"


class ApprovalRule(models.Model):
    """When a department's jobs need an admin's approval (any condition that is set applies)."""

    department = models.OneToOneField(Department, on_delete=models.CASCADE, related_name="approval_rule")
    gpus_above = models.PositiveIntegerField(null=True, blank=True, help_text="total GPUs > this")
    cost_above = models.PositiveBigIntegerField(null=True, blank=True, help_text="estimated mcr > this")
    realtime = models.BooleanField(default=False, help_text="every realtime job")
    updated_at = models.DateTimeField(default=timezone.now)

    objects = DepartmentRuleQuerySet.as_manager()

    class Meta:
        ordering = ["department__slug"]

    def __str__(self) -> str:
        return f"approval rule {self.department_id}"


# The notice bound where the lab sets no limit: within realtime's 5-minute start target with room for the
# victim's grace period.
DEFAULT_MAX_NOTICE_S = 240


class PreemptionLimit(models.Model):
    """What a tier's jobs may ask of preemptibility apart from their tier, set by the lab per tier, for one
    department or (``department`` null) for every department without its own limit of that tier.

    A preemptible tier (elastic, backfill): whether its jobs may ask not to be preemptible at all, which user
    tiers may (none listed: every member), for how long at most (their ``max_runtime_s``), and at what surcharge
    on the base price (a protected job's GPUs are not the lab's to take back). The realtime tier: whether the
    department's interactive sessions run preemptible (an idle notebook may yield). Any job of a non-preemptible
    tier may always ask to be preemptible: giving up protection needs no permission."""

    department = models.ForeignKey(Department, null=True, blank=True, on_delete=models.CASCADE,
                                   related_name="preemption_limits")
    tier = models.CharField(max_length=10, choices=TIERS)
    non_preemptible = models.BooleanField(default=False, help_text="its jobs may ask not to be preemptible")
    user_tiers = models.JSONField(default=list, blank=True, help_text="who may ask (empty: every member)")
    max_runtime_s = models.PositiveIntegerField(null=True, blank=True,
                                                help_text="the longest non-preemptible job (null: no limit)")
    surcharge_pct = models.PositiveIntegerField(default=0, help_text="added to the base price of a "
                                                "non-preemptible job, in percent")
    sessions_preemptible = models.BooleanField(default=False, help_text="realtime: sessions run preemptible")
    # The longest notice before preemption a job of the tier may declare (and the notice a session the lab made
    # preemptible gets): the preemptor waits that long at most, so a realtime preemptor's start target bounds it.
    max_notice_s = models.PositiveIntegerField(default=DEFAULT_MAX_NOTICE_S,
                                               help_text="the longest notice before preemption a job may ask for")
    updated_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["department__slug", "tier"]
        constraints = [
            models.UniqueConstraint(fields=["department", "tier"], name="preemption_limit_once_per_tier"),
            models.UniqueConstraint(fields=["tier"], condition=Q(department__isnull=True),
                                    name="preemption_limit_lab_wide_once_per_tier"),
            models.CheckConstraint(condition=Q(surcharge_pct__lte=1000), name="preemption_surcharge_bounded"),
            models.CheckConstraint(condition=Q(max_notice_s__lte=3600), name="preemption_notice_bounded"),
        ]

    def __str__(self) -> str:
        return f"preemption limit {self.department_id or 'lab'}/{self.tier}"


__all__ = [
    "Allowance", "ApprovalRule", "Flavor", "LedgerEntry", "LedgerKind", "MinValueValidator",
    "PreemptionLimit", "Price", "Quota", "QuotaChangeRequest", "RefillRecord", "RefillRule", "Wallet",
]
