"""Frozen value types of the pure scheduling core.

Nothing in ``engine`` imports Django, Kubernetes, Celery or reads a clock: the caller passes
``Snapshot.now`` (seconds since the epoch, or any monotonic origin in the simulator). The same types feed the
portal's admission cycle (built by ``scheduling.snapshot`` from the database) and the trace simulator.

Units: time in seconds (float), GPUs as integers (a fractional job's total as an exact ``Fraction``, ``fractions``),
money in integer milli-credits.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from fractions import Fraction
from types import MappingProxyType

from . import tiers as _tiers
from .fractions import MILLI, Share

TIERS: tuple[str, ...] = _tiers.NAMES  # in rank order; the facts of each are in ``tiers.TABLE``
TIER_RANK: Mapping[str, int] = MappingProxyType({t.name: t.rank for t in _tiers.TABLE})
URGENCIES: tuple[str, ...] = ("low", "normal", "high", "critical")
USER_TIERS: tuple[str, ...] = ("standard", "senior", "pi")
TASK_TYPES: tuple[str, ...] = ("train", "inference", "processing")
DEFAULT_CLUSTER = "default"
CLUSTER_STATES: tuple[str, ...] = ("active", "cordoned", "draining")

_EMPTY: Mapping = MappingProxyType({})


# Urgency x user tier weights of the default policy (multipliers of Policy.weight_points).
DEFAULT_WEIGHTS: Mapping[tuple[str, str], float] = MappingProxyType(
    {
        ("low", "standard"): 0.10,
        ("low", "senior"): 0.15,
        ("low", "pi"): 0.20,
        ("normal", "standard"): 1.00,
        ("normal", "senior"): 1.15,
        ("normal", "pi"): 1.30,
        ("high", "standard"): 2.00,
        ("high", "senior"): 2.30,
        ("high", "pi"): 2.60,
        ("critical", "standard"): 4.00,
        ("critical", "senior"): 4.50,
        ("critical", "pi"): 5.00,
    }
)


@dataclass(frozen=True, slots=True)
class ClusterInfo:
    """A cluster's scheduling-relevant facts. Clusters a snapshot does not list are active, unlabelled, cost_rank 0."""

    name: str
    labels: tuple[tuple[str, str], ...] = ()  # sorted (key, value) pairs: region, cost tier, data locality...
    state: str = "active"  # cordoned: no new admissions; draining: no new admissions, running work finishes
    cost_rank: int = 0  # lower is cheaper; among clusters that fit equally well the cheaper one is chosen
    # Its topology levels: node label keys from the outermost to the innermost (block, rack, host), whose values
    # group its nodes into domains (``domains``). Empty: the cluster's network is flat to the engine.
    topology_levels: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class Node:
    """One node's GPUs of one flavor.

    ``used_by_others`` counts GPUs held by pods the portal does not own (they still use capacity);
    GPUs used by the portal's own running jobs are derived from ``Snapshot.running`` placements.
    """

    name: str
    flavor: str
    gpus: int
    used_by_others: int = 0
    cluster: str = DEFAULT_CLUSTER
    labels: tuple[tuple[str, str], ...] = ()
    taints: tuple[str, ...] = ()  # NoSchedule/NoExecute taint keys the portal's pods do not tolerate
    schedulable: bool = True  # False when cordoned or not Ready
    # ``kind`` "cpu": a node of a CPU pool (no GPUs; ``shapes.CpuPool``), offering ``cpu_m`` millicores and
    # ``memory_mib`` to the roles without GPUs. A GPU node's CPU and memory go with its GPUs and are not counted.
    kind: str = "gpu"
    cpu_m: int = 0
    memory_mib: int = 0

    @property
    def usable(self) -> bool:
        return self.schedulable and not self.taints


@dataclass(frozen=True, slots=True)
class Quota:
    """Kueue-style quota of one department for one flavor inside the (single, default) cohort.

    ``borrowing_limit``: GPUs above nominal the department may borrow (None = unlimited).
    ``lending_limit``: GPUs of its unused nominal it lends to the cohort (None = all of them).
    ``cluster``: None for a global quota (the department's GPUs of the flavor counted across all clusters);
    a cluster's name limits only that cluster's GPUs of the flavor.
    """

    department: str
    flavor: str
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None
    cluster: str | None = None


