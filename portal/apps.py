from django.apps import AppConfig


class PortalConfig(AppConfig):
    name = "portal"
    verbose_name = "Portal and tenancy"

    def ready(self):
        # imported once the models are loaded (it reads AuditEntry)
        from portal import lockout  # noqa: F401 - connects the lockout audit receiver
