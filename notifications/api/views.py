"""Notifications API: your notifications, your preferences, webhooks, the department's settings. Every read
goes through the tenancy gate: a user sees their own notifications, preferences and webhook; a department's
webhook and settings are its admins'."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.generics import ListAPIView
from rest_framework.response import Response
from rest_framework.views import APIView

from notifications import selectors
from notifications.api.serializers import (
    DepartmentSettingsSerializer,
    NotificationSerializer,
    PreferencesInputSerializer,
    PreferencesSerializer,
    WebhookCreateSerializer,
    WebhookSerializer,
    WebhookUpdateSerializer,
    WebhookWithSecretSerializer,
)
from notifications.models import Webhook
from notifications.services import preferences
from portal.api.serializers import validated
from portal.tenancy import CHANGE, VIEW, member


class NotificationListView(ListAPIView):
    """Your recent notifications, newest first, with each delivery's status (pending, sent, failed)."""

    serializer_class = NotificationSerializer

    def get_queryset(self):
        return selectors.recent_notifications(user=self.request.user)

    def list(self, request, *args, **kwargs):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(NotificationSerializer([selectors.describe(d) for d in page],
                                                                  many=True).data)


class PreferencesView(APIView):
    """Your channels per kind of event. A kind you never set follows its default."""

    @extend_schema(responses=PreferencesSerializer)
    def get(self, request):
        return Response({"preferences": preferences.preferences_of(request.user)})

    @extend_schema(request=PreferencesInputSerializer, responses=PreferencesSerializer)
    def put(self, request):
        body = validated(PreferencesInputSerializer, request.data)
        return Response({"preferences": preferences.preferences_set(user=request.user,
                                                                    items=body["preferences"])})

    @extend_schema(request=PreferencesInputSerializer, responses=PreferencesSerializer)
    def patch(self, request):
        return self.put(request)


class WebhookListView(APIView):
    """Your webhook and, for department admins, the department's. ``secret`` is returned once, here at
    creation (and by ``rotate``); sign-checking receivers keep it."""

    @extend_schema(responses=WebhookSerializer(many=True))
    def get(self, request):
        hooks = Webhook.objects.restrict(request.user, VIEW).select_related("department")
        return Response(WebhookSerializer(hooks, many=True).data)

    @extend_schema(request=WebhookCreateSerializer, responses={201: WebhookWithSecretSerializer})
    def post(self, request):
        member(request.user)
        body = validated(WebhookCreateSerializer, request.data)
        hook, secret = preferences.webhook_create(user=request.user, **body)
        hook.secret = secret
        return Response(WebhookWithSecretSerializer(hook).data, status=status.HTTP_201_CREATED)


class WebhookDetailView(APIView):
    @extend_schema(responses=WebhookSerializer)
    def get(self, request, pk):
        return Response(WebhookSerializer(Webhook.objects.get_or_404(request.user, VIEW, pk=pk)).data)

    @extend_schema(request=WebhookUpdateSerializer, responses=WebhookSerializer)
    def patch(self, request, pk):
        hook = Webhook.objects.get_or_404(request.user, CHANGE, pk=pk)
        body = validated(WebhookUpdateSerializer, request.data)
        return Response(WebhookSerializer(preferences.webhook_update(user=request.user, hook=hook,
                                                                     data=body)).data)

    @extend_schema(responses={204: None})
    def delete(self, request, pk):
        preferences.webhook_delete(user=request.user, hook=Webhook.objects.get_or_404(request.user, CHANGE, pk=pk))
        return Response(status=status.HTTP_204_NO_CONTENT)


class WebhookRotateView(APIView):
    """A new secret for the webhook (the old one stops working at once), returned this once."""

    @extend_schema(request=None, responses=WebhookWithSecretSerializer)
    def post(self, request, pk):
        hook, secret = preferences.webhook_rotate(user=request.user,
                                                  hook=Webhook.objects.get_or_404(request.user, CHANGE, pk=pk))
        hook.secret = secret
        return Response(WebhookWithSecretSerializer(hook).data)


class DepartmentSettingsView(APIView):
    """Your department's notification settings (department admins)."""

    @extend_schema(responses=DepartmentSettingsSerializer)
    def get(self, request):
        found = preferences.department_settings(user=request.user)
        return Response({"budget_low_threshold": found.budget_low_threshold})

    @extend_schema(request=DepartmentSettingsSerializer, responses=DepartmentSettingsSerializer)
    def put(self, request):
        body = validated(DepartmentSettingsSerializer, request.data)
        found = preferences.department_settings_set(user=request.user, **body)
        return Response({"budget_low_threshold": found.budget_low_threshold})
