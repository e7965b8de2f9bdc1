"""Retention of the notification outbox: events and their deliveries go NOTIFY_RETENTION_DAYS after they were
reported, never while something is left to send."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.conf import settings as django_settings
from django.utils import timezone

from notifications import tasks
from notifications.models import Delivery, Event
from notifications.services import delivery
from portal import config

pytestmark = pytest.mark.django_db

NOW = timezone.now()


def _event(lab, *, days_ago: float, expanded: bool = True, statuses: tuple[str, ...] = (), key: str | None = None):
    at = NOW - timedelta(days=days_ago)
    event = Event.objects.create(kind="job.failed", department=lab.vision, user_ids=[lab.alice.pk],
                                 created_at=at, expanded_at=at if expanded else None, dedupe_key=key)
    for n, status in enumerate(statuses):
        Delivery.objects.create(event=event, department=lab.vision, channel="email", user=lab.alice,
                                key=f"{event.pk}:email:{n}", status=status, created_at=at)
    return event


def _left() -> set[int]:
    return set(Event.objects.values_list("pk", flat=True))


def test_old_events_go_with_their_deliveries_once_nothing_is_left_to_send(lab, settings):
    settings.NOTIFY_RETENTION_DAYS = 90
    sent = _event(lab, days_ago=91, statuses=("sent", "failed"))
    silent = _event(lab, days_ago=200)  # reported to nobody (a kind that is off by default)
    retrying = _event(lab, days_ago=120, statuses=("sent", "pending"))
    sending = _event(lab, days_ago=120, statuses=("sending",))
    unexpanded = _event(lab, days_ago=120, expanded=False)
    recent = _event(lab, days_ago=89, statuses=("sent",))

    assert delivery.cleanup(now=NOW) == 2
    assert _left() == {retrying.pk, sending.pk, unexpanded.pk, recent.pk}
    assert not Delivery.objects.filter(event_id__in=[sent.pk, silent.pk]).exists()
    assert Delivery.objects.filter(event=retrying).count() == 2  # kept whole: its retry is not lost
    assert delivery.cleanup(now=NOW) == 0  # nothing more to do


def test_the_retention_follows_the_setting_and_runs_in_batches(lab, settings, monkeypatch):
    settings.NOTIFY_RETENTION_DAYS = 40
    monkeypatch.setattr(delivery, "CLEANUP_BATCH", 2)
    old = [_event(lab, days_ago=41, statuses=("sent",)) for _ in range(5)]
    kept = _event(lab, days_ago=39, statuses=("sent",))
    assert delivery.cleanup(now=NOW) == len(old)
    assert _left() == {kept.pk}


def test_a_once_per_period_event_is_remembered_for_the_retention(lab, settings):
    from notifications.services import emit

    settings.NOTIFY_RETENTION_DAYS = 31
    key = "allowance.exhausted:1:2026-11-01"
    _event(lab, days_ago=30, key=key)
    delivery.cleanup(now=NOW)
    assert emit(kind="job.failed", department_id=lab.vision.pk, dedupe_key=key).created_at < NOW  # the old one


def test_the_task_is_scheduled_hourly_and_deletes(lab, settings):
    entry = django_settings.CELERY_BEAT_SCHEDULE["notifications-cleanup"]
    assert entry["task"] == tasks.cleanup.name == "notifications.cleanup"
    settings.NOTIFY_RETENTION_DAYS = 90
    _event(lab, days_ago=365, statuses=("sent",))
    assert tasks.cleanup() == 1 and not Event.objects.exists()


@pytest.mark.parametrize("days", ["30", "0", "-5"])
def test_a_retention_shorter_than_a_month_is_refused_with_the_reason(days):
    with pytest.raises(config.ConfigError) as exc:
        config.load({"NOTIFY_RETENTION_DAYS": days})
    [problem] = exc.value.problems
    assert "NOTIFY_RETENTION_DAYS must be at least 31" in problem and "twice" in problem
