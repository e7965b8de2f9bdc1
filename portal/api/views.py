"""Portal API: who am I, API tokens. Every read goes through the tenancy gate."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import mixins, status, viewsets
from rest_framework.decorators import action
from rest_framework.response import Response
from rest_framework.views import APIView

from portal.api.serializers import (
    MembershipSerializer,
    MeSerializer,
    TokenCreateSerializer,
    TokenSerializer,
    validated,
)
from portal.errors import Forbidden
from portal.models import ApiToken
from portal.tenancy import CHANGE, VIEW, membership_of


class MeView(APIView):
    @extend_schema(responses=MeSerializer)
    def get(self, request):
        m = membership_of(request.user)  # a member of nothing still learns who they are
        return Response({
            "username": request.user.get_username(),
            "email": request.user.email,
            "membership": MembershipSerializer(m).data if m else None,
        })


class TokenViewSet(mixins.ListModelMixin, viewsets.GenericViewSet):
    """Your API tokens. The secret is returned once, at creation; only its hash is stored."""

    serializer_class = TokenSerializer

    def get_queryset(self):
        return ApiToken.objects.restrict(self.request.user, VIEW)

    @extend_schema(request=TokenCreateSerializer, responses={201: TokenSerializer})
    def create(self, request):
        if request.auth is not None and isinstance(request.auth, ApiToken):
            raise Forbidden("Create tokens from a logged-in session, not with another token.")
        body = validated(TokenCreateSerializer, request.data)
        token, secret = ApiToken.issue(user=request.user, **body)
        return Response({**TokenSerializer(token).data, "token": secret}, status=status.HTTP_201_CREATED)

    @action(detail=True, methods=["post"])
    def revoke(self, request, pk=None):
        token = ApiToken.objects.get_or_404(request.user, CHANGE, pk=pk)
        token.revoke()
        return Response(TokenSerializer(token).data)
