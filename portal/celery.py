"""The Celery application. Tasks live next to the services they call (``scheduling/tasks.py``,
``quotas/tasks.py``); services send them by name through ``portal.dispatch``."""

import os

from celery import Celery
from celery.signals import task_postrun, task_prerun

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@task_prerun.connect
@task_postrun.connect
def _recycle_db_connections(sender=None, **_kwargs):
    """Database connections live as in a web request: reused up to DB_CONN_MAX_AGE, dropped when broken.

    Celery's Django fix-up would otherwise close every connection before and after every task (see
    CELERY_DB_REUSE_MAX in settings), so each pod task and each cycle opened a new PostgreSQL session."""
    if getattr(getattr(sender, "request", None), "is_eager", False):
        return
    from django.db import close_old_connections

    close_old_connections()
