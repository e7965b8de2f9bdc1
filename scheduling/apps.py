from django.apps import AppConfig

from quotas import ports


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Jobs and scheduling"

    def ready(self):
        # Imported here, once the models are loaded, to register the Celery tasks that services send by name
        # (portal.dispatch): services never import the tasks module themselves.
        from scheduling import tasks  # noqa: F401 - registers the tasks by name; it imports models
        from scheduling.services.quota_facts import SchedulingQuotaFacts  # reads models, so: once loaded

        # Quotas stands below scheduling: what it needs to know of jobs, nodes and clusters it asks this.
        ports.register(SchedulingQuotaFacts())
