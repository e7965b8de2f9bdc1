"""Shapes of the secrets API. Values go in and never come out: the output has keys, "set" and updated_at."""

from __future__ import annotations

from rest_framework import serializers

from portal.api.serializers import StrictSerializer
from workloads.models import DepartmentSecret, SecretKind, SecretPurpose


class ValueField(serializers.CharField):
    """A secret's value: a JSON string, never a number or a boolean turned into one."""

    def __init__(self, **kwargs):
        super().__init__(max_length=32768, allow_blank=True, trim_whitespace=False, **kwargs)

    def to_internal_value(self, data):
        if not isinstance(data, str):
            self.fail("invalid")
        return super().to_internal_value(data)


class SecretCreateSerializer(StrictSerializer):
    name = serializers.CharField(max_length=40)
    kind = serializers.ChoiceField(choices=SecretKind.choices)
    purpose = serializers.ChoiceField(choices=SecretPurpose.choices, required=False, default=SecretPurpose.ENV)
    reference_name = serializers.CharField(max_length=253, required=False, default="")
    keys = serializers.ListField(child=serializers.CharField(max_length=253), required=False, default=list,
                                 max_length=50, help_text="a reference: the keys its Secret is expected to have")
    values = serializers.DictField(child=ValueField(),
                                   required=False, default=dict, help_text="a value secret: key -> value "
                                   "(write-only; an image pull secret: {\"password\": ...})")
    registry = serializers.CharField(max_length=253, required=False, default="")
    username = serializers.CharField(max_length=253, required=False, default="")
    department = serializers.SlugField(required=False, help_text="platform admins: another department's")


class SecretUpdateSerializer(StrictSerializer):
    reference_name = serializers.CharField(max_length=253, required=False)
    keys = serializers.ListField(child=serializers.CharField(max_length=253), required=False, max_length=50)
    values = serializers.DictField(child=ValueField(), required=False)
    registry = serializers.CharField(max_length=253, required=False)
    username = serializers.CharField(max_length=253, required=False)


class SecretSerializer(serializers.ModelSerializer):
    department = serializers.SlugRelatedField(slug_field="slug", read_only=True)
    created_by = serializers.SlugRelatedField(slug_field="username", read_only=True, allow_null=True)
    values = serializers.SerializerMethodField(help_text='"set" when the portal keeps values (never the values)')
    kube_name = serializers.CharField(read_only=True, help_text="the Kubernetes Secret pods refer to")

    class Meta:
        model = DepartmentSecret
        fields = ["name", "department", "kind", "purpose", "reference_name", "keys", "registry", "username",
                  "values", "kube_name", "version", "created_by", "created_at", "updated_at"]
        read_only_fields = fields

    def get_values(self, secret) -> str | None:
        return "set" if secret.kind == SecretKind.VALUE and secret.values_encrypted else None
