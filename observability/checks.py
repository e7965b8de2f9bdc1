"""Start-up checks of observability's settings: a per-tier setting that names no tier is a typo that would
silently never apply."""

from __future__ import annotations

from django.conf import settings
from django.core.checks import Error, register

from engine.types import TIERS
from observability.services.idle import unknown_tiers

PER_TIER_SETTINGS = ("IDLE_GPU_THRESHOLD_PCT", "IDLE_GPU_MINUTES", "IDLE_STOP_GRACE_MINUTES")


@register()
def per_tier_settings(app_configs, **kwargs):
    return [Error(f"{name}: unknown tier(s) {', '.join(bad)}; tiers are {', '.join(TIERS)}",
                  id="observability.E001")
            for name in PER_TIER_SETTINGS if (bad := unknown_tiers(getattr(settings, name)))]
