"""The calendar's endpoints: bookings (a department's members read its own, its admin books within its quota,
platform admins any), maintenance windows (everyone reads, platform admins declare), and the week everyone may
read within tenancy (``/calendar``: other departments' bookings as capacity booked by "another department")."""

from __future__ import annotations

from datetime import timedelta

from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.serializers import StrictSerializer, validated
from portal.errors import Forbidden, NotFound, ValidationFailed
from portal.models import Department, Team
from portal.tenancy import ADMIN, member, require_role
from quotas.models import Flavor
from scheduling import selectors
from scheduling.models import Booking, Cluster, MaintenanceWindow, label_problems
from scheduling.services import calendar


class BookingSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    team = serializers.SlugRelatedField(slug_field="slug", read_only=True, allow_null=True)
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    flavor = serializers.SlugRelatedField(slug_field="name", read_only=True)
    users = serializers.SerializerMethodField()
    cancelled = serializers.SerializerMethodField()

    class Meta:
        model = Booking
        fields = ["id", "department", "team", "users", "cluster", "flavor", "gpus", "start", "end", "purpose", "created_at",
                  "cancelled", "cancelled_at"]
        read_only_fields = fields

    def get_users(self, b) -> list[str]:
        return sorted(u.username for u in b.users.all())

    def get_cancelled(self, b) -> bool:
        return b.cancelled_at is not None


class BookingFieldsSerializer(StrictSerializer):
    gpus = serializers.IntegerField(min_value=1, max_value=100_000)
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    purpose = serializers.CharField(max_length=120)
    users = serializers.ListField(child=serializers.CharField(max_length=150), required=False, max_length=500)


class BookingCreateSerializer(BookingFieldsSerializer):
    department = serializers.SlugField(required=False, help_text="default: your own")
    team = serializers.SlugField(required=False, help_text="one of the department's teams: for its members only")
    cluster = serializers.SlugField(required=False, help_text="default: the default cluster")
    flavor = serializers.CharField(max_length=40)

    def validate(self, data):
        if data["end"] <= data["start"]:
            raise serializers.ValidationError({"end": "The booking must end after it starts."})
        return data


class BookingUpdateSerializer(StrictSerializer):
    gpus = serializers.IntegerField(min_value=1, max_value=100_000, required=False)
    start = serializers.DateTimeField(required=False)
    end = serializers.DateTimeField(required=False)
    purpose = serializers.CharField(max_length=120, required=False)
    users = serializers.ListField(child=serializers.CharField(max_length=150), required=False, max_length=500)
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class MaintenanceSerializer(serializers.ModelSerializer):
    cluster = serializers.SlugRelatedField(slug_field="name", read_only=True)
    affected_nodes = serializers.SerializerMethodField()

    class Meta:
        model = MaintenanceWindow
        fields = ["id", "cluster", "nodes", "selector", "affected_nodes", "start", "end", "reason", "created_at",
                  "cancelled_at"]
        read_only_fields = fields

    def get_affected_nodes(self, w) -> list[str]:
        return sorted({n.name for n in calendar.covered_nodes(w)})


class MaintenanceFieldsSerializer(StrictSerializer):
    nodes = serializers.ListField(child=serializers.CharField(max_length=253), required=False, max_length=1000)
    selector = serializers.DictField(child=serializers.CharField(max_length=63, allow_blank=True), required=False)
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    reason = serializers.CharField(max_length=200)

    def validate_selector(self, selector):
        problems = label_problems(selector)
        if problems:
            raise serializers.ValidationError(problems)
        return selector


class MaintenanceCreateSerializer(MaintenanceFieldsSerializer):
    cluster = serializers.SlugField(required=False, help_text="default: the default cluster")

    def validate(self, data):
        if data["end"] <= data["start"]:
            raise serializers.ValidationError({"end": "The window must end after it starts."})
        return data


class MaintenanceUpdateSerializer(MaintenanceFieldsSerializer):
    start = serializers.DateTimeField(required=False)
    end = serializers.DateTimeField(required=False)
    reason = serializers.CharField(max_length=200, required=False)
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


def _missing(field: str, message: str):
    raise ValidationFailed(message, fields={field: [{"code": "does_not_exist", "message": message}]})


def _cluster(name: str | None) -> Cluster:
    cluster = (Cluster.objects.filter(name=name) if name else Cluster.objects.filter(is_default=True)).first()
    if cluster is None:
        _missing("cluster", "No such cluster." if name else "No default cluster: name one.")
    return cluster


class BookingListView(APIView):
    @extend_schema(responses=BookingSerializer(many=True),
                   description="Your department's bookings (every department's for platform admins), newest "
                               "window first; cancelled ones included.")
    def get(self, request):
        member(request.user)
        rows = Booking.objects.restrict(request.user).select_related("department", "team", "cluster", "flavor")
        return Response(BookingSerializer(rows.prefetch_related("users").order_by("-start", "-id"), many=True).data)

    @extend_schema(request=BookingCreateSerializer, responses={201: BookingSerializer})
    def post(self, request):
        m = member(request.user)  # who may book what is the service's rule (team admins book for their team)
        body = dict(validated(BookingCreateSerializer, request.data))
        slug = body.pop("department", None)
        department = Department.objects.filter(slug=slug).first() if slug else m.department
        if department is None:
            _missing("department", "No such department.")
        team_slug = body.pop("team", None)
        if team_slug is not None:
            body["team"] = Team.objects.filter(department=department, slug=team_slug).first()
            if body["team"] is None:
                _missing("team", f"{department.slug} has no team {team_slug}.")
        flavor = Flavor.objects.filter(name=body.pop("flavor")).first()
        if flavor is None:
            _missing("flavor", "No such flavor.")
        cluster = _cluster(body.pop("cluster", None))
        booking = calendar.booking_create(actor=request.user, department=department, cluster=cluster, flavor=flavor,
                                          **body)
        return Response(BookingSerializer(booking).data, status=status.HTTP_201_CREATED)


