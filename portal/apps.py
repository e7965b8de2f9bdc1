from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal and tenancy"

    def ready(self):
        from portal import (
            lockout,  # noqa: F401 - connects the lockout audit receiver
            metrics,
        )

        global _collector_registered
        if not _collector_registered:  # once per process (ready() may run again in tests)
            from prometheus_client import REGISTRY

            REGISTRY.register(metrics.DatabaseCollector())
            _collector_registered = True


_collector_registered = False
