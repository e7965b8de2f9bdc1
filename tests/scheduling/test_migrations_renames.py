"""The architecture step's migrations are state-only: a job's ``gpus`` and a namespace quota refusal's were
renamed to ``gpus_per_pod`` and ``total_gpus`` over the same columns. A database populated before the step keeps
every row, and today's models read them from the same tables (the approval's move: ``test_migrations_approval.py``)."""

from __future__ import annotations

import pytest
from django.db import IntegrityError, connection, transaction
from django.db.migrations.executor import MigrationExecutor

from tests.scheduling.approval_move import leaves, migrated_back  # noqa: F401 - the fixture

# Each test migrates the whole schema back and forth (about 75 s apiece): the move has shipped, so CI keeps
# checking it and a developer's run does not wait for it. One test a file, so that CI's --dist loadfile runs the
# two on its two workers at once.
pytestmark = pytest.mark.ci_only(reason="migrates a shipped move back and forth, about 75 s")


def _populate_before_the_step(old):
    """A small lab as the tables stood before the step: a per-cluster quota, a wallet with a hold, a two-pod
    job that was approved, preempted once and refused by a namespace quota, and its timeline."""
    from datetime import timedelta

    from django.utils import timezone

    now = timezone.now()
    user = old.get_model("auth", "User").objects.create(username="vadmin", password="!")
    dept = old.get_model("portal", "Department").objects.create(slug="vision", name="Vision")
    old.get_model("portal", "Membership").objects.create(user=user, department=dept, role="department_admin")
    flavor = old.get_model("quotas", "Flavor").objects.create(name="a100-80gb")
    cluster = old.get_model("scheduling", "Cluster").objects.create(name="east", is_default=True)
    old.get_model("scheduling", "Node").objects.create(cluster=cluster, name="n1", flavor=flavor, gpus=8)
    old.get_model("quotas", "Quota").objects.create(department=dept, flavor=flavor, nominal=6)
    old.get_model("quotas", "Quota").objects.create(department=dept, flavor=flavor, cluster=cluster, nominal=4,
                                                    lending_limit=2)
    old.get_model("quotas", "QuotaChangeRequest").objects.create(department=dept, flavor=flavor, cluster=cluster,
                                                                 nominal=8, reason="more", requested_by=user)
    job = old.get_model("scheduling", "Job").objects.create(
        owner=user, department=dept, name="train", image="img", command=["true"], flavor=flavor, gpus=3, pods=2,
        state="running", attempt=2, cluster=cluster)
    old.get_model("quotas", "Approval").objects.create(job=job, decision="approved", actor=user, comment="ok")
    old.get_model("scheduling", "JobEvent").objects.create(job=job, attempt=1, kind="transition", to_state="queued")
    preemption = old.get_model("scheduling", "Preemption").objects.create(reason="priority")
    old.get_model("scheduling", "PreemptionVictim").objects.create(preemption=preemption, job=job, attempt=1,
                                                                   status="requeued", gpu_seconds_lost=600)
    old.get_model("scheduling", "NamespaceQuotaRefusal").objects.create(
        job=job, attempt=2, cluster=cluster, namespace="ai-vision", gpus=6, refused_at=now,
        next_retry_at=now + timedelta(seconds=30), expires_at=now + timedelta(hours=1))
    wallet = old.get_model("quotas", "Wallet").objects.create(department=dept, balance=50_000, held=1_000)
    old.get_model("quotas", "LedgerEntry").objects.create(
        wallet=wallet, kind="hold", held_change=1_000, balance_after=50_000, held_after=1_000, job=job, attempt=2,
        user=user, flavor=flavor, rate=2_000, gpus=6, idempotency_key=f"hold:{job.pk}:2")
    return {"user": user.pk, "dept": dept.pk, "flavor": flavor.pk, "cluster": cluster.pk, "job": job.pk}


def test_a_populated_database_migrates_forward_and_every_moved_or_renamed_row_reads_back(migrated_back):  # noqa: F811
    """Every migration of the step on a copy of a populated database: the Approval moved to scheduling and the
    renamed GPU fields (a job's ``gpus`` is ``gpus_per_pod``, a refusal's is ``total_gpus``) read the rows written
    before, through today's models, and the rows that quotas now reaches through the port are all there."""
    ids = _populate_before_the_step(migrated_back)
    MigrationExecutor(connection).migrate(leaves())

    from quotas.models import LedgerEntry, Quota, QuotaChangeRequest, Wallet
    from scheduling.models import Approval, Job, NamespaceQuotaRefusal, PreemptionVictim

    job = Job.objects.get(pk=ids["job"])
    assert (job.gpus_per_pod, job.pods, job.total_gpus, job.attempt, job.cluster_id) == (3, 2, 6, 2, ids["cluster"])
    assert job.events.get().to_state == "queued"
    assert Approval.objects.get(job=job).decision == "approved"
    refusal = NamespaceQuotaRefusal.objects.get(job=job)
    assert (refusal.total_gpus, refusal.attempt, refusal.namespace) == (6, 2, "ai-vision")
    assert PreemptionVictim.objects.get(job=job).gpu_seconds_lost == 600
    assert set(Quota.objects.values_list("cluster_id", "nominal", "lending_limit")) == {(None, 6, None),
                                                                                       (ids["cluster"], 4, 2)}
    assert QuotaChangeRequest.objects.get().cluster_id == ids["cluster"]
    assert (Wallet.objects.get().balance, Wallet.objects.get().held) == (50_000, 1_000)
    hold = LedgerEntry.objects.get()
    assert (hold.job_id, hold.attempt, hold.gpus, hold.rate) == (ids["job"], 2, 6, 2_000)
    # the renamed columns still take writes through today's names, and the check constraint still holds
    Job.objects.filter(pk=job.pk).update(gpus_per_pod=4)
    assert Job.objects.get(pk=job.pk).total_gpus == 8
    # (a job of no GPUs is a CPU-only job now; a job of no pods is still refused)
    with pytest.raises(IntegrityError), transaction.atomic():
        Job.objects.filter(pk=job.pk).update(pods=0)
    # every existing job is one role, "main", of its own size
    role = job.roles.get()
    assert (role.name, role.pods, role.gpus_per_pod, role.image, role.command) == ("main", 2, 3, "", None)
