"""Portal API: who am I, departments, API tokens; health."""

from __future__ import annotations

from django.db import connection
from django.http import JsonResponse
from django.utils import timezone
from drf_spectacular.utils import extend_schema
from rest_framework import mixins, serializers, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.errors import Forbidden
from portal.models import ApiToken, Department, Membership
from portal.tenancy import membership_of


def healthz(request):
    """Liveness, for Kubernetes liveness probes and container health checks (no auth): the process answers.

    It checks no dependency on purpose: restarting a web process cannot bring a database or Redis back, and
    a liveness probe that failed with them would restart every replica in a loop during their outage."""
    return JsonResponse({"status": "ok"})


def _check_database() -> None:
    with connection.cursor() as cur:
        cur.execute("SELECT 1")


def _check_cache() -> None:
    from django.core.cache import cache

    cache.set("readyz", "1", 10)
    if cache.get("readyz") != "1":
        raise RuntimeError("the cache did not return what was stored")


def _check_broker() -> None:
    from portal.celery import app

    with app.connection_for_write() as conn:
        conn.ensure_connection(max_retries=1, interval_start=0, interval_step=0.1, interval_max=0.1, timeout=2)


READINESS_CHECKS = {"database": _check_database, "cache": _check_cache, "broker": _check_broker}
# Without these the portal cannot answer at all; without the others it runs degraded (see
# docs/operations.md, failure modes): submissions are still accepted, and pods follow once they are back.
CRITICAL = {"database"}


def readyz(request):
    """Readiness (no auth): the state of every dependency. 503 when the database is unreachable (take the
    replica out of the load balancer); 200 "degraded" when only the cache or the broker is, because
    submissions, cancels and every page still work then."""
    checks: dict[str, str] = {}
    for name, check in READINESS_CHECKS.items():
        try:
            check()
            checks[name] = "ok"
        except Exception as exc:  # noqa: BLE001 - reported, never raised
            checks[name] = f"error: {type(exc).__name__}"
    failed = {n for n, v in checks.items() if v != "ok"}
    status_ = "error" if failed & CRITICAL else ("degraded" if failed else "ok")
    return JsonResponse({"status": status_, "checks": checks}, status=503 if status_ == "error" else 200)


class MembershipSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Membership
        fields = ["department", "role", "user_tier"]


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    email = serializers.EmailField()
    membership = MembershipSerializer(allow_null=True)


class MeView(APIView):
    @extend_schema(responses=MeSerializer)
    def get(self, request):
        m = membership_of(request.user)
        return Response({
            "username": request.user.get_username(),
            "email": request.user.email,
            "membership": MembershipSerializer(m).data if m else None,
        })


class DepartmentSerializer(serializers.ModelSerializer):
    class Meta:
        model = Department
        fields = ["slug", "name"]


class DepartmentViewSet(viewsets.ReadOnlyModelViewSet):
    serializer_class = DepartmentSerializer
    lookup_field = "slug"

    def get_queryset(self):
        m = membership_of(self.request.user)
        if m is None:
            return Department.objects.none()
        if m.is_platform_admin:
            return Department.objects.all()
        return Department.objects.filter(pk=m.department_id)


class TokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "key_id", "created_at", "expires_at", "last_used_at", "revoked_at"]
        read_only_fields = fields


class TokenCreateSerializer(serializers.Serializer):
    name = serializers.CharField(max_length=80)
    ttl_days = serializers.IntegerField(min_value=1, max_value=365, required=False)


class TokenViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Your API tokens. The secret is returned once, at creation; only its hash is stored."""

    serializer_class = TokenSerializer

    def get_queryset(self):
        return ApiToken.objects.filter(user=self.request.user)

    @extend_schema(request=TokenCreateSerializer, responses={201: TokenSerializer})
    def create(self, request):
        if request.auth is not None and isinstance(request.auth, ApiToken):
            raise Forbidden("Create tokens from a logged-in session, not with another token.")
        s = TokenCreateSerializer(data=request.data)
        s.is_valid(raise_exception=True)
        token, secret = ApiToken.issue(user=request.user, **s.validated_data)
        return Response({**TokenSerializer(token).data, "token": secret}, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        token = self.get_object()
        ApiToken.objects.filter(pk=token.pk, revoked_at__isnull=True).update(revoked_at=timezone.now())
        token.refresh_from_db()
        return Response(TokenSerializer(token).data)


# Error pages: under /api/ the one JSON error shape (a client parsing JSON must never get an HTML page, e.g.
# for a body Django refuses as too large before any view runs); elsewhere Django's own pages.
def _api_or(request, default, status_: int, code: str, message: str, exception=None):
    if request.path.startswith("/api/"):
        from portal.errors import error_body

        return JsonResponse(error_body(code, message), status=status_)
    return default(request, exception) if exception is not None else default(request)


def bad_request(request, exception=None):
    from django.core.exceptions import RequestDataTooBig
    from django.views import defaults

    if isinstance(exception, RequestDataTooBig):
        return _api_or(request, defaults.bad_request, 400, "request_too_large", "The request body is too large.",
                       exception)
    return _api_or(request, defaults.bad_request, 400, "malformed_request", "The request could not be read.",
                   exception)


def permission_denied(request, exception=None):
    from django.views import defaults

    return _api_or(request, defaults.permission_denied, 403, "permission_denied",
                   "You do not have permission to do this.", exception)


def page_not_found(request, exception=None):
    from django.views import defaults

    return _api_or(request, defaults.page_not_found, 404, "not_found", "Not found.", exception)


def server_error(request):
    from django.views import defaults

    return _api_or(request, defaults.server_error, 500, "server_error", "Internal error; it has been logged.")
