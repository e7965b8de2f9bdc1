"""Jobs, clusters, the policy and the preemption trail in the Django admin: read-only (see portal/admin.py
for why; a job changes state only through ``scheduling.services.jobs.transition``)."""

from django.contrib import admin

from portal.admin import ReadOnlyAdmin, ReadOnlyInline
from scheduling.models import (
    Approval,
    AttemptLog,
    Booking,
    Cluster,
    ClusterSample,
    DepartmentSample,
    Job,
    JobArray,
    JobDependency,
    JobEvent,
    JobRole,
    JobTemplate,
    MaintenanceWindow,
    NamespaceQuotaRefusal,
    Node,
    PolicyProposal,
    PolicyVersion,
    Preemption,
    PreemptionVictim,
    SessionGrant,
    SessionImage,
    SimPod,
    TunerSettings,
)


@admin.register(SessionImage)
class SessionImageAdmin(ReadOnlyAdmin):
    """The lab's session images: declared through PUT /api/v1/session-images/<name>, which audits the change."""

    list_display = ("name", "label", "image", "port", "readiness_path")
    search_fields = ("name", "image")


@admin.register(Cluster)
class ClusterAdmin(ReadOnlyAdmin):
    list_display = ("name", "backend", "is_default", "reachable", "last_sync_at", "last_error")
    list_filter = ("backend", "reachable")
    search_fields = ("name",)


@admin.register(Node)
class NodeAdmin(ReadOnlyAdmin):
    list_display = ("name", "cluster", "flavor", "gpus", "used_by_others", "schedulable", "updated_at")
    list_filter = ("cluster", "flavor", "schedulable")
    search_fields = ("name",)
    list_select_related = ("cluster", "flavor")


class JobEventInline(ReadOnlyInline):
    model = JobEvent
    fields = ("at", "attempt", "kind", "from_state", "to_state", "reason_code", "message", "actor")
    readonly_fields = fields


@admin.register(Job)
class JobAdmin(ReadOnlyAdmin):
    list_display = ("id", "name", "owner", "department", "state", "tier", "flavor", "gpus_per_pod", "pods", "attempt",
                    "submitted_at", "reason_code")
    list_filter = ("state", "tier", "department", "flavor", "borrowed")
    search_fields = ("name", "owner__username", "department__slug", "reason_code", "image")
    date_hierarchy = "submitted_at"
    list_select_related = ("owner", "department", "flavor")
    inlines = (JobEventInline,)


@admin.register(JobEvent)
class JobEventAdmin(ReadOnlyAdmin):
    list_display = ("at", "job", "attempt", "kind", "from_state", "to_state", "reason_code", "message")
    list_filter = ("kind", "to_state")
    search_fields = ("job__name", "reason_code", "message")
    list_select_related = ("job",)


@admin.register(PolicyVersion)
class PolicyVersionAdmin(ReadOnlyAdmin):
    list_display = ("version", "author", "created_at", "comment")
    search_fields = ("comment", "author__username")


@admin.register(PolicyProposal)
class PolicyProposalAdmin(ReadOnlyAdmin):
    """The policy tuner's runs: applied or dismissed on the policy page or through the API, which audits it."""

    list_display = ("id", "created_at", "trigger", "status", "base_version", "applied_version", "replays")
    list_filter = ("status", "trigger")
    search_fields = ("reason",)


@admin.register(Booking)
class BookingAdmin(ReadOnlyAdmin):
    """GPUs booked ahead: created, edited and cancelled on the calendar or through the API, which check each
    against the capacity and the other windows and audit it."""

    list_display = ("id", "department", "cluster", "flavor", "gpus", "start", "end", "purpose", "cancelled_at")
    list_filter = ("cluster", "flavor")
    search_fields = ("purpose", "department__slug")


@admin.register(MaintenanceWindow)
class MaintenanceWindowAdmin(ReadOnlyAdmin):
    list_display = ("id", "cluster", "start", "end", "reason", "cancelled_at")
    list_filter = ("cluster",)
    search_fields = ("reason",)


@admin.register(TunerSettings)
class TunerSettingsAdmin(ReadOnlyAdmin):
    list_display = ("id", "updated_at", "updated_by")


class VictimInline(ReadOnlyInline):
    model = PreemptionVictim
    fields = ("job", "attempt", "status", "gpu_seconds_lost", "eviction_requested_at", "evicted_at")
    readonly_fields = fields