@dataclass(frozen=True, slots=True)
class TeamQuota:
    """A team's split of its department's quota of one flavor (``teams``): the same three numbers as a
    department's ``Quota``, lent and borrowed among the department's teams first. Team quotas count the
    department's GPUs of the flavor on every cluster together."""

    department: str
    team: str
    flavor: str
    nominal: int
    borrowing_limit: int | None = None
    lending_limit: int | None = None


@dataclass(frozen=True, slots=True)
class Dependency:
    """A pending job waits for every job of ``job_ids`` (one job, or all tasks of an array) to end as
    ``condition`` asks (``sweeps.CONDITIONS``); ``label`` names them in its reason ("job 12", "array 3")."""

    condition: str
    job_ids: tuple[int, ...]
    label: str


@dataclass(frozen=True, slots=True)
class Role:
    """A group of identical pods inside a job (``shapes``). A role with GPUs runs on the job's flavor and is part
    of its GPU gang; one without (``gpus_per_pod`` 0) runs on the CPU pool ``flavor``. Per pod: millicores and
    MiB (what a CPU pool's nodes are sized in)."""

    name: str
    pods: int
    gpus_per_pod: int = 0
    cpu_m: int = 0
    memory_mib: int = 0
    flavor: str = ""


@dataclass(frozen=True, slots=True)
class PendingJob:
    id: int
    department: str
    flavor: str
    tier: str = _tiers.DEFAULT
    pods: int = 1
    gpus_per_pod: int = 1
    urgency: str = "normal"
    user_tier: str = "standard"
    user: str = ""
    submitted_at: float = 0.0  # original submission, kept across preemptions (aging never resets)
    deadline: float | None = None
    max_runtime_s: float = 3600.0
    bid: int = 0  # maximum price per GPU-hour the owner offers for borrowed capacity (milli-credits)
    hold: int = 0  # credits the department must have available to admit this job (0 = free)
    cluster: str | None = None  # pinned cluster, None = any
    attempt: int = 1
    cluster_selector: tuple[tuple[str, str], ...] = ()  # required cluster labels: all must match
    cluster_preference: tuple[tuple[str, str], ...] = ()  # preferred cluster labels: more matches rank higher
    # The data sources the job mounts, each with the clusters where its department may mount it as asked: the
    # job may run only on a cluster that has all of them (empty: no sources, any cluster).
    data_sources: tuple[tuple[str, tuple[str, ...]], ...] = ()
    # A retried attempt waits out its back-off: not admitted (nor reserved for) before this instant.
    not_before: float | None = None
    # Expedited requeue (``retries.expedite``): since when the job waits again after its pods were lost to a node
    # failure. It goes ahead of every other job of its tier (``ordering``), earliest first; None: in its place.
    expedited_since: float | None = None
    # Sweeps (``sweeps``): held by its owner (kept in the queue, never admitted), the jobs it waits for, and
    # the array it is a task of with the array's throttle (at most that many of its tasks admitted at once).
    held: bool = False
    after: tuple[Dependency, ...] = ()
    array_id: int | None = None
    array_throttle: int | None = None
    # How long its owner's similar jobs ran (right-sizing's smoothed run time, 20% headroom): the start
    # estimates expect it to run this long, never longer than max_runtime_s. Admission, reservations and
    # holds keep max_runtime_s (a promise must hold even when the prediction is wrong). None: unknown.
    predicted_runtime_s: float | None = None
    # Its roles, for a job of several roles or of none with GPUs (empty: one role of ``pods`` x
    # ``gpus_per_pod``, every job before roles). ``pods`` x ``gpus_per_pod`` is then its GPU gang (its roles with
    # GPUs, which share that size and ``flavor``; 0 pods for a CPU-only job, whose ``flavor`` is a CPU pool),
    # and the admission's placement names every pod, role by role in this order.
    roles: tuple[Role, ...] = ()
    # The job's own choice of preemptibility, apart from its tier (``tiers.is_preemptible``): None takes its
    # tier's. A non-preemptible job of a preemptible tier starts only within its department's nominal quota
    # (borrowed GPUs are lent on the promise that they come back).
    own_preemptible: bool | None = None
    # A fraction of a GPU per pod (``fractions``; its ``gpus_per_pod`` is then 1): placed on a GPU of its pool
    # that holds fractions, or on one it opens. None: whole GPUs.
    share: Share | None = None
    # A resizable job ("elastic" in the sense of a changing size, not the elastic tier; ``resize``): it may run
    # on any number of pods from ``min_pods`` to ``pods`` (its maximum). None: always ``pods``.
    min_pods: int | None = None
    # Topology (``domains``): a level (a node label key of its cluster's ``topology_levels``) its pods must sit
    # within one domain of (``topology_required``) or should (preferred: spread when no domain fits). "": none
    # named; a gang of several pods then prefers the most compact placement all the same.
    topology_level: str = ""
    topology_required: bool = False
    # The team of its department it was submitted in (``teams``): "" for a member of no team, and for every job
    # of a department without teams.
    team: str = ""

    @property
    def total_gpus(self) -> int | Fraction:
        """The GPUs its quota, prices and holds count: whole GPUs, or its pods' shares (an exact fraction)."""
        if self.share is None:
            return self.pods * self.gpus_per_pod
        return self.pods * self.share.gpus

    @property
    def gpu_milli(self) -> int:
        """``total_gpus`` in milli-GPUs (an int: what the quota book and the sums over many jobs count in, since
        adding exact fractions costs the cycle more than all else it does for them)."""
        if self.share is None:
            return self.pods * self.gpus_per_pod * MILLI
        return self.pods * self.share.milli

    @property
    def likely_runtime_s(self) -> float:
        """The run time the start estimates expect: the predicted one, at most the max runtime."""
        p = self.predicted_runtime_s
        return self.max_runtime_s if p is None else min(self.max_runtime_s, p)


