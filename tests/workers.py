"""Each test process its own world: a data folder, and a Redis database of its own when Redis is configured.

pytest-xdist runs the suite in several worker processes (``-n auto``; the README's test command). They share
the machine's PostgreSQL and Redis servers, so whatever one test process keeps there must not be another's:

* PostgreSQL: pytest-django names each worker's test database after it (``test_<name>_gw0``, ``_gw1``, ...).
* SQLite: the test database lives in each process's memory.
* ``DATA_DIR`` (the embedded lock files, the filesystem broker, kept logs): a fresh temporary folder per process.
* Redis: every test empties the cache (``tests/conftest.py``), which is Redis's FLUSHDB, so two workers on one
  database would wipe each other's keys. Worker N uses database ``(D + N) % 16``, where D is the database of
  ``REDIS_URL`` (and of ``CELERY_BROKER_URL`` when it is Redis): CI's 15 gives workers 15 and 0, and a developer
  on database 7 gets 7, 8, ... A run without xdist keeps D itself.

This runs before Django reads its settings (``tests/settings.py``) and again from ``tests/conftest.py`` for the
pure suites run without Django; it is idempotent.
"""

from __future__ import annotations

import os
import re
import tempfile

REDIS_DATABASES = 16  # Redis's default number of databases
_DONE = "PORTAL_TEST_WORKER_ENV"


def worker_number() -> int | None:
    """0, 1, ... for pytest-xdist's workers (``gw0``, ``gw1``, ...); None when the tests run in one process."""
    name = os.environ.get("PYTEST_XDIST_WORKER", "")
    match = re.fullmatch(r"gw(\d+)", name)
    return int(match.group(1)) if match else None


def redis_url_for_worker(url: str, worker: int | None) -> str:
    """The worker's own database of a ``redis://host:port/db`` URL (db 0 when the URL names none)."""
    if worker is None or not url.startswith(("redis://", "rediss://")):
        return url
    match = re.fullmatch(r"(rediss?://[^/?#]*)(?:/(\d*))?([?#].*)?", url)
    if match is None:
        return url
    base = int(match.group(2) or 0)
    return f"{match.group(1)}/{(base + worker) % REDIS_DATABASES}{match.group(3) or ''}"


def prepare_environment() -> None:
    # Workers inherit the environment of the process that started them (which prepared its own): the mark
    # says which process the environment was prepared for.
    me = os.environ.get("PYTEST_XDIST_WORKER", "main")
    if os.environ.get(_DONE) == me:
        return
    os.environ[_DONE] = me
    os.environ.setdefault("CELERY_TASK_ALWAYS_EAGER", "true")
    worker = worker_number()
    if worker is None:
        os.environ.setdefault("DATA_DIR", tempfile.mkdtemp(prefix="portal-test-"))
    else:  # never the folder of the process that started the workers, nor another worker's
        os.environ["DATA_DIR"] = tempfile.mkdtemp(prefix=f"portal-test-gw{worker}-")
    for name in ("REDIS_URL", "CELERY_BROKER_URL"):
        if os.environ.get(name):
            os.environ[name] = redis_url_for_worker(os.environ[name], worker)