@admin.register(Preemption)
class PreemptionAdmin(ReadOnlyAdmin):
    list_display = ("id", "decided_at", "reason", "preemptor", "policy_version", "message")
    list_filter = ("reason",)
    search_fields = ("message", "preemptor__name")
    date_hierarchy = "decided_at"
    inlines = (VictimInline,)


@admin.register(PreemptionVictim)
class PreemptionVictimAdmin(ReadOnlyAdmin):
    list_display = ("preemption", "job", "attempt", "status", "gpu_seconds_lost", "evicted_at", "requeued_at")
    list_filter = ("status",)
    search_fields = ("job__name",)
    list_select_related = ("preemption", "job")


@admin.register(SimPod)
class SimPodAdmin(ReadOnlyAdmin):
    list_display = ("name", "namespace", "cluster", "job_id", "attempt", "phase", "node", "gated")
    list_filter = ("phase", "gated", "cluster")
    search_fields = ("name", "namespace", "node")


@admin.register(AttemptLog)
class AttemptLogAdmin(ReadOnlyAdmin):
    list_display = ("job", "attempt", "truncated", "kept_at")
    list_filter = ("truncated",)
    search_fields = ("job__name", "job__department__slug")
    exclude = ("text",)  # a job's log is read on its Logs page, through the tenancy gate
    list_select_related = ("job",)


@admin.register(ClusterSample)
class ClusterSampleAdmin(ReadOnlyAdmin):
    list_display = ("at", "flavor", "total_gpus", "busy_gpus", "free_gpus", "queued", "preemptions")
    list_filter = ("flavor",)
    search_fields = ("flavor__name",)
    date_hierarchy = "at"
    list_select_related = ("flavor",)


@admin.register(DepartmentSample)
class DepartmentSampleAdmin(ReadOnlyAdmin):
    list_display = ("at", "department", "flavor", "nominal", "busy_gpus", "borrowed_gpus", "lent_gpus",
                    "queued_jobs")
    list_filter = ("department", "flavor")
    search_fields = ("department__slug",)
    date_hierarchy = "at"
    list_select_related = ("department", "flavor")


@admin.register(NamespaceQuotaRefusal)
class NamespaceQuotaRefusalAdmin(ReadOnlyAdmin):
    list_display = ("job", "attempt", "cluster", "namespace", "total_gpus", "step", "refused_at", "expires_at", "cleared_at")
    list_filter = ("cluster",)
    search_fields = ("job__name", "namespace")
    list_select_related = ("job", "cluster")


@admin.register(Approval)
class ApprovalAdmin(ReadOnlyAdmin):
    list_display = ("job", "decision", "actor", "decided_at", "reason")
    list_filter = ("decision",)
    search_fields = ("job__name", "actor__username", "comment", "reason")
    list_select_related = ("job", "actor")


@admin.register(JobTemplate)
class JobTemplateAdmin(ReadOnlyAdmin):
    list_display = ("name", "scope", "department", "owner", "updated_at")
    list_filter = ("scope",)
    search_fields = ("name", "department__slug", "owner__username")
    list_select_related = ("department", "owner")


@admin.register(SessionGrant)
class SessionGrantAdmin(ReadOnlyAdmin):
    """Connections granted to sessions' owners; the code's and the cookie's hashes are left out of every view."""

    list_display = ("job", "user", "created_at", "exchanged_at", "expires_at", "last_seen_at")
    exclude = ("code_hash", "token_hash")
    search_fields = ("job__name", "user__username")
    list_select_related = ("job", "user")


@admin.register(JobArray)
class JobArrayAdmin(ReadOnlyAdmin):
    list_display = ("id", "name", "department", "owner", "indices", "size", "throttle", "submitted_at")
    search_fields = ("name", "department__slug", "owner__username")
    list_select_related = ("department", "owner")


@admin.register(JobDependency)
class JobDependencyAdmin(ReadOnlyAdmin):
    list_display = ("job", "condition", "on_job", "on_array")
    list_filter = ("condition",)
    search_fields = ("job__name",)
    list_select_related = ("job", "on_job", "on_array")


@admin.register(JobRole)
class JobRoleAdmin(ReadOnlyAdmin):
    list_display = ("job", "index", "name", "pods", "gpus_per_pod", "cpu_millicores", "memory_mib", "flavor",
                    "failure_policy")
    list_filter = ("failure_policy", "flavor")
    search_fields = ("job__name", "name", "image")
    list_select_related = ("job", "flavor")
