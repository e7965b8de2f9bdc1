"""Redis as the production broker and cache: tasks land on their declared queues, the cache round-trips."""

from __future__ import annotations

import os

import pytest

pytestmark = pytest.mark.redis

URL = os.environ.get("REDIS_URL") or "redis://127.0.0.1:6379/15"


def test_tasks_are_routed_to_their_queues_through_redis():
    import redis
    from celery import Celery

    from scheduling import tasks  # noqa: F401 - registers the tasks

    r = redis.Redis.from_url(URL)
    r.delete("pods", "cycle")
    app = Celery("portal-test", broker=URL, set_as_current=False)
    app.config_from_object("django.conf:settings", namespace="CELERY")
    app.conf.broker_url = URL
    app.conf.task_always_eager = False
    with app.connection_for_write() as conn:
        app.send_task("scheduling.pods.create", args=(1, 1), connection=conn)
        app.send_task("scheduling.cycle.run", connection=conn)
    assert r.llen("pods") == 1 and r.llen("cycle") == 1
    r.delete("pods", "cycle")


def test_redis_cache_roundtrip(settings):
    from django.core.cache.backends.redis import RedisCache

    cache = RedisCache(URL, {})
    cache.set("portal-test-key", {"a": 1}, 5)
    assert cache.get("portal-test-key") == {"a": 1}
    cache.delete("portal-test-key")