@dataclass(frozen=True, slots=True)
class RunningJob:
    id: int
    department: str
    flavor: str
    tier: str
    placement: tuple[str, ...]  # node name of each pod
    gpus_per_pod: int
    started_at: float
    max_runtime_s: float = 3600.0
    borrowed: bool = False  # admitted (partly) on capacity borrowed from the cohort
    urgency: str = "normal"
    user_tier: str = "standard"
    submitted_at: float = 0.0
    bid: int = 0
    cluster: str = DEFAULT_CLUSTER
    deadline: float | None = None  # as submitted: it orders the job again if it is evicted
    # Names of the DisruptionBudgets covering its pods (a team's PDB, a namespace-wide one, the job's own):
    # it is a victim only while every one of them has room left for all of its pods.
    disruption_budgets: tuple[str, ...] = ()
    preemptible: bool = True  # False for jobs being evicted already (and, by the adapters, realtime ones)
    # The job's own choice of preemptibility, apart from its tier: None takes its tier's (``tiers.is_preemptible``);
    # True makes a realtime job (a session the lab made preemptible) a victim, False protects an elastic one.
    own_preemptible: bool | None = None
    # How often the job saves a checkpoint it resumes from; victims are chosen by the work at risk since the
    # last one. None: never, or unknown (all work since the start is at risk).
    checkpoint_interval_s: float | None = None
    # Set while the job is being evicted (or its pods are terminating) to make room for that pending job: its
    # GPUs are already promised to the preemptor, which therefore waits instead of choosing more victims.
    evicting_for: int | None = None
    user: str = ""  # its owner: the GPUs a member holds count against their ``UserLimit``
    array_id: int | None = None  # the array it is a task of: it counts against the array's throttle
    predicted_runtime_s: float | None = None  # as PendingJob's: for the start estimates only
    # Its pods on CPU pools: (CPU flavor, node, millicores, MiB) each (``placement`` holds its GPU pods only).
    cpu_pods: tuple[tuple[str, str, int, int], ...] = ()
    # A fractional job (``fractions``): its share per pod, and the device index of the shared GPU each pod of
    # ``placement`` sits on (the portal's numbering of the node's shared GPUs).
    share: Share | None = None
    devices: tuple[int, ...] = ()
    # A resizable job's size range (``resize``): its pods beyond ``min_pods`` go back to the pool at each cycle
    # (any job may take them; the job then shrinks), and it grows into GPUs left idle, up to ``max_pods``.
    # None: a job of a fixed size. ``resizing``: a resize decided earlier waits for the job's next checkpoint
    # (the adapter holds every pod of the larger of the two sizes meanwhile): no new one is decided.
    min_pods: int | None = None
    max_pods: int | None = None
    resizing: bool = False
    team: str = ""  # as PendingJob's: its GPUs count against its team's quota inside its department

    @property
    def pods(self) -> int:
        return len(self.placement)

    @property
    def total_gpus(self) -> int | Fraction:
        if self.share is None:
            return len(self.placement) * self.gpus_per_pod
        return len(self.placement) * self.share.gpus

    @property
    def gpu_milli(self) -> int:
        """``total_gpus`` in milli-GPUs (``PendingJob.gpu_milli``)."""
        if self.share is None:
            return len(self.placement) * self.gpus_per_pod * MILLI
        return len(self.placement) * self.share.milli

    @property
    def expected_end(self) -> float:
        return self.started_at + self.max_runtime_s

    @property
    def likely_end(self) -> float:
        """When the start estimates expect it to end: after its predicted run time, at most its max runtime
        (the engine takes the max runtime for a job already running past its prediction)."""
        p = self.predicted_runtime_s
        if p is None or p >= self.max_runtime_s:
            return self.expected_end
        return self.started_at + p


