"""Quotas stands below scheduling: what it needs to know of jobs, nodes and clusters comes through
``quotas.ports`` (implemented by scheduling) or as arguments, never from reading a job."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from quotas import ports
from quotas.models import LedgerEntry
from quotas.services import allowances, hooks, periodic, rules, settlement
from scheduling.models import Job, JobState
from scheduling.services.cycle import run_cycle
from scheduling.services.quota_facts import SchedulingQuotaFacts

pytestmark = pytest.mark.django_db


@pytest.fixture
def no_scheduling():
    """Quotas on its own: the port's default (an empty cluster) instead of scheduling's answers."""
    registered = ports.facts()
    ports.register(ports.NoScheduling())
    yield
    ports.register(registered)


def test_scheduling_registers_its_facts_at_startup():
    assert isinstance(ports.facts(), SchedulingQuotaFacts)


def test_the_facts_are_scheduling_s(lab, submit, go):
    facts = ports.facts()
    assert facts.installed_gpus(flavor_id=lab.a100.pk) == 8
    assert facts.installed_gpus(flavor_id=lab.a100.pk, cluster_id=lab.cluster.pk) == 8
    assert facts.installed_gpus(flavor_id=lab.mig.pk) == 0
    assert facts.cluster_named("default") == lab.cluster and facts.cluster_named("nowhere") is None
    running = go(submit, lab.alice, gpus=2)
    go(run_cycle)
    queued = go(submit, lab.alice, gpus=3, bid=7, max_runtime_s=600, tier="backfill")
    assert facts.gpus_in_use() == {(lab.vision.pk, lab.a100.pk, lab.cluster.pk): 2}
    assert facts.queued_costs(owner_id=lab.alice.pk, wallet_id=0) == []  # vision has no wallet
    from quotas.services import wallets

    wallet = wallets.wallet_create(department=lab.vision, actor=lab.root, balance=1000)
    assert facts.queued_costs(owner_id=lab.alice.pk, wallet_id=wallet.pk) == [
        ports.CostInputs(flavor_id=lab.a100.pk, tier="backfill", gpus_per_pod=3, pods=1, max_runtime_s=600, bid=7)]
    state = facts.attempts([running.pk, queued.pk])
    assert state[running.pk].state == JobState.ADMITTED and state[running.pk].active
    assert state[queued.pk].state == JobState.QUEUED and not state[queued.pk].active


def test_without_scheduling_quotas_sees_an_empty_cluster(money, submit, go, no_scheduling):
    lab = money
    job = go(submit, lab.alice, gpus=1)
    assert rules.flavor_capacity(lab.a100) == 0  # no nodes known: every nominal quota is oversubscription
    allowance = allowances.allowance_set(user=lab.alice, limit=10_000, actor=lab.vadmin)
    assert allowances.allowance_used(allowance=allowance) == 0  # no queued jobs known
    go(run_cycle)
    Job.objects.filter(pk=job.pk).update(state=JobState.FAILED, finished_at=timezone.now())
    assert periodic.reconcile_holds() == 0  # where the attempt stands is unknown: the hold is left alone
    assert LedgerEntry.objects.filter(job_id=job.pk, kind="release").count() == 0


def test_the_repair_of_holds_reads_attempts_once_per_wallet_whatever_the_number_of_holds(money, submit, go):
    lab = money

    def queries_with(n: int) -> int:
        for _ in range(n):
            go(submit, lab.alice, gpus=1)
        go(run_cycle)
        assert LedgerEntry.objects.filter(kind="hold").count() >= n
        with CaptureQueriesContext(connection) as q:
            assert periodic.reconcile_holds() == 0  # every attempt still runs: nothing to repair
        return len(q)

    assert queries_with(1) == queries_with(3)


def test_a_preemption_is_refunded_by_what_scheduling_says_it_was(money, submit, go):
    """Borrowed capacity is sold as preemptible: the portal's own preemption of it is charged up to the eviction,
    an eviction the portal did not decide is refunded in full. Scheduling says which (it holds the victims)."""
    lab = money
    ended = []
    for _ in range(2):
        job = go(submit, lab.alice, gpus=1)
        # admitted on borrowed capacity an hour ago, as the engine would, and its hold placed
        Job.objects.filter(pk=job.pk).update(state=JobState.ADMITTED, borrowed=True, price=1400,
                                             admitted_at=timezone.now() - timedelta(hours=1),
                                             last_preempted_at=timezone.now())
        job.refresh_from_db()
        hooks.on_job_admitted(job=job)
        assert LedgerEntry.objects.get(job_id=job.pk, kind="hold").data["borrowed"] is True
        ended.append(job)
    decided, evicted = ended
    assert hooks.on_attempt_ended(job=decided, attempt=1, outcome="preempted", preempted_by_portal=True)
    assert settlement.settle_attempt(job=evicted, attempt=1, outcome="preempted", preempted_by_portal=False)
    assert not LedgerEntry.objects.filter(job_id=decided.pk, kind="refund").exists()
    assert 1399 <= -LedgerEntry.objects.get(job_id=decided.pk, kind="settle").amount <= 1405  # an hour at 1400
    settle = LedgerEntry.objects.get(job_id=evicted.pk, kind="settle")
    assert LedgerEntry.objects.get(job_id=evicted.pk, kind="refund").amount == -settle.amount > 0
