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

    def get_lookup_regex(self, viewset, lookup_prefix=""):
        """A viewset looked up by its primary key takes digits only, so ``/jobs/abc/connect`` is the resolver's
        404 before any view runs, whatever that view then does with the id (rows with other keys, such as a
        department's slug, say so with ``lookup_field`` / ``lookup_value_regex``)."""
        lookup_field = getattr(viewset, "lookup_field", "pk")
        if lookup_field in ("pk", "id") and not hasattr(viewset, "lookup_value_regex"):
            lookup_url_kwarg = getattr(viewset, "lookup_url_kwarg", None) or lookup_field
            return f"{lookup_prefix}(?P<{lookup_url_kwarg}>[0-9]+)"
        return super().get_lookup_regex(viewset, lookup_prefix)
