"""The strict serializer base every app's input serializers share, and the shapes of the portal's own
endpoints: who am I, departments, API tokens."""

from __future__ import annotations

from drf_spectacular.extensions import OpenApiSerializerExtension
from rest_framework import serializers

from portal.models import SLUG, ApiToken, Department, Membership, Role, UserTier, not_reserved


# The base of every input serializer: a body that is not a JSON object, or that carries a field the serializer
# does not know, is a 400 with an ``unknown_field`` error for each unknown field, reported together with the
# other fields' errors (``"gpu": 8`` must not submit a one-GPU job). Its docstring is what the OpenAPI schema
# shows for input serializers without one of their own.
class StrictSerializer(serializers.Serializer):
    """Unknown fields are an error (a typo must not be silently ignored)."""

    not_an_object = "Expected a JSON object."

    def unknown_field_message(self, name: str) -> str:
        return "Unknown field."

    def unknown_errors(self, data: dict) -> dict:
        """A field error for each field of ``data`` the serializer does not declare."""
        return {name: [serializers.ErrorDetail(self.unknown_field_message(name), code="unknown_field")]
                for name in sorted(set(data) - set(self.fields))}

    def to_internal_value(self, data):
        if not isinstance(data, dict):
            raise serializers.ValidationError({"non_field_errors": [
                serializers.ErrorDetail(self.not_an_object, code="invalid")]})
        errors: dict = {}
        value = None
        try:
            value = super().to_internal_value(data)
        except serializers.ValidationError as exc:
            errors = dict(exc.detail)
        errors.update(self.unknown_errors(data))
        if errors:
            raise serializers.ValidationError(errors)
        return value


class StrictSerializerSchema(OpenApiSerializerExtension):
    """The OpenAPI schema of a strict serializer's request body says what the API does with an unknown field:
    ``additionalProperties: false`` (a 400). Its responses are left open."""

    target_class = StrictSerializer
    match_subclasses = True

    def map_serializer(self, auto_schema, direction):
        schema = auto_schema._map_basic_serializer(self.target, direction)
        if direction == "request":
            schema["additionalProperties"] = False
        return schema


class MembershipSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Membership
        fields = ["department", "role", "user_tier"]


class MeSerializer(serializers.Serializer):
    username = serializers.CharField()
    email = serializers.EmailField()
    membership = MembershipSerializer(allow_null=True)


class DepartmentSerializer(serializers.ModelSerializer):
    class Meta:
        model = Department
        fields = ["slug", "name", "archived_at"]


class DepartmentCreateSerializer(StrictSerializer):
    # The model's own slug rules, so every error of a body is listed at once (uniqueness: the service).
    slug = serializers.CharField(max_length=40, validators=[SLUG, not_reserved])
    name = serializers.CharField(max_length=120)
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class DepartmentUpdateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=120)
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class DepartmentArchiveSerializer(StrictSerializer):
    reason = serializers.CharField(max_length=2000)
    confirm = serializers.BooleanField(default=False)


class ArchiveImpactSerializer(serializers.Serializer):
    waiting_jobs = serializers.IntegerField()
    active_jobs = serializers.IntegerField()
    members = serializers.IntegerField()
    nominal_gpus = serializers.IntegerField()
    text = serializers.ListField(child=serializers.CharField())


class MemberSerializer(serializers.ModelSerializer):
    username = serializers.CharField(source="user.username", read_only=True)
    email = serializers.CharField(source="user.email", read_only=True)
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)

    class Meta:
        model = Membership
        fields = ["username", "email", "department", "role", "user_tier"]
        read_only_fields = fields


class MemberCreateSerializer(StrictSerializer):
    username = serializers.CharField(max_length=150)
    email = serializers.EmailField(required=False, allow_blank=True, default="")
    role = serializers.ChoiceField(choices=Role.choices, default=Role.RESEARCHER)
    user_tier = serializers.ChoiceField(choices=UserTier.choices, default=UserTier.STANDARD)
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class MemberUpdateSerializer(StrictSerializer):
    role = serializers.ChoiceField(choices=Role.choices, required=False)
    user_tier = serializers.ChoiceField(choices=UserTier.choices, required=False)
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class TokenSerializer(serializers.ModelSerializer):
    class Meta:
        model = ApiToken
        fields = ["id", "name", "key_id", "created_at", "expires_at", "last_used_at", "revoked_at"]
        read_only_fields = fields


class TokenCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=80)
    ttl_days = serializers.IntegerField(min_value=1, max_value=365, required=False)
