"""The bodies that create a department and a member: one declaration for the API, the pages and the lab file
(each department and member of a lab file is read through them). Below the services, so the lab file's check
can use them without an import circle with the API."""

from __future__ import annotations

from rest_framework import serializers

from portal.api.serializers import StrictSerializer
from portal.models import SLUG, Role, UserTier, not_reserved


class DepartmentCreateSerializer(StrictSerializer):
    # The model's own slug rules, so every error of a body is listed at once (uniqueness: the service).
    slug = serializers.CharField(max_length=40, validators=[SLUG, not_reserved])
    name = serializers.CharField(max_length=120)
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")


class MemberCreateSerializer(StrictSerializer):
    username = serializers.CharField(max_length=150)
    email = serializers.EmailField(required=False, allow_blank=True, default="")
    role = serializers.ChoiceField(choices=Role.choices, default=Role.RESEARCHER)
    user_tier = serializers.ChoiceField(choices=UserTier.choices, default=UserTier.STANDARD)
    comment = serializers.CharField(max_length=2000, required=False, allow_blank=True, default="")