@dataclass(frozen=True, slots=True)
class DisruptionBudget:
    """How many more pods of the covered jobs may be voluntarily disrupted now (a PDB's
    ``status.disruptionsAllowed``)."""

    name: str
    disruptions_allowed: int


@dataclass(frozen=True, slots=True)
class Policy:
    """The scoring and preemption policy. Versioned and edited at runtime by platform admins.

    ``weights`` maps (urgency, user_tier) to a weight (a multiplier of ``weight_points`` score points; one point
    is one minute of waiting at the default aging); missing pairs weigh ``default_weight``. The default matrix
    is ``DEFAULT_WEIGHTS`` (see docs/scheduling.md), so ``Policy()`` is the documented default policy.
    """

    version: int = 0
    weights: Mapping[tuple[str, str], float] = field(default_factory=lambda: DEFAULT_WEIGHTS)
    default_weight: float = 1.0
    aging_per_minute: float = 1.0
    deadline_boost: float = 50.0
    deadline_horizon_s: float = 6 * 3600.0
    bid_weight: float = 0.01  # score points per milli-credit of bid
    fair_share_weight: float = 400.0
    usage_half_life_s: float = 7 * 86400.0
    min_runtime_s: float = 600.0  # no job is preempted before it has run this long
    preemption_rate_limit: int = 10  # at most this many victims per window
    preemption_window_s: float = 600.0
    realtime_start_target_s: float = 300.0
    weight_points: float = 100.0  # score points per unit of weight
    # Shorter work first: the score is divided by (1 + GPU-hours asked for) ** size_weight (0 = off). At 1 a
    # job's score grows with its wait per GPU-hour asked for (its slowdown, roughly), which is what shortens the
    # average wait of a deep queue; the starvation guard bounds what that costs large jobs.
    size_weight: float = 1.0
    # A job that has waited this long, divided by its weight x fair-share factor (clamped to 0.5..4), is
    # *starving*: it goes ahead of every non-starving job of its tier and gets the pool's reservation, whatever
    # its size, score or whether it borrows (0 = never).
    starvation_s: float = 12 * 3600.0
    # ... and, when the queue is long, only once it has waited this many times the median wait of the pending
    # non-realtime jobs: on an overloaded cluster a fixed limit makes most of the queue "starving", and a
    # starving queue is ordered by age alone, which undoes urgency and fair share (0 = the fixed limit only).
    starvation_queue_factor: float = 2.0
    # Jobs whose weight (urgency x user tier, before fair share) is at least this form the *priority band* of
    # their tier: once they have waited a quarter of the starvation limit (``ordering.BAND_ENTRY_SHARE``) they
    # go ahead of the tier's other jobs, starving ones included, and the starvation guard then orders each band
    # on its own (0 = off: one band). At 2 (the default) the band is high and critical work: without it, urgent
    # jobs queue behind routine work that has starved and behind its reservations (on the labs they wait
    # 0.7-0.8x what they wait under FCFS; with it 0.29-0.43x, docs/simulator.md). Meant for a minority of the
    # work: routine jobs starve only behind it.
    priority_band_weight: float = 2.0
    # Only a pool's head within nominal that has waited this long, and whose reservation lies further ahead,
    # reclaims lent GPUs (freeing at most twice what it needs).
    reclaim_delay_s: float = 1800.0
    # The queue's head evicts cheap work instead of draining: when the work its victims lose since their last
    # checkpoint is below drain_ratio x the GPU-time the reservation would leave idle (0 = never).
    drain_ratio: float = 0.25
    # ... and only evicts jobs that would lose at most this much work: it waits for their next checkpoint.
    drain_max_loss_s: float = 300.0
    # GPUs kept free for realtime work while every running job of a pool is inside its cooldown (0 = off).
    realtime_headroom_gpus: int = 1
    # How many blocked jobs per pool may hold an EASY reservation (the first ones in the order; after the first,
    # only while the reserved GPUs are under half the pool's): a job that would run past any of their reserved
    # starts keeps off the GPUs those heads need. 1 is plain EASY backfill; 0 reserves nothing.
    reservation_depth: int = 16
    # A job larger than its department's nominal quota of its flavor (it can only ever run on borrowed GPUs)
    # *starves* once it has waited this long, whatever its weight, and from then on becomes a pool's reserved
    # head across quota: it reserves even while its own department holds all it may borrow, and past the
    # share of the pool that other heads may reserve, so that the starts that would delay it, its own
    # department's and the lenders' included, keep off its GPUs (EASY for the gang the quota would otherwise
    # starve; docs/scheduling.md, rule 8). 0 = off: such a job starves at the starvation limit like any other.
    quota_reservation_age_s: float = 4 * 3600.0
    # Earliest deadline first among jobs at risk (0 = off, the default): a non-realtime job whose deadline
    # has not passed and whose slack (deadline - now - its likely run time) is at most this many seconds goes
    # ahead of the rest of its tier and band, starving jobs included, earliest deadline first. A job past
    # saving by its predicted run time is not moved: it would take GPUs from jobs that can still make theirs
    # (docs/scheduling.md, "Deadlines").
    deadline_edf_horizon_s: float = 0.0
    # Expedited requeue: a job whose pods were lost to a node failure (not to a preemption, not to its own error)
    # waits again ahead of every other job of its tier, after a back-off of expedited_backoff_s doubling with
    # each expedited requeue of the job, at most expedited_requeues times per job (0 = off); after that it
    # waits in its normal place.
    expedited_requeues: int = 3
    expedited_backoff_s: float = 30.0
    priority_classes: Mapping[str, str] = field(
        default_factory=lambda: MappingProxyType({t.name: t.priority_class for t in _tiers.TABLE})
    )


