"""Budget endpoints: wallets, prices, ledger, reports (mounted under /api/v1/; the approvals inbox and a job's
cost are scheduling's: scheduling/api/approvals.py).

Interfaces only: they validate input, read through the tenancy gate (``restrict``/``get_or_404``: another
department's object is a 404, an object seen but not to be acted on a 403) and call quotas.services. Money is
integer milli-credits (mcr) everywhere.
"""

from __future__ import annotations

from datetime import datetime, time

from django.utils import timezone
from drf_spectacular.utils import extend_schema, extend_schema_field
from rest_framework import serializers, status
from rest_framework.generics import GenericAPIView
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api import idempotency_key
from portal.api.csv import CsvRowsRenderer
from portal.api.serializers import StrictSerializer, validated
from portal.errors import NotFound, ValidationFailed
from portal.models import Department, Membership
from portal.tenancy import ADMIN, CHANGE, VIEW, member, require_role
from quotas.models import (
    TIER_NAMES,
    Allowance,
    ApprovalRule,
    Flavor,
    LedgerEntry,
    LedgerKind,
    Price,
    RefillRule,
    Wallet,
)
from quotas.services import allowances, periodic, pricing, reports, rules, settlement, wallets

# ------------------------------------------------------------------------------------------ plumbing


def _department(request, slug: str, action=VIEW) -> Department:
    """The department the URL names, through the tenancy gate (404 unless visible, 403 unless allowed)."""
    return Department.objects.get_or_404(request.user, action, slug=slug)


def _wallet(request, slug: str, action=VIEW) -> Wallet:
    """The wallet of the department the URL names: 404 unless the department is visible or when it has no
    wallet, 403 unless the user may ``action`` it."""
    dept = _department(request, slug)
    return Wallet.objects.select_related("department").get_or_404(
        request.user, action, missing="This department has no wallet (its budget is not metered).", department=dept)


# ------------------------------------------------------------------------------------------ wallets


class WalletSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    available = serializers.IntegerField(read_only=True)

    class Meta:
        model = Wallet
        fields = ["department", "balance", "held", "available", "updated_at"]


class HoldSerializer(serializers.ModelSerializer):
    job_name = serializers.CharField(source="job.name", read_only=True)
    owner = serializers.CharField(source="user.username", read_only=True, default=None)
    flavor = serializers.CharField(source="flavor.name", read_only=True, default=None)
    amount = serializers.IntegerField(source="held_change")
    basis = serializers.SerializerMethodField()

    class Meta:
        model = LedgerEntry
        fields = ["job", "job_name", "attempt", "owner", "flavor", "gpus", "rate", "basis", "amount", "created_at"]

    def get_basis(self, entry) -> str | None:
        return (entry.data or {}).get("basis")


class RefillRuleSerializer(StrictSerializer):
    mode = serializers.ChoiceField(choices=RefillRule.MODES, default="fixed")
    amount = serializers.IntegerField(min_value=0, max_value=10**15)
    period = serializers.ChoiceField(choices=RefillRule.PERIODS, default="monthly")
    active = serializers.BooleanField(default=True)


class ApprovalRuleSerializer(StrictSerializer):
    gpus_above = serializers.IntegerField(min_value=0, max_value=100_000, allow_null=True, required=False)
    cost_above = serializers.IntegerField(min_value=0, max_value=10**15, allow_null=True, required=False)
    realtime = serializers.BooleanField(required=False)


def _rule_dict(rule, fields) -> dict | None:
    return None if rule is None else {f: getattr(rule, f) for f in fields}


class WalletCreateSerializer(StrictSerializer):
    department = serializers.SlugRelatedField(slug_field="slug", queryset=Department.objects.all())
    balance = serializers.IntegerField(min_value=0, max_value=10**15, default=0)


