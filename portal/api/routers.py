"""The one router every app's API uses (a module of its own: DRF's routers import its views, which read the API
settings that name ``portal.api``'s parser, so ``portal.api`` itself must not import them)."""

from __future__ import annotations

from rest_framework.routers import DefaultRouter


class Router(DefaultRouter):
    """Every app's API router: ``/api/v1/jobs`` and ``/api/v1/jobs/`` both work (notebook users type either),
    and no browsable root view (the API's index is its OpenAPI schema)."""

    include_root_view = False

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.trailing_slash = "/?"
