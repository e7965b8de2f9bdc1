from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Jobs and scheduling"

    def ready(self):
        # Imported here, once the models are loaded, to register the Celery tasks that services send by name
        # (portal.dispatch): services never import the tasks module themselves.
        from quotas import ports
        from scheduling import tasks  # noqa: F401
        from scheduling.services.quota_facts import SchedulingQuotaFacts

        # Quotas stands below scheduling: what it needs to know of jobs, nodes and clusters it asks this.
        ports.register(SchedulingQuotaFacts())