class BookingDetailView(APIView):
    def _get(self, request, pk, change=False) -> Booking:
        booking = Booking.objects.select_related("department", "team").get_or_404(request.user, "view", pk=pk)
        if change and not calendar.may_change(request.user, booking):
            raise Forbidden("Only platform admins, the department's admins and, for a team's booking, the team's "
                            "admins change a booking.")
        return booking

    @extend_schema(responses=BookingSerializer)
    def get(self, request, pk):
        return Response(BookingSerializer(self._get(request, pk)).data)

    @extend_schema(request=BookingUpdateSerializer, responses=BookingSerializer)
    def patch(self, request, pk):
        booking = self._get(request, pk, change=True)
        body = dict(validated(BookingUpdateSerializer, request.data))
        booking = calendar.booking_update(booking=booking, actor=request.user, **body)
        return Response(BookingSerializer(booking).data)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, pk):
        calendar.booking_cancel(booking=self._get(request, pk, change=True), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class MaintenanceListView(APIView):
    @extend_schema(responses=MaintenanceSerializer(many=True))
    def get(self, request):
        member(request.user)
        rows = MaintenanceWindow.objects.select_related("cluster").order_by("-start", "-id")
        return Response(MaintenanceSerializer(rows, many=True).data)

    @extend_schema(request=MaintenanceCreateSerializer, responses={201: MaintenanceSerializer})
    def post(self, request):
        require_role(request.user, ADMIN, "Only platform admins declare maintenance windows.")
        body = dict(validated(MaintenanceCreateSerializer, request.data))
        cluster = _cluster(body.pop("cluster", None))
        window = calendar.maintenance_create(actor=request.user, cluster=cluster, **body)
        return Response(MaintenanceSerializer(window).data, status=status.HTTP_201_CREATED)


class MaintenanceDetailView(APIView):
    def _get(self, request, pk) -> MaintenanceWindow:
        member(request.user)
        window = MaintenanceWindow.objects.filter(pk=pk).select_related("cluster").first() if str(pk).isdigit() else None
        if window is None:
            raise NotFound("No such maintenance window.")
        return window

    @extend_schema(responses=MaintenanceSerializer)
    def get(self, request, pk):
        return Response(MaintenanceSerializer(self._get(request, pk)).data)

    @extend_schema(request=MaintenanceUpdateSerializer, responses=MaintenanceSerializer)
    def patch(self, request, pk):
        require_role(request.user, ADMIN, "Only platform admins declare maintenance windows.")
        window = self._get(request, pk)
        body = dict(validated(MaintenanceUpdateSerializer, request.data))
        window = calendar.maintenance_update(window=window, actor=request.user, **body)
        return Response(MaintenanceSerializer(window).data)

    @extend_schema(request=None, responses={204: None})
    def delete(self, request, pk):
        require_role(request.user, ADMIN, "Only platform admins declare maintenance windows.")
        calendar.maintenance_cancel(window=self._get(request, pk), actor=request.user)
        return Response(status=status.HTTP_204_NO_CONTENT)


class CalendarBookingSerializer(serializers.Serializer):
    """A booking as the calendar shows it: another department's only by its size and window."""
    kind = serializers.CharField()
    id = serializers.IntegerField()
    cluster = serializers.CharField()
    flavor = serializers.CharField()
    gpus = serializers.IntegerField()
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    own = serializers.BooleanField()
    department = serializers.CharField()
    team = serializers.CharField(allow_null=True)
    purpose = serializers.CharField()
    users = serializers.ListField(child=serializers.CharField())


class CalendarMaintenanceSerializer(serializers.Serializer):
    kind = serializers.CharField()
    id = serializers.IntegerField()
    cluster = serializers.CharField()
    nodes = serializers.ListField(child=serializers.CharField())
    selector = serializers.DictField(child=serializers.CharField())
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    reason = serializers.CharField()


class CalendarSerializer(serializers.Serializer):
    start = serializers.DateTimeField()
    end = serializers.DateTimeField()
    bookings = CalendarBookingSerializer(many=True)
    maintenance = CalendarMaintenanceSerializer(many=True)


class CalendarView(APIView):
    @extend_schema(parameters=[OpenApiParameter("start", str, description="ISO date or time (default: today)"),
                               OpenApiParameter("days", int, description="1-31 (default 7)")],
                   responses=CalendarSerializer)
    def get(self, request):
        member(request.user)
        start, days = selectors.calendar_window(request.query_params)
        return Response(selectors.calendar_entries(request.user, start, start + timedelta(days=days)))