@dataclass(frozen=True, slots=True)
class NamespaceQuotaLimit:
    """A namespace ResourceQuota on ``cluster`` refused a request of ``total_gpus`` GPUs of ``flavor`` by
    ``department``: until ``until`` (the adapter drops it earlier once it sees the quota change), no job of that
    department and flavor needing at least that many GPUs is admitted there."""

    cluster: str
    department: str
    flavor: str
    total_gpus: int
    until: float


@dataclass(frozen=True, slots=True)
class UserLimit:
    """How many GPUs one member of a department may hold at once, every flavor and cluster together (Slurm's
    ``MaxTRESPerUser``). ``user`` None: the limit of every member of the department who has none of their own.
    A job is held by its owner from admission to its end; jobs of no user (``""``) are never limited."""

    department: str
    user: str | None
    max_gpus: int


@dataclass(frozen=True, slots=True)
class Booking:
    """``gpus`` GPUs of ``flavor`` on ``cluster`` held for their owners from ``start`` to ``end`` (``bookings``):
    a department, a team (by its account, ``department/team``: ``teams.account``) or a list of users;
    ``purpose`` is what the reasons show ("NLP course")."""

    id: int
    cluster: str
    flavor: str
    gpus: int
    start: float
    end: float
    purpose: str = ""
    departments: tuple[str, ...] = ()
    users: tuple[str, ...] = ()
    teams: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class MaintenanceWindow:
    """Nodes of ``cluster`` out of service from ``start`` to ``end`` (``bookings``): the nodes named, those with
    every label of ``selector`` (a rack), or with neither the whole cluster."""

    id: int
    cluster: str
    start: float
    end: float
    nodes: tuple[str, ...] = ()
    selector: tuple[tuple[str, str], ...] = ()
    reason: str = ""


