"""Shapes of the notifications API. Inputs inherit StrictSerializer: an unknown field is a 400."""

from __future__ import annotations

from rest_framework import serializers

from notifications.kinds import KINDS, NAMES
from notifications.models import Webhook
from notifications.services import egress
from portal.api.serializers import StrictSerializer

KIND_CHOICES = [(k.name, k.title) for k in KINDS]


class PreferenceSerializer(serializers.Serializer):
    kind = serializers.ChoiceField(choices=KIND_CHOICES)
    title = serializers.CharField()
    audience = serializers.CharField()
    email = serializers.BooleanField()
    webhook = serializers.BooleanField()
    default_email = serializers.BooleanField()
    default_webhook = serializers.BooleanField()


class PreferencesSerializer(serializers.Serializer):
    preferences = PreferenceSerializer(many=True)


class PreferenceInputSerializer(StrictSerializer):
    kind = serializers.ChoiceField(choices=KIND_CHOICES)
    email = serializers.BooleanField(required=False)
    webhook = serializers.BooleanField(required=False)

    def validate(self, attrs):
        if "email" not in attrs and "webhook" not in attrs:
            raise serializers.ValidationError({"email": [serializers.ErrorDetail(
                "Give email or webhook (true or false).", code="required")]})
        return attrs


class PreferencesInputSerializer(StrictSerializer):
    preferences = PreferenceInputSerializer(many=True, allow_empty=False)

    def validate_preferences(self, items):
        kinds = [i["kind"] for i in items]
        if len(kinds) != len(set(kinds)):
            raise serializers.ValidationError("Each kind at most once.", code="duplicate")
        return items


class NotificationSerializer(serializers.Serializer):
    id = serializers.IntegerField()
    kind = serializers.CharField()
    subject = serializers.CharField()
    url = serializers.CharField()
    channel = serializers.ChoiceField(choices=["email", "webhook"])
    status = serializers.ChoiceField(choices=["pending", "sending", "sent", "failed"])
    attempts = serializers.IntegerField()
    last_error = serializers.CharField()
    created_at = serializers.DateTimeField()
    next_attempt_at = serializers.DateTimeField(allow_null=True)
    sent_at = serializers.DateTimeField(allow_null=True)
    data = serializers.DictField()


class WebhookSerializer(serializers.ModelSerializer):
    """A webhook as the API shows it: never its secret."""

    scope = serializers.CharField()
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Webhook
        fields = ["id", "scope", "department", "url", "kinds", "active", "created_at"]
        read_only_fields = fields


class WebhookWithSecretSerializer(WebhookSerializer):
    """At creation and rotation only: the secret, shown this once."""

    secret = serializers.CharField()

    class Meta(WebhookSerializer.Meta):
        fields = [*WebhookSerializer.Meta.fields, "secret"]
        read_only_fields = fields


def _url(value: str) -> str:
    """Only public receivers (or those NOTIFY_WEBHOOK_ALLOW names): the portal sends from inside the lab."""
    try:
        egress.vet(value)
    except egress.Refused as exc:
        raise serializers.ValidationError(exc.message, code=exc.code)
    return value


class WebhookCreateSerializer(StrictSerializer):
    url = serializers.URLField(max_length=500, validators=[_url])
    scope = serializers.ChoiceField(choices=["user", "department"], default="user")
    kinds = serializers.ListField(child=serializers.ChoiceField(choices=NAMES), required=False, max_length=50)


class WebhookUpdateSerializer(StrictSerializer):
    url = serializers.URLField(max_length=500, required=False, validators=[_url])
    kinds = serializers.ListField(child=serializers.ChoiceField(choices=NAMES), required=False, max_length=50)
    active = serializers.BooleanField(required=False)


class DepartmentSettingsSerializer(StrictSerializer):
    budget_low_threshold = serializers.IntegerField(min_value=0, max_value=10**15, allow_null=True, help_text=(
        "mcr: the department's admins hear when the balance falls below it; null: 10% of the refill amount."))
