"""A waiting job that will miss its deadline says so in its reason and its owner is told, once."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from notifications.models import Event
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster

pytestmark = pytest.mark.django_db


def test_a_job_that_will_miss_its_deadline_says_so_and_its_owner_is_told_once(lab, submit, go, settings):
    from scheduling.backends import reset_backends

    settings.SIM_SPEEDUP = 60
    reset_backends()
    blocker = go(submit, lab.alice, name="long", pods=2, gpus=4, max_runtime_s=8 * 3600)  # 8 min of the wall
    go(run_cycle)
    go(sync_cluster)
    blocker.refresh_from_db()
    assert blocker.state == "running"
    deadline = timezone.now() + timedelta(minutes=3)
    late = go(submit, lab.bob, name="urgent", gpus=4, max_runtime_s=3600, deadline=deadline.isoformat())
    on_time = go(submit, lab.bob, name="relaxed", gpus=4, max_runtime_s=3600,
                 deadline=(timezone.now() + timedelta(hours=2)).isoformat())
    go(run_cycle)
    late.refresh_from_db()
    on_time.refresh_from_db()
    assert late.state == "queued" and "after its deadline" in late.reason_message, late.reason_message
    assert late.reason_detail["deadline_miss"]["late_s"] > 0
    assert "deadline" not in on_time.reason_message and "deadline_miss" not in on_time.reason_detail
    go(run_cycle)  # still late: not told again
    [event] = Event.objects.filter(kind="job.deadline_at_risk")
    assert event.user_ids == [lab.bob.pk] and event.data["job_id"] == late.pk and event.data["late_min"] >= 1