class WalletListView(GenericAPIView):
    """GET: wallets I may see (my department's; platform admins all). POST (platform admins): create one."""

    serializer_class = WalletSerializer

    def get_queryset(self):
        return Wallet.objects.restrict(self.request.user, VIEW).select_related("department").order_by(
            "department__slug")

    @extend_schema(operation_id="v1_wallets_list", responses=WalletSerializer(many=True))
    def get(self, request):
        member(request.user)
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(WalletSerializer(page, many=True).data)

    @extend_schema(request=WalletCreateSerializer, responses={201: WalletSerializer})
    def post(self, request):
        require_role(request.user, ADMIN)
        data = validated(WalletCreateSerializer, request.data)
        if Wallet.objects.filter(department=data["department"]).exists():
            raise ValidationFailed(fields={"department": [{"code": "exists",
                                                           "message": "This department already has a wallet."}]})
        wallet = wallets.wallet_create(department=data["department"], actor=request.user, balance=data["balance"])
        return Response(WalletSerializer(wallet).data, status=status.HTTP_201_CREATED)


class WalletBudgetSerializer(StrictSerializer):
    balance = serializers.IntegerField(min_value=0, max_value=10**15)
    comment = serializers.CharField(max_length=300, required=False, allow_blank=True, default="")


class WalletDetailView(APIView):
    """GET: balance, held, available, burn rate, open holds, refill and approval rules.
    PUT/PATCH (platform admins): set the budget (balance), recorded as an audited adjustment."""

    serializer_class = WalletBudgetSerializer

    def get(self, request, slug: str):
        wallet = _wallet(request, slug)
        holds = wallets.open_holds(wallet=wallet)
        dept = wallet.department
        body = WalletSerializer(wallet).data
        body.update(
            burn_rate=reports.burn_rate(wallet=wallet),
            holds=HoldSerializer(holds, many=True).data,
            refill_rule=_rule_dict(RefillRule.objects.filter(department=dept).first(), rules.RULE_FIELDS),
            approval_rule=_rule_dict(ApprovalRule.objects.filter(department=dept).first(),
                                     rules.APPROVAL_FIELDS),
        )
        return Response(body)

    def put(self, request, slug: str):
        dept = _department(request, slug, ADMIN)
        data = validated(WalletBudgetSerializer, request.data)
        wallets.wallet_set_balance(department=dept, balance=data["balance"], actor=request.user,
                                    comment=data["comment"])
        return Response(WalletSerializer(Wallet.objects.get(department=dept)).data)

    patch = put


class AdjustSerializer(StrictSerializer):
    amount = serializers.IntegerField(min_value=-(10**15), max_value=10**15)
    comment = serializers.CharField(max_length=300)


class LedgerLotSerializer(serializers.Serializer):
    """One lot of a resizable attempt: GPUs held on the same terms from the same moment (the admitted ones, or one
    grow's, which are always borrowed at the clearing price of the cycle that grew the job)."""

    gpus = serializers.IntegerField(help_text="GPUs of the lot.")
    rate = serializers.IntegerField(help_text="What the lot costs, in milli-credits per GPU-hour.")
    borrowed = serializers.BooleanField(
        help_text="Borrowed, preemptible capacity (a preemption by the portal refunds nothing of it), or inside the "
                  "department's nominal quota (a preemption by the portal refunds it in full).")
    since = serializers.DateTimeField(allow_null=True, help_text="When the lot was added (its admission or its "
                                      "grow); null on a resize entry.")
    gpu_seconds = serializers.IntegerField(allow_null=True, help_text="GPU-seconds the lot was charged for "
                                           "(settle and refund entries; null on older ones and on the others).")
    charged = serializers.IntegerField(allow_null=True, help_text="Milli-credits the lot was charged (settle and "
                                       "refund entries; its share of the charge when the charge was capped at the "
                                       "hold).")
    refunded = serializers.IntegerField(allow_null=True, help_text="Milli-credits the lot got back (settle and "
                                        "refund entries).")


