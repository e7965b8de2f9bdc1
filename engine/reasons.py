"""Reason codes for pending jobs: the documented, closed set every pending job carries one of."""

QUEUED = "queued"  # not looked at yet (new, or the cycle has not run)
QUOTA_EXHAUSTED = "quota_exhausted"
BORROW_LIMIT = "borrow_limit"
NO_FITTING_NODE = "no_fitting_node"
NO_CAPACITY = "no_capacity"
WAITING_FOR_HIGHER_PRIORITY = "waiting_for_higher_priority"
RESERVED_FOR_HEAD = "reserved_for_head"
BUDGET_INSUFFICIENT = "budget_insufficient"
PREEMPTION_COOLDOWN = "preemption_cooldown"
PREEMPTION_RATE_LIMIT = "preemption_rate_limit"
DISRUPTION_BUDGET = "disruption_budget"
PREEMPTION_IN_PROGRESS = "preemption_in_progress"
UNKNOWN_FLAVOR = "unknown_flavor"
AWAITING_APPROVAL = "awaiting_approval"
CLUSTER_UNREACHABLE = "cluster_unreachable"
# the engine's own capacity and request reasons
EXCEEDS_CAPACITY = "exceeds_capacity"
QUOTA_LENT_OUT = "quota_lent_out"
INVALID_REQUEST = "invalid_request"
REALTIME_HEADROOM = "realtime_headroom"
# several clusters
NO_MATCHING_CLUSTER = "no_matching_cluster"  # no cluster has every label of the job's selector: never fits
CLUSTERS_UNAVAILABLE = "clusters_unavailable"  # every matching cluster is cordoned or draining: waits
# a data source the job mounts is declared on no cluster the job may run on
DATA_SOURCE_UNAVAILABLE = "data_source_unavailable"
# the department's namespace quota (a Kubernetes ResourceQuota) refused a request this size on every open cluster
NAMESPACE_QUOTA = "namespace_quota"
# a failed attempt is retried: the next one waits out its back-off before it may be admitted
RETRY_BACKOFF = "retry_backoff"
# the job's owner holds as many GPUs as their department allows one member at once (``UserLimit``)
USER_GPU_LIMIT = "user_gpu_limit"
# sweeps: held by its owner or an admin; waiting for the jobs it depends on (or they can no longer end as it
# asks: the portal then ends the job); its array already has its throttle's worth of tasks admitted
HELD = "held"
WAITING_FOR_DEPENDENCY = "waiting_for_dependency"
DEPENDENCY_NEVER_SATISFIED = "dependency_never_satisfied"
ARRAY_THROTTLED = "array_throttled"
NON_PREEMPTIBLE_NOMINAL = "non_preemptible_nominal"  # a job that may not be evicted borrows nothing
# it was given GPUs that a resizable job grew into: that job gives them back at its next checkpoint (``resize``)
WAITING_FOR_RESIZE = "waiting_for_resize"
# teams inside departments (``teams``): the team is at its own borrowing limit; or what the department could
# still give it is guaranteed to its other teams
TEAM_BORROW_LIMIT = "team_borrow_limit"
TEAM_QUOTA = "team_quota"
# the calendar (``bookings``): GPUs it could use are booked for others, or their nodes go into maintenance
BOOKED = "booked"
MAINTENANCE = "maintenance"

# Detail keys of the cluster reasons: the selector asked for, the matching clusters closed to admissions, and
# the cluster each capacity or quota wait is about.
DETAIL_SELECTOR = "selector"
DETAIL_UNAVAILABLE = "unavailable_clusters"  # {name: state} of the matching clusters closed to admissions
DETAIL_CLUSTER = "cluster"

CODES: dict[str, str] = {
    QUEUED: "Waiting for the next admission cycle.",
    QUOTA_EXHAUSTED: "The department's quota for this GPU type is in use and it cannot borrow enough for this job.",
    BORROW_LIMIT: "The department is at its borrowing limit for this GPU type.",
    NO_FITTING_NODE: "Enough GPUs are free in total, but no node (set) has them together (fragmentation).",
    NO_CAPACITY: "All GPUs of this type are in use.",
    WAITING_FOR_HIGHER_PRIORITY: "Jobs with a higher tier or score are ahead in the queue.",
    RESERVED_FOR_HEAD: "Free GPUs are reserved for a larger job at the head of the queue.",
    BUDGET_INSUFFICIENT: "The department has too few credits for this job's hold.",
    PREEMPTION_COOLDOWN: "Possible victims have run less than the minimum runtime.",
    PREEMPTION_RATE_LIMIT: "The preemption rate limit has been reached for now.",
    DISRUPTION_BUDGET: "A PodDisruptionBudget forbids evicting the possible victims.",
    PREEMPTION_IN_PROGRESS: "Victims are being evicted to make room for this job.",
    UNKNOWN_FLAVOR: "No node offers this GPU type.",
    AWAITING_APPROVAL: "A department admin must approve this job.",
    CLUSTER_UNREACHABLE: "The cluster API is unreachable; the job will be retried.",
    EXCEEDS_CAPACITY: "The job needs more GPUs (or a bigger gang) than this GPU type can ever offer.",
    QUOTA_LENT_OUT: "The department's guaranteed GPUs are lent out and cannot be reclaimed right now.",
    INVALID_REQUEST: "The job asks for no GPUs or no pods.",
    REALTIME_HEADROOM: "The last free GPUs are kept for realtime work until a running job can be preempted.",
    NO_MATCHING_CLUSTER: "No cluster has every label the job requires.",
    CLUSTERS_UNAVAILABLE: "Every cluster the job may run on is cordoned or draining.",
    DATA_SOURCE_UNAVAILABLE: "No cluster the job may run on has every data source it mounts.",
    NAMESPACE_QUOTA: "The department's namespace quota on the cluster refused a request this large; waiting "
                     "until the quota changes.",
    RETRY_BACKOFF: "The job's previous attempt failed and is retried after a back-off.",
    USER_GPU_LIMIT: "Its owner holds as many GPUs as the department allows one member at once.",
    HELD: "The job is held: it keeps its place in the queue but is not admitted until it is released.",
    WAITING_FOR_DEPENDENCY: "The job waits for the jobs it depends on to end.",
    DEPENDENCY_NEVER_SATISFIED: "A job it depends on ended in a way its condition excludes; it can never start.",
    ARRAY_THROTTLED: "Its array already runs as many tasks at once as its throttle allows.",
    NON_PREEMPTIBLE_NOMINAL: "A non-preemptible job starts only within its department's nominal quota, which is "
                             "in use.",
    WAITING_FOR_RESIZE: "Resizable jobs that grew into idle GPUs give them back to this job at their next "
                        "checkpoint.",
    TEAM_BORROW_LIMIT: "The job's team is at its borrowing limit for this GPU type.",
    TEAM_QUOTA: "The team's quota is in use and the department's idle GPUs are guaranteed to its other teams.",
    BOOKED: "The GPUs it could use are booked for others then (the calendar); it fits before the booking only "
            "with a shorter time limit.",
    MAINTENANCE: "The nodes it could use go into maintenance before its time limit would end (the calendar).",
}
