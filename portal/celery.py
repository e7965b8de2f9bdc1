"""The Celery application. Tasks live next to the services they call (``scheduling/tasks.py``)."""

import os

from celery import Celery
from celery.signals import worker_ready

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")

app = Celery("portal")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@worker_ready.connect
def _prepare_cluster(**_kwargs):  # pragma: no cover - exercised by running a worker
    """Make sure the tier PriorityClasses exist before the worker creates any pod."""
    from scheduling.services.clusters import ensure_priority_classes

    try:
        ensure_priority_classes()
    except Exception:  # noqa: BLE001 - a worker must start even when the cluster is briefly down
        import logging

        logging.getLogger(__name__).exception("could not ensure PriorityClasses at worker start")
