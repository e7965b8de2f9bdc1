"""Workers keep their database connections like the web does, and beat never builds a backlog of cycles."""

from __future__ import annotations

from types import SimpleNamespace

from django.conf import settings


def test_worker_connections_are_recycled_like_requests_not_closed_per_task(monkeypatch):
    import django.db

    from portal import celery

    calls = []
    monkeypatch.setattr(django.db, "close_old_connections", lambda: calls.append(1))
    celery._recycle_db_connections(sender=SimpleNamespace(request=SimpleNamespace(is_eager=True)))
    assert calls == []  # eager (tests, debugging): inside the caller's transaction, leave it alone
    celery._recycle_db_connections(sender=SimpleNamespace(request=SimpleNamespace(is_eager=False)))
    assert calls == [1]
    assert celery.app.conf.get("CELERY_DB_REUSE_MAX") >= 1000  # Celery's fix-up does not close them itself


def test_stale_cycles_expire_instead_of_queueing_up():
    for name in ("admission-cycle", "sync-cluster"):
        entry = settings.CELERY_BEAT_SCHEDULE[name]
        assert 0 < entry["options"]["expires"] <= 10 * entry["schedule"]


def test_every_beat_entry_names_a_registered_task():
    """The beat schedule is declared once, in settings: each entry must name a task some app registers."""
    from portal.celery import app

    names = {entry["task"] for entry in settings.CELERY_BEAT_SCHEDULE.values()}
    assert names and names <= set(app.tasks)
