"""A hypothesis state machine drives random sequences of refill, hold, settle, release, refund, cancel and
adjustment against one wallet (through the real services and database) and checks after every step that
the wallet matches an independent model, never overspends, and equals the sum of its ledger."""

from __future__ import annotations

import itertools
from datetime import timedelta

import pytest
from django.utils import timezone
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st
from hypothesis.stateful import (
    Bundle,
    RuleBasedStateMachine,
    consumes,
    invariant,
    rule,
    run_state_machine_as_test,
)

from portal.errors import ValidationFailed
from portal.models import Department
from quotas.models import LedgerEntry, Wallet
from quotas.services import periodic, wallets
from scheduling.models import Job, JobState
from scheduling.services.jobs import budget_attempt_ended

_ids = itertools.count()


def make_machine(lab):
    class WalletMachine(RuleBasedStateMachine):
        holds = Bundle("holds")
        settled = Bundle("settled")

        def __init__(self):
            super().__init__()
            n = next(_ids)
            self.dept = Department.objects.create(slug=f"sm-{n}", name=f"sm {n}")
            self.wallet = wallets.wallet_create(department=self.dept)
            self.balance = self.held = 0
            self.open: dict[int, int] = {}  # job id -> still held
            self.charged: dict[int, int] = {}  # job id -> charged, refundable
            self.periods: list[str] = []

        def _job(self, gpus: int, minutes_ago: int) -> Job:
            return Job.objects.create(owner=lab.alice, department=self.dept, name="sm", image="x", command=["x"],
                                      flavor=lab.a100, gpus_per_pod=gpus, max_runtime_s=3600, state=JobState.ADMITTED,
                                      admitted_at=timezone.now() - timedelta(minutes=minutes_ago))

        @rule(amount=st.integers(0, 20_000), again=st.booleans())
        def refill(self, amount, again):
            if again and self.periods:
                period = self.periods[-1]  # beat firing twice for the same period: nothing happens
                assert wallets.wallet_refill(department=self.dept, period=period, amount=amount) is None
                return
            period = f"p{len(self.periods)}"
            self.periods.append(period)
            wallets.wallet_refill(department=self.dept, period=period, amount=amount)
            self.balance += amount

        @rule(target=holds, gpus=st.integers(1, 8), minutes=st.integers(0, 90))
        def hold(self, gpus, minutes):
            job = self._job(gpus, minutes)
            amount = gpus * 1000
            try:
                wallets.wallet_hold(job=job, attempt=1, amount=amount, rate=1000,
                                     data={"admitted_at": job.admitted_at.isoformat(), "max_runtime_s": 3600})
            except wallets.InsufficientCredits:
                assert amount > self.balance - self.held
                return job.pk  # a job without a hold: every later step on it is a no-op
            assert amount <= self.balance - self.held
            self.held += amount
            self.open[job.pk] = amount
            return job.pk

        @rule(target=settled, job_id=consumes(holds), share=st.floats(0, 1.5))
        def settle(self, job_id, share):
            job = Job.objects.get(pk=job_id)
            still = self.open.pop(job_id, 0)
            want = int(still * share)
            wallets.wallet_settle(job=job, attempt=1, amount=want)
            wallets.wallet_settle(job=job, attempt=1, amount=want)  # duplicated: applied once
            charge = min(want, still)
            self.balance -= charge
            self.held -= still
            self.charged[job_id] = charge
            return job_id

        @rule(job_id=consumes(holds))
        def release(self, job_id):
            wallets.wallet_release(job=Job.objects.get(pk=job_id), attempt=1)
            self.held -= self.open.pop(job_id, 0)

        @rule(target=settled, job_id=consumes(holds), outcome=st.sampled_from(
            ["cancelled", "failed", "succeeded", "platform_failure"]))
        def end_attempt(self, job_id, outcome):
            """The lifecycle hook: charge GPU-time since admission (capped at the hold), refund if the platform
            failed."""
            job = Job.objects.get(pk=job_id)
            Job.objects.filter(pk=job_id).update(finished_at=timezone.now())
            job.refresh_from_db()
            budget_attempt_ended(job=job, attempt=1, outcome=outcome)
            still = self.open.pop(job_id, 0)
            settle = LedgerEntry.objects.filter(job=job, kind="settle").first()
            charge = -settle.amount if settle else 0
            assert charge <= still
            refund = LedgerEntry.objects.filter(job=job, kind="refund").first()
            if outcome == "platform_failure":
                assert (refund.amount if refund else 0) == charge
            else:
                assert refund is None
            self.balance += -charge + (refund.amount if refund else 0)
            self.held -= still
            self.charged[job_id] = 0 if refund else charge
            return job_id

        @rule(job_id=settled, share=st.floats(0, 2))
        def refund(self, job_id, share):
            job = Job.objects.get(pk=job_id)
            before = LedgerEntry.objects.filter(job=job, kind="refund").exists()
            refundable = self.charged.get(job_id, 0)
            entry = wallets.wallet_refund(job=job, attempt=1, amount=int(refundable * share), reason="test")
            if before or entry is None:
                return
            assert entry.amount <= refundable
            self.balance += entry.amount
            self.charged[job_id] = 0

        @rule(amount=st.integers(-5000, 5000))
        def adjust(self, amount):
            if amount == 0:
                return
            try:
                wallets.wallet_adjust(department=self.dept, amount=amount, actor=None, comment="sm")
            except ValidationFailed:
                assert -amount > self.balance - self.held
                return
            self.balance += amount

        @invariant()
        def matches_model_and_ledger(self):
            w = Wallet.objects.get(pk=self.wallet.pk)
            assert (w.balance, w.held) == (self.balance, self.held)
            assert 0 <= w.held <= w.balance
            assert w.held == sum(self.open.values())
            assert not [d for d in periodic.ledger_drift() if d.department == self.dept.slug]
            last = LedgerEntry.objects.filter(wallet=w).order_by("-id").first()
            if last is not None:
                assert (last.balance_after, last.held_after) == (w.balance, w.held)

    return WalletMachine


@pytest.mark.django_db
def test_wallet_state_machine(lab):
    machine = make_machine(lab)
    run_state_machine_as_test(machine, settings=settings(
        max_examples=25, stateful_step_count=15, deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much]))
