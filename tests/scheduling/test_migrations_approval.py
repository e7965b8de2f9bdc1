"""The architecture step's migrations are state-only: the job-approval decision moved from quotas to scheduling
over the same table. An approval written before the move is read, and new ones written, through the moved model
(the renamed GPU fields: ``test_migrations_renames.py``)."""

from __future__ import annotations

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

from tests.scheduling.approval_move import leaves, migrated_back  # noqa: F401 - the fixture

# Each test migrates the whole schema back and forth (about 75 s apiece): the move has shipped, so CI keeps
# checking it and a developer's run does not wait for it. One test a file, so that CI's --dist loadfile runs the
# two on its two workers at once.
pytestmark = pytest.mark.ci_only(reason="migrates a shipped move back and forth, about 75 s")


def test_an_approval_written_before_the_move_is_read_through_the_moved_model(migrated_back):  # noqa: F811
    old = migrated_back
    user = old.get_model("auth", "User").objects.create(username="vadmin", password="!")
    dept = old.get_model("portal", "Department").objects.create(slug="vision", name="Vision")
    old.get_model("portal", "Membership").objects.create(user=user, department=dept, role="department_admin")
    flavor = old.get_model("quotas", "Flavor").objects.create(name="a100-80gb")
    job = old.get_model("scheduling", "Job").objects.create(owner=user, department=dept, name="train", image="img",
                                                             command=["true"], flavor=flavor, gpus=1,
                                                             state="queued")
    old.get_model("quotas", "Approval").objects.create(job=job, decision="approved", actor=user, comment="ok",
                                                       reason="realtime jobs need approval")

    executor = MigrationExecutor(connection)
    executor.migrate(leaves())
    new = executor.loader.project_state(leaves()).apps
    with pytest.raises(LookupError):
        new.get_model("quotas", "Approval")
    assert new.get_model("scheduling", "Approval")._meta.db_table == "quotas_approval"

    from django.contrib.auth import get_user_model

    from portal.tenancy import VIEW
    from scheduling.models import Approval, Job

    approval = Approval.objects.restrict(get_user_model().objects.get(pk=user.pk), VIEW).get()
    assert (approval.job_id, approval.decision, approval.comment, approval.actor_id) == (job.pk, "approved", "ok",
                                                                                         user.pk)
    assert Job.objects.get(pk=job.pk).approval == approval
    # the table takes new rows through the moved model too
    second = Job.objects.create(owner_id=user.pk, department_id=dept.pk, name="b", image="img", command=["true"],
                                flavor_id=flavor.pk, gpus_per_pod=1)
    Approval.objects.create(job=second, decision="rejected", actor_id=user.pk, comment="no")
    assert Approval.objects.count() == 2
