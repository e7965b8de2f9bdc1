"""Each xdist worker gets its own Redis database, derived from the configured one (tests/workers.py)."""

from __future__ import annotations

import pytest

from tests.workers import redis_url_for_worker, worker_number


@pytest.mark.parametrize(("url", "worker", "expected"), [
    ("redis://127.0.0.1:6379/15", None, "redis://127.0.0.1:6379/15"),  # one process: the database as given
    ("redis://127.0.0.1:6379/15", 0, "redis://127.0.0.1:6379/15"),  # CI's: workers 15, 0
    ("redis://127.0.0.1:6379/15", 1, "redis://127.0.0.1:6379/0"),
    ("redis://127.0.0.1:6379/7", 2, "redis://127.0.0.1:6379/9"),
    ("redis://127.0.0.1:6379", 1, "redis://127.0.0.1:6379/1"),  # no database named: 0
    ("redis://:pw@cache:6379/3?socket_timeout=2", 1, "redis://:pw@cache:6379/4?socket_timeout=2"),
    ("rediss://cache:6380/1", 1, "rediss://cache:6380/2"),
    ("filesystem://", 1, "filesystem://"),  # not Redis: untouched
    ("", 1, ""),
])
def test_each_worker_gets_its_own_redis_database(url, worker, expected):
    assert redis_url_for_worker(url, worker) == expected


@pytest.mark.parametrize(("name", "expected"), [("gw0", 0), ("gw12", 12), ("", None), ("master", None)])
def test_the_worker_number_comes_from_xdist(monkeypatch, name, expected):
    monkeypatch.setenv("PYTEST_XDIST_WORKER", name)
    assert worker_number() == expected
