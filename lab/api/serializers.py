"""The shapes of the lab's department and member endpoints (the bodies that create them: ``lab.inputs``)."""

from __future__ import annotations

from rest_framework import serializers

from portal.api.serializers import StrictSerializer
from portal.models import Department, Membership, Role, UserTier


class DepartmentSerializer(serializers.ModelSerializer):
    class Meta:
        model = Department
        fields = ["slug", "name", "archived_at"]


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


class MemberUpdateSerializer(StrictSerializer):
    role = serializers.ChoiceField(choices=Role.choices, required=False)
    user_tier = serializers.ChoiceField(choices=UserTier.choices, required=False)
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