class LedgerEntrySerializer(serializers.ModelSerializer):
    department = serializers.CharField(source="wallet.department.slug", read_only=True)
    # null for entries of no user (adjustments, refills), the platform as actor, or no flavor
    user = serializers.CharField(source="user.username", read_only=True, default=None, allow_null=True)
    actor = serializers.CharField(source="actor.username", read_only=True, default=None, allow_null=True)
    flavor = serializers.CharField(source="flavor.name", read_only=True, default=None, allow_null=True)
    lots = serializers.SerializerMethodField()

    class Meta:
        model = LedgerEntry
        fields = ["id", "created_at", "department", "kind", "amount", "held_change", "balance_after",
                  "held_after", "job", "attempt", "user", "flavor", "actor", "rate", "gpus", "gpu_seconds",
                  "outcome", "memo", "idempotency_key", "lots"]

    @extend_schema_field(LedgerLotSerializer(many=True, allow_null=True, help_text=(
        "A resizable attempt's GPUs lot by lot: on its settle and refund entries what each lot was charged and got "
        "back, on a resize entry the lots it holds from then on, on its hold the admitted lot; null on every other "
        "entry.")))
    def get_lots(self, entry) -> list[dict] | None:
        lots = settlement.entry_lots(entry)
        return None if lots is None else LedgerLotSerializer(lots, many=True).data


class WalletAdjustView(APIView):
    """POST (platform admins): add or take credits, with a comment (audited). Idempotency-Key supported."""

    serializer_class = AdjustSerializer

    @extend_schema(request=AdjustSerializer, responses={201: LedgerEntrySerializer})
    def post(self, request, slug: str):
        wallet = _wallet(request, slug, ADMIN)
        data = validated(AdjustSerializer, request.data)
        key = idempotency_key(request)
        entry = wallets.wallet_adjust(department=wallet.department, amount=data["amount"], actor=request.user,
                                       comment=data["comment"], key=wallets.adjust_key(wallet, key) if key else None)
        return Response(LedgerEntrySerializer(entry).data, status=status.HTTP_201_CREATED)


