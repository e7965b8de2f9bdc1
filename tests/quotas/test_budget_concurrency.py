"""Money under concurrency, against real PostgreSQL: parallel holds never overspend, a duplicated settle
applies once, a refill happens once per period however many workers fire it, and the database itself
refuses to rewrite the ledger."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from django.db import DatabaseError, IntegrityError, connection, connections, transaction
from django.utils import timezone

from portal.errors import ValidationFailed
from quotas.models import LedgerEntry, RefillRecord, RefillRule, Wallet
from quotas.services import settlement, wallets
from scheduling.models import Job, JobState

THREADS = 16


def _jobs(lab, n, *, gpus=1, runtime=3600, dept=None, owner=None):
    return [Job.objects.create(owner=owner or lab.alice, department=dept or lab.vision, name=f"c{i}", image="x",
                               command=["true"], flavor=lab.a100, gpus_per_pod=gpus, max_runtime_s=runtime,
                               state=JobState.ADMITTED, admitted_at=timezone.now() - timedelta(minutes=30))
            for i in range(n)]


def _in_threads(fn, items, threads=THREADS):
    """Run fn(item) for every item from ``threads`` threads released together; returns results/errors."""
    barrier = threading.Barrier(threads)
    results, errors = [], []
    lock = threading.Lock()
    chunks = [items[i::threads] for i in range(threads)]

    def worker(chunk):
        try:
            barrier.wait()
            for item in chunk:
                try:
                    r = fn(item)
                    with lock:
                        results.append(r)
                except Exception as exc:  # noqa: BLE001 - collected and asserted on
                    with lock:
                        errors.append(exc)
        finally:
            connections.close_all()

    ts = [threading.Thread(target=worker, args=(c,)) for c in chunks]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    return results, errors


class Monitor(threading.Thread):
    """Samples the wallet row while the workers run: it must never be seen overspent."""

    def __init__(self, wallet_id):
        super().__init__(daemon=True)
        self.wallet_id, self.samples, self.stop = wallet_id, [], threading.Event()

    def run(self):
        try:
            while not self.stop.is_set():
                self.samples.append(Wallet.objects.filter(pk=self.wallet_id).values_list("balance", "held").get())
        finally:
            connections.close_all()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_parallel_holds_never_overspend(money, consistent):
    wallet = Wallet.objects.get(department=money.nlp)  # 10_000 mcr: room for exactly ten 1000-mcr holds
    jobs = _jobs(money, 48, dept=money.nlp, owner=money.bob)
    monitor = Monitor(wallet.pk)
    monitor.start()

    def hold(job):
        return wallets.wallet_hold(job=job, attempt=1, amount=1000, rate=1000)

    results, errors = _in_threads(hold, jobs)
    monitor.stop.set()
    monitor.join(5)
    assert len(results) == 10
    assert len(errors) == 38 and all(isinstance(e, wallets.InsufficientCredits) for e in errors), errors[:3]
    wallet.refresh_from_db()
    assert (wallet.balance, wallet.held) == (10_000, 10_000)
    assert monitor.samples and all(0 <= held <= balance for balance, held in monitor.samples)
    consistent()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_parallel_mixed_movements_keep_balance_equal_to_the_ledger(money, consistent):
    wallet = Wallet.objects.get(department=money.vision)
    jobs = _jobs(money, 40)
    for j in jobs[:20]:
        wallets.wallet_hold(job=j, attempt=1, amount=1000, rate=1000)
    ops = ([("settle", j) for j in jobs[:20]] * 2 + [("release", j) for j in jobs[:10]]
           + [("hold", j) for j in jobs[20:]] + [("adjust", i) for i in range(10)])

    def op(item):
        kind, x = item
        if kind == "settle":
            return settlement.settle_attempt(job=x, attempt=1, outcome="succeeded", end=timezone.now())
        if kind == "release":
            return wallets.wallet_release(job=x, attempt=1)
        if kind == "hold":
            return wallets.wallet_hold(job=x, attempt=1, amount=3000, rate=1000)
        return wallets.wallet_adjust(department=money.vision, amount=-100, actor=None, comment="fee")

    _, errors = _in_threads(op, ops)
    assert all(isinstance(e, wallets.InsufficientCredits | ValidationFailed) for e in errors), errors
    wallet.refresh_from_db()
    assert 0 <= wallet.held <= wallet.balance
    assert LedgerEntry.objects.filter(kind="settle").count() <= 20
    assert LedgerEntry.objects.filter(kind="settle").values("job").distinct().count() == \
        LedgerEntry.objects.filter(kind="settle").count()
    consistent()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_duplicated_settle_applies_once_under_concurrency(money, consistent):
    job = _jobs(money, 1)[0]
    wallets.wallet_hold(job=job, attempt=1, amount=1000, rate=1000, data={
        "admitted_at": (timezone.now() - timedelta(minutes=30)).isoformat()})

    def settle(_):  # each thread reads the job itself, as the lifecycle hook and the hold repair do
        return settlement.settle_attempt(job=Job.objects.get(pk=job.pk), attempt=1, outcome="succeeded")

    results, errors = _in_threads(settle, list(range(THREADS)))
    assert errors == [] and len(results) == THREADS
    assert len({(r.charged, r.refunded, r.gpu_seconds) for r in results}) == 1  # every duplicate: the first
    assert LedgerEntry.objects.filter(job=job, kind="settle").count() == 1
    assert LedgerEntry.objects.filter(job=job, kind="release").count() == 1
    w = Wallet.objects.get(department=money.vision)
    settle = LedgerEntry.objects.get(job=job, kind="settle")
    assert 499 <= -settle.amount <= 502 and w.held == 0 and w.balance == 100_000 + settle.amount
    consistent()


@pytest.mark.postgres
@pytest.mark.django_db(transaction=True)
def test_refill_happens_once_per_period_even_if_beat_fires_many_times(money, consistent):
    from quotas import tasks

    RefillRule.objects.create(department=money.vision, mode="per_nominal_gpu", amount=1000, period="monthly")
    RefillRule.objects.create(department=money.nlp, mode="fixed", amount=7000, period="weekly")
    results, errors = _in_threads(lambda _: tasks.refill.apply().get(), list(range(THREADS)))
    assert errors == []
    assert sum(results) == 2
    assert RefillRecord.objects.count() == 2
    assert Wallet.objects.get(department=money.vision).balance == 100_000 + 4 * 1000
    assert Wallet.objects.get(department=money.nlp).balance == 10_000 + 7000
    consistent()


@pytest.mark.postgres
@pytest.mark.django_db
def test_database_refuses_to_update_or_delete_ledger_entries(money):
    entry = LedgerEntry.objects.filter(wallet__department=money.vision).first()
    for statement in ("UPDATE quotas_ledgerentry SET amount = 0 WHERE id = %s",
                      "DELETE FROM quotas_ledgerentry WHERE id = %s"):
        with pytest.raises(DatabaseError, match="append-only"), transaction.atomic(), connection.cursor() as cur:
            cur.execute(statement, [entry.pk])
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        LedgerEntry.objects.filter(pk=entry.pk).update(memo="rewritten")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        LedgerEntry.objects.filter(pk=entry.pk).delete()
    assert LedgerEntry.objects.get(pk=entry.pk).amount == entry.amount


@pytest.mark.django_db
def test_python_guards_and_check_constraints(money):
    entry = LedgerEntry.objects.first()
    with pytest.raises(ValueError, match="append-only"):
        entry.save()
    with pytest.raises(ValueError, match="append-only"):
        entry.delete()
    wallet = Wallet.objects.get(department=money.nlp)
    for bad in ({"balance": -1, "held": 0}, {"held": -1}, {"held": wallet.balance + 1}):
        with pytest.raises(IntegrityError), transaction.atomic():
            Wallet.objects.filter(pk=wallet.pk).update(**bad)
    with pytest.raises(IntegrityError), transaction.atomic():  # a hold cannot change the balance
        LedgerEntry.objects.create(wallet=wallet, kind="hold", amount=5, held_change=5, balance_after=5,
                                   held_after=5, idempotency_key="bad-hold")
    with pytest.raises(IntegrityError), transaction.atomic():  # keys are unique
        LedgerEntry.objects.create(wallet=wallet, kind="refill", amount=5, balance_after=5, held_after=0,
                                   idempotency_key=entry.idempotency_key)
