"""The whole queue (``GET /api/v1/queue``): every queued job of every department, each flavor's in the engine's
order, readable by every member (like Slurm's ``squeue``).

Every row says where the job stands: its position in its flavor's queue, flavor, tier, size (GPUs and pods),
how long it has waited, its estimated start and its reason code. A row of the reader's own department (every
row, for a platform admin) also names the job: id, name, owner and the reason's message. Another department's
job shows its department and nothing else of it: its name, owner, image, command, environment and the
reason's message and detail (which can name credits or other jobs) are never read for the page, let alone
shown (``scheduling.selectors.QUEUE_FIELDS``).
"""

from __future__ import annotations

from django.utils import timezone
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import generics, serializers

from portal.errors import ValidationFailed
from portal.tenancy import VIEW, member
from quotas.models import Flavor
from scheduling.models import Job
from scheduling.selectors import whole_queue

# The fields of a row every member sees, and the ones only the job's department (and platform admins) see.
EVERYONE = ("position", "flavor", "department", "tier", "gpus", "pods", "waiting_s", "estimated_start", "reason",
            "own")
OWN_DEPARTMENT = ("id", "name", "owner", "team", "reason_message")


class QueueEntrySerializer(serializers.Serializer):
    position = serializers.IntegerField(help_text="1 = next in this flavor's queue (the engine's order)")
    flavor = serializers.CharField()
    department = serializers.CharField(help_text="The job's department (its slug)")
    tier = serializers.CharField()
    gpus = serializers.IntegerField(help_text="GPUs of all its pods")
    pods = serializers.IntegerField()
    waiting_s = serializers.IntegerField(help_text="Seconds since submission")
    estimated_start = serializers.DateTimeField(allow_null=True, help_text="null: unknown (never pretended)")
    reason = serializers.CharField(help_text="Why it waits: a reason code (docs/scheduling.md)")
    own = serializers.BooleanField(help_text="Whether you may see the job itself (your department's)")
    id = serializers.IntegerField(required=False, help_text="Only for your own department's jobs")
    name = serializers.CharField(required=False, help_text="Only for your own department's jobs")
    owner = serializers.CharField(required=False, help_text="Only for your own department's jobs")
    team = serializers.CharField(required=False, allow_null=True,
                                 help_text="Only for your own department's jobs: its team (null: none)")
    reason_message = serializers.CharField(required=False, help_text="Only for your own department's jobs")

    def to_representation(self, job: Job) -> dict:
        row = queue_row(job, user=self.context["request"].user, now=self.context["now"])
        if row["estimated_start"] is not None:
            row["estimated_start"] = serializers.DateTimeField().to_representation(row["estimated_start"])
        return row


def queue_row(job: Job, *, user, now) -> dict:
    """One row of the whole queue as ``user`` may see it (the API and the page both show this): the job's
    name, owner and reason message only when ``user`` may see the job itself."""
    row = {
        "position": job.position, "flavor": job.flavor.name, "department": job.department.slug, "tier": job.tier,
        "gpus": job.total_gpus, "pods": job.pods, "waiting_s": max(0, int((now - job.submitted_at).total_seconds())),
        "estimated_start": job.estimated_start, "reason": job.reason_code or "queued",
        "own": Job.objects.permits(user, job, VIEW),
    }
    if row["own"]:
        row.update(id=job.pk, name=job.name, owner=job.owner.username, reason_message=job.reason_message,
                   team=job.team.slug if job.team_id else None)
    return row


class QueueView(generics.ListAPIView):
    serializer_class = QueueEntrySerializer

    def get_queryset(self):
        flavor = self.request.query_params.get("flavor") or None
        if flavor is not None and not Flavor.objects.filter(name=flavor).exists():
            raise ValidationFailed(f"No flavor {flavor}.", fields={"flavor": [
                {"code": "invalid", "message": f"No flavor {flavor}; see GET /api/v1/flavors."}]})
        return whole_queue(flavor=flavor)

    def get_serializer_context(self):
        return {**super().get_serializer_context(), "now": timezone.now()}

    @extend_schema(
        summary="The whole queue, every department's, in the engine's order",
        description=(
            "Every queued job of every department, each flavor's queue in the engine's order (the order and "
            "positions of `GET /api/v1/jobs/{id}`'s `queue_position`), by flavor name. Every member may read it. "
            "Another department's job shows only its department and size (with its position, tier, wait, "
            "estimated start and reason code); `id`, `name`, `owner` and `reason_message` are given for your own "
            "department's jobs (`own`: true) alone. Jobs submitted since the last admission cycle come after the "
            "ones it ordered, by submission."),
        parameters=[OpenApiParameter("flavor", str, description="Only this flavor's queue (400 if unknown)")],
    )
    def get(self, request, *args, **kwargs):
        member(request.user)
        return super().get(request, *args, **kwargs)
