"""``manage.py seed_scale``: the data set the pages are measured on (docs/operations.md, "Benchmarks")."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.core.management import CommandError, call_command

from lab.scale import seed_scale
from quotas.models import LedgerEntry
from scheduling.models import Job, JobEvent, JobState

pytestmark = pytest.mark.django_db


def test_seeds_jobs_in_every_state_with_their_timelines_and_ledger_rows():
    made = seed_scale(jobs=400, departments=2, users=20, batch=150)
    assert made.jobs == Job.objects.count() == 400
    states = set(Job.objects.values_list("state", flat=True))
    assert {JobState.SUCCEEDED, JobState.QUEUED, JobState.RUNNING, JobState.CANCELLED} <= states
    assert made.events == JobEvent.objects.count() >= 400  # at least the submission of each
    # a hold per job that ran, a settle per finished run (the rest are the lab's opening balances)
    assert made.ledger == LedgerEntry.objects.filter(job__isnull=False).count() > 0
    assert LedgerEntry.objects.filter(kind="hold").count() == Job.objects.filter(admitted_at__isnull=False).count()
    assert Job.objects.values("owner").distinct().count() > 10


def test_a_second_run_tops_up_and_adds_nothing_when_there_is_enough():
    seed_scale(jobs=100, departments=1, users=5)
    assert seed_scale(jobs=100, departments=1, users=5).jobs == 0
    assert seed_scale(jobs=150, departments=1, users=5).jobs == 50
    assert Job.objects.count() == 150
    assert get_user_model().objects.filter(username__startswith="scale-u").count() == 5


def test_refuses_a_database_with_real_users_unless_forced():
    get_user_model().objects.create_user(username="maria")
    with pytest.raises(CommandError, match="maria.*--force"):
        call_command("seed_scale", "--jobs", "10")
    assert not Job.objects.exists()
    call_command("seed_scale", "--jobs", "10", "--users", "3", "--departments", "0", "--force")
    assert Job.objects.count() == 10


def test_bad_sizes_are_refused():
    with pytest.raises(CommandError, match="--users"):
        call_command("seed_scale", "--users", "0")
