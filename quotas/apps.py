from django.apps import AppConfig

from quotas import policy_cache


class QuotasConfig(AppConfig):
    name = "quotas"
    verbose_name = "Quotas, flavors and budgets"

    def ready(self):
        # Imported here, once the models are loaded, to register the budget tasks with the Celery app in every
        # process (beat and workers name them; portal.dispatch finds tasks by name).
        from quotas import tasks  # noqa: F401 - registers the budget tasks by name; it imports models

        policy_cache.connect()  # the submission's rules, limits and ceilings are kept until one of them changes
