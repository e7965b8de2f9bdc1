"""A database connection the server ended is replaced, not failed on: in requests (CONN_HEALTH_CHECKS) and in
pod tasks (retried on OperationalError)."""

from __future__ import annotations

import pytest
from django.db import OperationalError, close_old_connections, connection, connections

from scheduling.models import Job, SimPod


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_a_connection_ended_by_the_server_is_replaced_at_the_next_request(lab):
    connection.ensure_connection()
    pid = connection.connection.info.backend_pid
    other = connections.create_connection("default")
    try:
        with other.cursor() as cur:
            cur.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        other.close()
    close_old_connections()  # what Django does when a request (or, in portal.celery, a task) starts
    assert Job.objects.count() == 0  # no "server closed the connection unexpectedly"
    assert connection.connection.info.backend_pid != pid


@pytest.mark.django_db
def test_a_pod_task_that_loses_its_connection_is_retried(lab, submit, monkeypatch):
    """Eagerly, Celery runs the retry at once (a worker would after the back-off)."""
    from scheduling import tasks

    job = submit(lab.alice)
    SimPod.objects.all().delete()
    calls = []
    from scheduling.services import podsets

    original = podsets.podset_for

    def flaky(j):
        calls.append(j.pk)
        if len(calls) == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return original(j)

    monkeypatch.setattr(podsets, "podset_for", flaky)
    result = tasks.create_pods.apply(args=(job.pk, job.attempt), throw=False)
    assert (result.state, result.result) == ("SUCCESS", "created")  # not FAILURE: retried, and created
    assert len(calls) == 2 and SimPod.objects.filter(job_id=job.pk).count() == 1