@dataclass(frozen=True, slots=True)
class Snapshot:
    now: float
    nodes: tuple[Node, ...] = ()
    running: tuple[RunningJob, ...] = ()
    pending: tuple[PendingJob, ...] = ()
    quotas: tuple[Quota, ...] = ()
    policy: Policy = field(default_factory=Policy)
    # Available credits per department; None = not enforced. A team with a share of its department's budget has
    # an entry of its own under its account (``teams.account``: ``department/team``): what its share leaves.
    credits: Mapping[str, int] | None = None
    usage: Mapping[str, float] = field(default_factory=lambda: _EMPTY)  # decayed GPU-seconds
    disruption_budgets: tuple[DisruptionBudget, ...] = ()
    recent_preemptions: int = 0  # victims preempted within policy.preemption_window_s before now
    # Estimated starts for still-pending jobs (a forward replay per flavor, a quarter of a busy cycle's cost).
    # The portal shows them; the trace simulator does not read them and turns them off.
    estimates: bool = True
    clusters: tuple[ClusterInfo, ...] = ()  # clusters not listed are active, unlabelled, cost_rank 0
    namespace_quotas: tuple[NamespaceQuotaLimit, ...] = ()  # namespace ResourceQuota refusals in force
    user_limits: tuple[UserLimit, ...] = ()  # per-member GPU limits; a member without one is not limited
    # How the jobs that pending jobs depend on ended ("succeeded", "failed", "cancelled"), for those that have.
    # A dependency neither here, pending nor running has not ended (awaiting approval, say): its end is unknown.
    ended: Mapping[int, str] = field(default_factory=lambda: _EMPTY)
    # Teams inside departments (``teams``): their quota splits, and each team's decayed GPU-seconds by
    # (department, team) for the fair-share tree. Empty: no department has teams, and nothing changes.
    team_quotas: tuple[TeamQuota, ...] = ()
    team_usage: Mapping[tuple[str, str], float] = field(default_factory=lambda: _EMPTY)
    # The calendar (``bookings``): GPUs booked ahead for their owners, and maintenance windows of nodes.
    bookings: tuple[Booking, ...] = ()
    maintenance: tuple[MaintenanceWindow, ...] = ()


# ---------------------------------------------------------------- decisions (the engine's output)


@dataclass(frozen=True, slots=True)
class Admission:
    job_id: int
    placement: tuple[str, ...]  # node name of each pod, in pod-index order (role by role for a job of roles)
    cluster: str = DEFAULT_CLUSTER
    borrowed: bool = False
    # Borrowed capacity that the job's bid won: its critical bid per GPU-hour (the lowest bid at which it would
    # still have been admitted, never more than its own bid; core.pricing). None: not borrowed, or it would have
    # won without bidding; the adapter charges the base price, which is also the floor (the reserve).
    price: int | None = None
    # A fractional job's shared GPU per pod of ``placement`` (device indices, ``fractions``); empty otherwise.
    devices: tuple[int, ...] = ()
    # On a cluster with topology levels, a gang that could not be placed as it preferred: the outermost level
    # its pods span ("topology.kubernetes.io/rack"); "" when compact (or when the cluster declares no levels).
    spread: str = ""


@dataclass(frozen=True, slots=True)
class Preemption:
    preemptor_id: int
    victim_ids: tuple[int, ...]
    reason: str  # "priority" (realtime needs room) or "reclaim" (lender takes back its nominal quota)
    message: str = ""


@dataclass(frozen=True, slots=True)
class Resize:
    """A running resizable job changes size at its next checkpoint (or when it answers its notice): ``placement``
    is the node of each of its GPU pods after the resize (a grow keeps the old pods first and adds the new ones
    after them; a shrink keeps a prefix). ``direction`` "up" or "down"; ``reason`` "idle" (it grows into GPUs
    no pending job can use), "for_job" (it shrinks so that job ``for_job`` can start). ``price``: the
    milli-credits per GPU-hour its grown GPUs are charged (the flavor's clearing price; None: the base price)."""

    job_id: int
    placement: tuple[str, ...]
    direction: str
    reason: str
    for_job: int | None = None
    price: int | None = None

    @property
    def pods(self) -> int:
        return len(self.placement)


@dataclass(frozen=True, slots=True)
class PendingReason:
    job_id: int
    code: str  # one of engine.reasons.CODES
    message: str  # one line, for a human
    detail: Mapping[str, object] = field(default_factory=lambda: _EMPTY)
    estimated_start: float | None = None  # None: unknown (we do not pretend)


@dataclass(frozen=True, slots=True)
class CycleResult:
    admissions: tuple[Admission, ...] = ()
    preemptions: tuple[Preemption, ...] = ()
    # Every job left pending, in the engine's pending order (``ordering.Scorer.order_key``): the queue order
    # the portal shows, the position of a job in its flavor's queue is its place among that flavor's here.
    pending: tuple[PendingReason, ...] = ()
    # per flavor, the highest price a borrowed winner pays this cycle (flavors whose bids decided something)
    clearing_prices: Mapping[str, int] = field(default_factory=lambda: _EMPTY)
    figures: Mapping[str, float] = field(default_factory=lambda: _EMPTY)
    resizes: tuple[Resize, ...] = ()  # running resizable jobs that grow or shrink (``resize``)
