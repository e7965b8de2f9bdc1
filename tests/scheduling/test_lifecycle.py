"""The job lifecycle: compare-and-set transitions, the allowed moves, the append-only timeline."""

from __future__ import annotations

import pytest

from scheduling.models import TRANSITIONS, Job, JobEvent, JobState
from scheduling.services.jobs import transition

pytestmark = pytest.mark.django_db


def test_transition_is_compare_and_set(lab, submit):
    job = submit(lab.alice)
    stale = Job.objects.get(pk=job.pk)
    assert transition(job=job, to=JobState.CANCELLED, reason_code="cancelled")
    # a second process still holding the queued row loses cleanly instead of overwriting
    assert not transition(job=stale, to=JobState.ADMITTED, allowed_from=[JobState.QUEUED])
    assert Job.objects.get(pk=job.pk).state == JobState.CANCELLED
    assert [e.to_state for e in job.events.all()] == ["queued", "cancelled"]


@pytest.mark.parametrize("source", list(TRANSITIONS))
def test_only_declared_moves_are_possible(lab, submit, source):
    job = submit(lab.alice)
    for target in JobState.values:
        Job.objects.filter(pk=job.pk).update(state=source)
        job.refresh_from_db()
        moved = transition(job=job, to=target)
        assert moved == (target in TRANSITIONS[source]), (source, target)


def test_transition_checks_attempt(lab, submit):
    job = submit(lab.alice)
    assert not transition(job=job, to=JobState.ADMITTED, attempt=job.attempt + 1)
    assert transition(job=job, to=JobState.ADMITTED, attempt=job.attempt)


def test_events_are_append_only_in_python(lab, submit):
    job = submit(lab.alice)
    event = job.events.get()
    event.message = "rewritten"
    with pytest.raises(ValueError, match="append-only"):
        event.save()
    with pytest.raises(ValueError, match="append-only"):
        event.delete()
    assert JobEvent.objects.get(pk=event.pk).message == "submitted"
