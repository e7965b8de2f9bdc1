from django.apps import AppConfig


class NotificationsConfig(AppConfig):
    name = "notifications"
    verbose_name = "Notifications"

    def ready(self):
        # Registers the Celery tasks that services send by name (portal.dispatch): services never import them.
        from notifications import tasks  # noqa: F401 - registers the tasks by name; it imports models