class RefillRuleView(APIView):
    """GET the department's refill rule; PUT (platform admins) to set it; DELETE to remove it."""

    serializer_class = RefillRuleSerializer

    def get(self, request, slug: str):
        dept = _department(request, slug)
        rule = RefillRule.objects.filter(department=dept).first()
        if rule is None:
            raise NotFound("No refill rule.")
        return Response(_rule_dict(rule, rules.RULE_FIELDS) | {"next_amount": periodic.refill_amount(rule=rule)})

    def put(self, request, slug: str):
        dept = _department(request, slug, ADMIN)
        data = validated(RefillRuleSerializer, request.data)
        rule = rules.refill_rule_set(department=dept, actor=request.user, **data)
        return Response(_rule_dict(rule, rules.RULE_FIELDS) | {"next_amount": periodic.refill_amount(rule=rule)})

    def delete(self, request, slug: str):
        rules.refill_rule_delete(department=_department(request, slug, ADMIN), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class ApprovalRuleView(APIView):
    """GET the department's approval rule; PUT (its department admins or platform admins) to set it."""

    serializer_class = ApprovalRuleSerializer

    def get(self, request, slug: str):
        dept = _department(request, slug)
        rule = ApprovalRule.objects.filter(department=dept).first()
        return Response(_rule_dict(rule, rules.APPROVAL_FIELDS) or {"gpus_above": None, "cost_above": None,
                                                                       "realtime": False})

    def put(self, request, slug: str):
        dept = Department.objects.get_or_404(request.user, CHANGE, slug=slug,
                                             message="Only department admins can set approval rules.")
        data = validated(ApprovalRuleSerializer, request.data)
        rule = rules.approval_rule_set(department=dept, actor=request.user, **data)
        return Response(_rule_dict(rule, rules.APPROVAL_FIELDS))

    patch = put


class AllowanceSerializer(StrictSerializer):
    limit = serializers.IntegerField(min_value=0, max_value=10**15)
    period = serializers.ChoiceField(choices=Allowance.PERIODS, default="monthly")


class AllowanceOutSerializer(serializers.Serializer):
    user = serializers.CharField()
    department = serializers.CharField()
    limit = serializers.IntegerField()
    period = serializers.ChoiceField(choices=Allowance.PERIODS)
    used = serializers.IntegerField(help_text="mcr committed this period, queued jobs included")


class AllowanceListView(APIView):
    """GET: allowances with what each user used this period: department admins their department's,
    platform admins all, researchers their own."""

    serializer_class = AllowanceSerializer

    @extend_schema(responses=AllowanceOutSerializer(many=True))
    def get(self, request):
        member(request.user)
        qs = (Allowance.objects.restrict(request.user, VIEW).select_related("user", "wallet__department")
              .order_by("wallet__department__slug", "user__username", "id"))
        return Response([{"user": a.user.username, "department": a.wallet.department.slug, "limit": a.limit,
                          "period": a.period, "used": allowances.allowance_used(allowance=a)} for a in qs])


class AllowanceDetailView(APIView):
    """PUT/DELETE (department admins of the user's department, platform admins): a user's allowance."""

    serializer_class = AllowanceSerializer

    def _target(self, request, username: str):
        """The member the URL names: 404 unless in the user's view, 403 unless the user is their admin."""
        return Membership.objects.select_related("user").get_or_404(
            request.user, CHANGE, user__username=username, missing="No such member.",
            message="Only department admins can set allowances.").user

    def put(self, request, username: str):
        user = self._target(request, username)
        data = validated(AllowanceSerializer, request.data)
        a = allowances.allowance_set(user=user, limit=data["limit"], period=data["period"], actor=request.user)
        return Response({"user": username, "limit": a.limit, "period": a.period})

    def delete(self, request, username: str):
        allowances.allowance_set(user=self._target(request, username), limit=None, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


# ------------------------------------------------------------------------------------------ prices


class PriceSerializer(serializers.ModelSerializer):
    flavor = serializers.SlugRelatedField(slug_field="name", read_only=True)

    class Meta:
        model = Price
        fields = ["id", "flavor", "tier", "per_gpu_hour", "per_core_hour", "per_gib_hour", "updated_at"]


class PriceInputSerializer(StrictSerializer):
    """A GPU flavor's price per GPU-hour, or a CPU pool's per core-hour and GiB-hour (mcr), per tier."""

    flavor = serializers.SlugRelatedField(slug_field="name", queryset=Flavor.objects.all())
    tier = serializers.ChoiceField(choices=TIER_NAMES)
    per_gpu_hour = serializers.IntegerField(min_value=0, max_value=10**12, required=False,
                                            help_text="a GPU flavor's (required there; a CPU pool has none)")
    per_core_hour = serializers.IntegerField(min_value=0, max_value=10**12, required=False,
                                             help_text="a CPU pool's, per core-hour")
    per_gib_hour = serializers.IntegerField(min_value=0, max_value=10**12, required=False,
                                            help_text="a CPU pool's, per GiB-hour of memory")

    def validate(self, attrs):
        flavor, errors = attrs.get("flavor"), {}
        cpu = [k for k in ("per_core_hour", "per_gib_hour") if k in attrs]
        if flavor is None:  # (the lab file's prices, read under their flavor: it checks the kind itself)
            return attrs
        if flavor.is_cpu:
            if attrs.get("per_gpu_hour"):
                errors["per_gpu_hour"] = [serializers.ErrorDetail(
                    f"{flavor.name} is a CPU pool: price it per core-hour and GiB-hour.", code="cpu_pool")]
            elif not cpu:
                errors["per_core_hour"] = [serializers.ErrorDetail(
                    "A CPU pool's price: per_core_hour and/or per_gib_hour.", code="required")]
        else:
            for k in cpu:
                errors[k] = [serializers.ErrorDetail(
                    f"{flavor.name} is a GPU flavor: its price is per GPU-hour.", code="gpu_flavor")]
            if "per_gpu_hour" not in attrs:
                errors["per_gpu_hour"] = [serializers.ErrorDetail("This field is required.", code="required")]
        if errors:
            raise serializers.ValidationError(errors)
        attrs.setdefault("per_gpu_hour", 0)
        return attrs


class PriceListView(GenericAPIView):
    """GET (members): base prices per flavor and tier. POST (platform admins): set one (create or change)."""

    serializer_class = PriceSerializer

    @extend_schema(operation_id="v1_prices_list", responses=PriceSerializer(many=True))
    def get(self, request):
        member(request.user)
        qs = Price.objects.select_related("flavor").order_by("flavor__name", "tier")
        page = self.paginate_queryset(qs)
        return self.get_paginated_response(PriceSerializer(page, many=True).data)

    @extend_schema(request=PriceInputSerializer, responses={200: PriceSerializer, 201: PriceSerializer})
    def post(self, request):
        require_role(request.user, ADMIN)
        data = validated(PriceInputSerializer, request.data)
        price, created = pricing.price_set(actor=request.user, **data)
        return Response(PriceSerializer(price).data, status=status.HTTP_201_CREATED if created else 200)


class PriceDetailView(APIView):
    serializer_class = PriceSerializer

    def _price(self, request, pk: int) -> Price:
        """Prices are the same for every department: any member sees them, platform admins change them."""
        member(request.user)
        price = Price.objects.select_related("flavor").filter(pk=pk).first()
        if price is None:
            raise NotFound("No such price.")
        return price

    def get(self, request, pk: int):
        return Response(PriceSerializer(self._price(request, pk)).data)

    # flavor and tier default to the price's own: every field is optional, for PUT as for PATCH
    @extend_schema(request=PriceInputSerializer(partial=True), responses=PriceSerializer)
    def patch(self, request, pk: int):
        price = self._price(request, pk)
        require_role(request.user, ADMIN)
        data = validated(PriceInputSerializer, {"flavor": price.flavor.name, "tier": price.tier,
                                                **request.data} if isinstance(request.data, dict) else request.data)
        price, _ = pricing.price_set(actor=request.user, **data)
        return Response(PriceSerializer(price).data)

    put = patch

    def delete(self, request, pk: int):
        price = self._price(request, pk)
        require_role(request.user, ADMIN)
        pricing.price_delete(price=price, actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


# ------------------------------------------------------------------------------------------ ledger


class LedgerFilterSerializer(StrictSerializer):
    department = serializers.SlugField(required=False)
    job = serializers.IntegerField(min_value=1, required=False)
    kind = serializers.ChoiceField(choices=LedgerKind.values, required=False)
    since = serializers.DateTimeField(required=False)
    until = serializers.DateTimeField(required=False)
    page = serializers.IntegerField(min_value=1, required=False)
    page_size = serializers.IntegerField(min_value=1, max_value=500, required=False)


class LedgerListView(GenericAPIView):
    """GET: ledger entries I may see (my department's; platform admins all), newest first, filterable."""

    serializer_class = LedgerEntrySerializer

    @extend_schema(parameters=[LedgerFilterSerializer], responses=LedgerEntrySerializer(many=True))
    def get(self, request):
        member(request.user)
        f = validated(LedgerFilterSerializer, request.query_params.dict())
        qs = LedgerEntry.objects.restrict(request.user, VIEW).select_related("wallet__department", "user", "actor",
                                                                            "flavor")
        if "department" in f:
            qs = qs.filter(wallet__department=_department(request, f["department"]))
        if "job" in f:
            qs = qs.filter(job_id=f["job"])
        if "kind" in f:
            qs = qs.filter(kind=f["kind"])
        if "since" in f:
            qs = qs.filter(created_at__gte=f["since"])
        if "until" in f:
            qs = qs.filter(created_at__lt=f["until"])
        page = self.paginate_queryset(qs.order_by("-created_at", "-id"))
        return self.get_paginated_response(LedgerEntrySerializer(page, many=True).data)


# ------------------------------------------------------------------------------------------ reports


class CSVRenderer(CsvRowsRenderer):
    columns = reports.REPORT_COLUMNS


class ReportFilterSerializer(StrictSerializer):
    group_by = serializers.CharField(required=False, default="department")
    period = serializers.ChoiceField(choices=("day", "month"), default="month")
    since = serializers.DateField(required=False)
    until = serializers.DateField(required=False)
    department = serializers.SlugField(required=False)
    format = serializers.ChoiceField(choices=("json", "csv"), required=False)

    def validate_group_by(self, value):
        parts = [p.strip() for p in value.split(",") if p.strip()]
        bad = [p for p in parts if p not in reports.GROUPS]
        if bad:
            raise serializers.ValidationError(f"Unknown grouping {', '.join(bad)}; use "
                                              f"{', '.join(reports.GROUPS)}.", code="invalid_choice")
        return list(dict.fromkeys(parts))

    def validate(self, attrs):
        if attrs.get("since") and attrs.get("until") and attrs["until"] <= attrs["since"]:
            raise serializers.ValidationError({"until": ["Must be after since."]})
        return attrs


class UsageRowSerializer(serializers.Serializer):
    period = serializers.CharField()
    department = serializers.CharField(allow_null=True)
    team = serializers.CharField(allow_null=True, help_text="with group_by=team: the team its jobs were "
                                 "submitted in (null: no team)")
    user = serializers.CharField(allow_null=True)
    flavor = serializers.CharField(allow_null=True)
    gpu_hours = serializers.FloatField()
    charged_mcr = serializers.IntegerField()
    refunded_mcr = serializers.IntegerField()
    net_mcr = serializers.IntegerField()
    attempts = serializers.IntegerField()
    preemptions = serializers.IntegerField()
    measured_gpu_hours = serializers.FloatField(help_text="GPU-hours of the settled attempts whose GPU use was measured")
    used_gpu_hours = serializers.FloatField(help_text="their mean busy GPUs (DCGM utilisation) x the time held")
    efficiency = serializers.FloatField(allow_null=True, help_text="used / measured; null when nothing was measured")


class UsageReportSerializer(serializers.Serializer):
    group_by = serializers.ListField(child=serializers.CharField())
    period = serializers.CharField()
    rows = UsageRowSerializer(many=True)


class UsageReportView(APIView):
    """GET /reports/usage?group_by=department,team,user,flavor&period=day|month&since=&until=&department=
    &format=csv: GPU-hours, credits charged, refunds, preemptions; scoped by tenancy."""

    serializer_class = ReportFilterSerializer

    renderer_classes = [JSONRenderer, CSVRenderer]

    def handle_exception(self, exc):
        response = super().handle_exception(exc)
        self.request.accepted_renderer = JSONRenderer()  # errors keep the one JSON shape, even for ?format=csv
        self.request.accepted_media_type = "application/json"
        return response

    def options(self, request, *args, **kwargs):
        response = super().options(request, *args, **kwargs)
        request.accepted_renderer = JSONRenderer()  # the metadata is a JSON object, never a CSV table
        request.accepted_media_type = "application/json"
        return response

    @extend_schema(parameters=[ReportFilterSerializer],
                   responses={(200, "application/json"): UsageReportSerializer,
                              (200, "text/csv"): {"type": "string", "description": "one row per group"}})
    def get(self, request):
        member(request.user)
        f = validated(ReportFilterSerializer, request.query_params.dict())
        if f.get("department"):
            _department(request, f["department"])  # the gate first; the report scopes its rows the same way
        tz = timezone.get_current_timezone()
        since = datetime.combine(f["since"], time.min, tzinfo=tz) if f.get("since") else None
        until = datetime.combine(f["until"], time.min, tzinfo=tz) if f.get("until") else None
        rows = reports.usage_report(entries=LedgerEntry.objects.restrict(request.user, VIEW), group_by=f["group_by"], period=f["period"], since=since,
                                     until=until, department=f.get("department"))
        if getattr(request.accepted_renderer, "format", "") == "csv":
            return Response(rows, headers={"Content-Disposition": 'attachment; filename="usage.csv"'})
        return Response({"group_by": f["group_by"], "period": f["period"], "rows": rows})

