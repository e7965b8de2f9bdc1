"""The approvals inbox and the decision on a waiting job (mounted under /api/v1/approvals/), and a job's cost
(/api/v1/jobs/<id>/cost). Scheduling's endpoints: they read jobs through the tenancy gate, decide through
``scheduling.services.job_approvals`` and ask budgets (``quotas.budgets``) for the money."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.generics import GenericAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.serializers import StrictSerializer, validated
from portal.tenancy import APPROVE, VIEW, require_role
from quotas import budgets
from scheduling.api.serializers import JobSerializer
from scheduling.models import Job
from scheduling.selectors import approvable_job, approving_team, pending_approvals
from scheduling.services import job_approvals

# ------------------------------------------------------------------------------------------ approvals


class PendingJobSerializer(JobSerializer):
    """A job waiting for approval: the jobs list's fields an approver decides on, its reason and its quote."""

    estimated_cost = serializers.SerializerMethodField()

    class Meta(JobSerializer.Meta):
        fields = ["id", "name", "owner", "department", "flavor", "gpus", "pods", "tier", "urgency", "max_runtime_s",
                  "bid", "reason_message", "submitted_at", "estimated_cost"]
        read_only_fields = fields

    def get_estimated_cost(self, job) -> int:
        prices = self.context.get("prices")
        return budgets.estimated_cost(job=job, prices=prices)


class ApprovalListView(GenericAPIView):
    """GET (department admins): the approvals inbox, oldest first."""

    serializer_class = PendingJobSerializer

    @extend_schema(responses=PendingJobSerializer(many=True))  # a page of them, as the ledger
    def get(self, request):
        if approving_team(request.user) is None:  # (a team admin's inbox: their team's jobs)
            require_role(request.user, APPROVE, "Only department admins and team admins have an approvals inbox.")
        page = self.paginate_queryset(pending_approvals(request.user))
        prices = budgets.read_prices()
        return self.get_paginated_response(PendingJobSerializer(page, many=True, context={"prices": prices}).data)


class DecisionSerializer(StrictSerializer):
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class ApprovalDecisionView(APIView):
    """POST /approvals/<job>/approve | reject {"comment": "..."} (a comment is required to reject)."""

    serializer_class = DecisionSerializer

    decision = "approve"

    def post(self, request, pk: int):
        job = approvable_job(request.user, pk, message="Only a department admin of the job's department (or a team "
                                                       "admin of its team) can approve or reject it.")
        data = validated(DecisionSerializer, request.data)
        if self.decision == "approve":
            job = job_approvals.job_approve(user=request.user, job=job, comment=data["comment"])
        else:
            job = job_approvals.job_reject(user=request.user, job=job, comment=data["comment"])
        return Response({"id": job.pk, "state": job.state, "decision": job.approval.decision,
                         "comment": job.approval.comment, "actor": request.user.get_username()})


class JobCostSerializer(serializers.Serializer):
    metered = serializers.BooleanField()
    hold = serializers.IntegerField()
    rate = serializers.IntegerField(allow_null=True)
    basis = serializers.CharField(allow_null=True)
    cost_to_date = serializers.IntegerField()
    charged = serializers.IntegerField()
    refunded = serializers.IntegerField()
    final = serializers.IntegerField(allow_null=True)
    attempts = serializers.DictField()


class JobCostView(APIView):
    """GET /jobs/<id>/cost: the job's hold, cost to date and final charge (scoped like the job)."""

    serializer_class = JobCostSerializer

    def get(self, request, pk: int):
        job = Job.objects.get_or_404(request.user, VIEW, pk=pk)
        return Response(budgets.job_cost(job=job))
