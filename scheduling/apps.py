from django.apps import AppConfig


class SchedulingConfig(AppConfig):
    name = "scheduling"
    verbose_name = "Jobs and scheduling"

    def ready(self):
        # Imported here, once the models are loaded, to register the Celery tasks that services send by name
        # (portal.dispatch): services never import the tasks module themselves.
        from scheduling import tasks  # noqa: F401
