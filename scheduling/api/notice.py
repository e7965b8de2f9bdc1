"""A job's answer to its notice of preemption (mounted under /api/v1/): ``POST /jobs/{id}/checkpoint-written``.

Called from inside the job's pods, with the attempt's own credential (``Authorization: Bearer
$PORTAL_JOB_TOKEN``), never a member's: the portal's tokens and log-ins are not read here at all. Without the
attempt's credential (none, a member's token, another job's or a past attempt's) it answers 404, as for a job
that does not exist, so the route tells nobody which jobs exist. Interfaces only: the service decides."""

from __future__ import annotations

from drf_spectacular.utils import OpenApiResponse, extend_schema
from rest_framework import serializers
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.errors import Conflict, NotFound
from scheduling.services import notice, resizes

NOT_FOUND = "No such job, or no credential of its current attempt."


class AnswerOutSerializer(serializers.Serializer):
    job = serializers.IntegerField()
    attempt = serializers.IntegerField()
    preemption = serializers.IntegerField(allow_null=True, help_text="null: the answer was to a resize")
    checkpoint_at = serializers.DateTimeField()
    evict_at = serializers.DateTimeField(allow_null=True,
                                         help_text="the notice's end; the eviction is asked for now instead")
    resize_to = serializers.IntegerField(allow_null=True, help_text="a resizable job: the size it goes to now "
                                                                    "(null: the answer was to a preemption)")


class CheckpointWrittenView(APIView):
    """POST (the job's own pods, with ``PORTAL_JOB_TOKEN``): "checkpoint written": the eviction its notice
    announced goes ahead now, or, for a resizable job told of a resize, the resize. 409 when nothing waits for
    its answer (no notice was sent, its eviction or its resize already began)."""

    authentication_classes: tuple = ()  # the attempt's credential is read below, never a member's
    permission_classes = (AllowAny,)

    @extend_schema(request=None, responses={200: AnswerOutSerializer, 404: OpenApiResponse(description=NOT_FOUND),
                                            409: OpenApiResponse(description="no notice in force")})
    def post(self, request, pk: str):
        scheme, _, token = (request.headers.get("Authorization") or "").partition(" ")
        who = notice.token_attempt(token.strip()) if scheme.lower() == "bearer" else None
        if who is None or who[0] != int(pk):
            raise NotFound(NOT_FOUND)
        job_id, attempt = who
        if not notice.attempt_is_current(job_id=job_id, attempt=attempt):
            raise NotFound(NOT_FOUND)
        try:
            victim = notice.checkpoint_written(job_id=job_id, attempt=attempt)
        except notice.NoNotice as exc:
            rz = resizes.checkpoint_written(job_id=job_id, attempt=attempt)
            if rz is None:
                raise Conflict(str(exc)) from None
            return Response({"job": job_id, "attempt": attempt, "preemption": None,
                             "checkpoint_at": rz["answered_at"], "evict_at": None, "resize_to": rz["to"]})
        return Response({"job": job_id, "attempt": attempt, "preemption": victim.preemption_id,
                         "checkpoint_at": victim.checkpoint_at, "evict_at": victim.notice_ends_at,
                         "resize_to": None})
