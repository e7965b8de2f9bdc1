"""A job's kind (batch, session, service) against the submission fields that go with it (docs/sessions.md):
validation only, for the jobs serializer."""

from __future__ import annotations

import re

from django.conf import settings
from rest_framework import serializers

from scheduling.models import JobKind, SessionImage, Tier

SERVICE_HORIZON_S = 86400  # a service's max_runtime_s unless given: a day's hold, not the 14 days any job may ask
READINESS_PATH_RE = re.compile(r"^/[A-Za-z0-9._~!$&'()*+,;=:@%/?-]{0,199}$")


def kind_problems(attrs: dict) -> dict[str, list]:
    """A job's kind against the fields that go with it (docs/sessions.md); fills in what a session image and the
    kind decide (image, port, readiness path, command, tier, lifetime). Field -> errors; {} when all is well."""
    kind, errors = attrs.setdefault("kind", JobKind.BATCH), {}

    def err(field, message, code="invalid"):
        errors.setdefault(field, []).append(serializers.ErrorDetail(message, code=code))

    if kind == JobKind.BATCH:
        for field in ("session_image", "port", "readiness_path"):
            if attrs.get(field):
                err(field, "Only sessions and services have this.", "kind_mismatch")
        if not attrs.get("image"):
            err("image", "This field is required.", "required")
        if not attrs.get("command"):
            err("command", "This field is required.", "required")
        attrs.setdefault("tier", Tier.ELASTIC)
        return errors
    if attrs.get("pods", 1) != 1:
        err("pods", "A session or a service runs as one pod.")
    if kind == JobKind.SESSION and attrs.get("session_image"):
        _from_session_image(attrs, err)
    elif attrs.get("session_image"):
        err("session_image", "Only sessions start from a lab session image.", "kind_mismatch")
    elif not attrs.get("image"):
        err("image", "Give an image (or, for a session, one of the lab's session images).", "required")
    if not attrs.get("port"):
        err("port", "The container port its app listens on (1-65535).", "required")
    attrs["readiness_path"] = attrs.get("readiness_path") or "/"
    attrs.setdefault("command", [])
    attrs.setdefault("tier", Tier.REALTIME)
    if kind == JobKind.SESSION:
        if attrs["tier"] != Tier.REALTIME:
            err("tier", "Sessions run in the realtime tier: they start fast and are never preempted.")
        if attrs.get("max_runtime_s", 3600) > settings.SESSION_MAX_LIFETIME_S:
            err("max_runtime_s", f"A session's lifetime is at most {settings.SESSION_MAX_LIFETIME_S} s "
                                 "(the lab's maximum).", "max_value")
    elif "max_runtime_s" not in attrs or attrs["max_runtime_s"] == 3600:
        # A service runs until stopped, within a horizon its budget hold covers (docs/sessions.md).
        attrs["max_runtime_s"] = SERVICE_HORIZON_S
    return errors


def _from_session_image(attrs: dict, err) -> None:
    found = SessionImage.objects.filter(name=attrs["session_image"]).first()
    if found is None:
        names = ", ".join(SessionImage.objects.values_list("name", flat=True)) or "none"
        err("session_image", f"Unknown session image {attrs['session_image']!r}; the lab offers: {names}.",
            "unknown_image")
        return
    for field in ("image", "port", "readiness_path"):
        if attrs.get(field):
            err(field, f"Set by the session image {found.name!r}; leave it out.", "kind_mismatch")
    attrs.update(image=found.image, port=found.port, readiness_path=found.readiness_path)
    if not attrs.get("command") and found.command:
        attrs["command"] = list(found.command)
