"""A resizable job's money follows its size: held for the size it was admitted at, a grow's GPUs held at the
rate of borrowed capacity (the cycle's clearing price, at least the base price) for the rest of its max runtime,
a shrink taking the newest GPUs off first, and settlement charging each size from its resize on; the ledger
stays consistent with the wallets all along."""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime, timedelta

import pytest
from django.db import transaction

from quotas import budgets
from quotas.models import LedgerEntry, Wallet
from quotas.services import reports, settlement
from quotas.services.wallets import hold_key, wallet_resize
from scheduling.models import Job, JobState
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.jobs import job_cancel

pytestmark = pytest.mark.django_db


@pytest.fixture
def running(money, submit, go):
    """Bob's 4-GPU job on one node; Alice's job of 2 to 8 one-GPU pods (2 hours at most) admitted at 3."""
    lab = money
    blocker = submit(lab.bob, gpus=4, max_runtime_s=1800)
    go(run_cycle)
    job = submit(lab.alice, gpus=1, pods=8, min_pods=2, checkpoint_interval_s=600, max_runtime_s=7200)
    go(run_cycle)
    go(sync_cluster)
    job.refresh_from_db()
    assert job.state == JobState.RUNNING and job.size == 3
    return lab, blocker, job


def resize(job, *, to, price=None, at, resize_id):
    with transaction.atomic():
        budgets.lock_department_wallets([job.department_id])
        return budgets.on_job_resized(job=job, attempt=job.attempt, resize_id=resize_id, pods_before=job.size,
                                      pods_after=to, price=price, at=at)


def test_the_hold_is_for_the_size_admitted_at(running, consistent):
    lab, _, job = running
    hold = LedgerEntry.objects.get(idempotency_key=hold_key(job.pk, job.attempt))
    assert (hold.gpus, hold.rate, hold.held_change) == (3, 1000, 3 * 1000 * 2)
    assert hold.data["resizable"] is True
    consistent()


def test_a_grow_applied_by_the_cycle_holds_its_gpus_and_the_wallet_stays_consistent(running, go, consistent):
    lab, blocker, job = running
    go(job_cancel, user=lab.bob, job=blocker)
    go(run_cycle)
    job.refresh_from_db()
    due = datetime.fromisoformat(job.resize["due_at"])
    held = Wallet.objects.get(department=lab.vision).held
    go(run_cycle, now=due + timedelta(seconds=1))
    job.refresh_from_db()
    assert job.size == 8
    entry = LedgerEntry.objects.get(job=job, kind="resize")
    hold = LedgerEntry.objects.get(idempotency_key=hold_key(job.pk, job.attempt))
    left_h = (7200 - (due - datetime.fromisoformat(hold.data["admitted_at"])).total_seconds()) / 3600
    assert entry.data["lots"] == [[3, 1000, 0], [5, 1000, 1]] and entry.gpus == 8
    assert entry.held_change == pytest.approx(5 * 1000 * left_h, abs=2)
    assert Wallet.objects.get(department=lab.vision).held == held + entry.held_change
    note = job.events.get(kind="budget", reason_code="resize")
    assert "size 3 -> 8 pods" in note.message
    assert reports.job_cost(job=job)["hold"] == hold.held_change + entry.held_change
    consistent()

    go(job_cancel, user=lab.alice, job=job)  # settled size by size, the rest released
    settle = LedgerEntry.objects.get(job=job, kind="settle")
    gpu_seconds, cost = settlement.attempt_usage(hold=hold, end=Job.objects.get(pk=job.pk).finished_at)
    assert (settle.gpu_seconds, -settle.amount) == (gpu_seconds, cost)
    assert Wallet.objects.get(department=lab.vision).held == 0
    consistent()


def test_grown_gpus_cost_their_own_rate_and_a_shrink_takes_the_newest_off_first(running, consistent):
    lab, _, job = running
    hold = LedgerEntry.objects.get(idempotency_key=hold_key(job.pk, job.attempt))
    t0 = datetime.fromisoformat(hold.data["admitted_at"])
    resize(job, to=8, price=2500, at=t0 + timedelta(hours=1), resize_id=1)
    grown = LedgerEntry.objects.get(job=job, kind="resize")
    assert grown.data["lots"] == [[3, 1000, 0], [5, 2500, 1]]
    assert grown.held_change == 5 * 2500 * 1  # one hour of the two left
    job.current_pods = 8
    resize(job, to=4, at=t0 + timedelta(minutes=90), resize_id=2)
    job.current_pods = 4
    resize(job, to=2, at=t0 + timedelta(minutes=105), resize_id=3)
    lots = [e.data["lots"] for e in LedgerEntry.objects.filter(job=job, kind="resize").order_by("id")]
    assert lots == [[[3, 1000, 0], [5, 2500, 1]], [[3, 1000, 0], [1, 2500, 1]], [[2, 1000, 0]]]
    # 3 GPUs for 1 h at 1000, 8 for 30 min (3 at 1000, 5 at 2500), 4 for 15 min, 2 for the last 15 min (capped
    # at the 2-hour max runtime however late it ends)
    gpu_seconds, cost = settlement.attempt_usage(hold=hold, end=t0 + timedelta(hours=5))
    assert gpu_seconds == 3 * 3600 + 8 * 1800 + 4 * 900 + 2 * 900
    assert cost == 3000 + (1500 + 6250) + (750 + 625) + 500
    # the same resize twice is recorded once
    job.current_pods = 2
    resize(job, to=4, at=t0 + timedelta(minutes=110), resize_id=3)
    assert LedgerEntry.objects.filter(job=job, kind="resize").count() == 3
    consistent()


def test_a_job_cancelled_while_its_resize_is_applied_is_settled_at_its_size_and_the_resize_goes_stale(
        running, go, consistent):
    from scheduling.services import pods, resizes

    lab, blocker, job = running
    go(job_cancel, user=lab.bob, job=blocker)
    go(run_cycle)
    job.refresh_from_db()
    resizes.start_due(now=datetime.fromisoformat(job.resize["due_at"]) + timedelta(seconds=1))  # (not sent yet)
    job.refresh_from_db()
    assert job.resize["state"] == resizes.APPLYING
    go(job_cancel, user=lab.alice, job=job)
    assert pods.resize_pods(job_id=job.pk, attempt=job.attempt, resize_id=job.resize["id"]) == "stale"
    assert not LedgerEntry.objects.filter(job=job, kind="resize").exists()
    settle = LedgerEntry.objects.get(job=job, kind="settle")
    assert settle.gpus == 3  # charged at the size it ran at
    assert Wallet.objects.get(department=lab.vision).held == 0
    consistent()


# Refunds on preemption, lot by lot: the admitted GPUs on the admission's terms, each grow's as borrowed capacity,
# each from its own start at its own rate.

def preempt(job, *, at):
    return settlement.settle_attempt(job=job, attempt=job.attempt, outcome="preempted", end=at,
                                     preempted_by_portal=True)


def test_a_job_admitted_inside_its_quota_gets_back_its_admitted_gpus_not_its_borrowed_grow(running, consistent):
    lab, _, job = running
    hold = LedgerEntry.objects.get(idempotency_key=hold_key(job.pk, job.attempt))
    assert hold.data["borrowed"] is False  # 3 of vision's nominal 4
    t0 = datetime.fromisoformat(hold.data["admitted_at"])
    resize(job, to=8, price=2500, at=t0 + timedelta(hours=1), resize_id=1)
    done = preempt(job, at=t0 + timedelta(minutes=90))
    # 3 admitted GPUs for 1.5 h at 1000 (refunded: inside the quota), 5 grown ones for 30 min at 2500 (kept)
    assert (done.charged, done.refunded) == (4500 + 6250, 4500)
    refund = LedgerEntry.objects.get(job=job, kind="refund")
    assert refund.amount == 4500
    assert [(lot["gpus"], lot["rate"], lot["borrowed"], lot["since"], lot["charged"], lot["refunded"])
            for lot in refund.data["lots"]] == [
        (3, 1000, False, t0.isoformat(), 4500, 4500),
        (5, 2500, True, (t0 + timedelta(hours=1)).isoformat(), 6250, 0)]
    assert refund.memo == (f"by lot: 3 GPU(s) inside the quota since {t0.isoformat()[11:19]} 4.500 cr of 4.500 cr; "
                           f"5 GPU(s) borrowed since {(t0 + timedelta(hours=1)).isoformat()[11:19]} 0.000 cr of 6.250 cr")
    assert Wallet.objects.get(department=lab.vision).held == 0
    consistent()


def test_a_job_admitted_on_borrowed_capacity_and_grown_gets_nothing_back_for_either_lot(
        money, submit, go, consistent):
    lab = money
    go(run_cycle)
    submit(lab.amy, gpus=4, max_runtime_s=7200)  # vision's nominal 4 in use
    go(run_cycle)
    job = submit(lab.alice, gpus=1, pods=8, min_pods=2, checkpoint_interval_s=600, max_runtime_s=7200)
    go(run_cycle)
    go(sync_cluster)
    job.refresh_from_db()
    hold = LedgerEntry.objects.get(idempotency_key=hold_key(job.pk, job.attempt))
    assert hold.data["borrowed"] is True and (job.size, hold.rate) == (3, 1000)
    t0 = datetime.fromisoformat(hold.data["admitted_at"])
    resize(job, to=5, price=2500, at=t0 + timedelta(hours=1), resize_id=1)
    done = preempt(job, at=t0 + timedelta(minutes=90))
    assert (done.charged, done.refunded) == (3 * 1500 + 2 * 1250, 0)
    assert not LedgerEntry.objects.filter(job=job, kind="refund").exists()
    consistent()


def test_a_grow_shrunk_away_before_the_preemption_is_charged_its_time_and_the_admitted_lot_refunded_from_admission(
        running, consistent):
    lab, _, job = running
    hold = LedgerEntry.objects.get(idempotency_key=hold_key(job.pk, job.attempt))
    t0 = datetime.fromisoformat(hold.data["admitted_at"])
    resize(job, to=8, price=2500, at=t0 + timedelta(hours=1), resize_id=1)
    job.current_pods = 8
    resize(job, to=3, at=t0 + timedelta(minutes=90), resize_id=2)
    done = preempt(job, at=t0 + timedelta(hours=2))
    # 3 admitted GPUs for 2 h at 1000, refunded in full; the grown 5 for their 30 min at 2500, not refunded
    assert (done.charged, done.refunded) == (6000 + 6250, 6000)
    refund = LedgerEntry.objects.get(job=job, kind="refund")
    assert [(lot["gpus"], lot["borrowed"], lot["charged"], lot["refunded"]) for lot in refund.data["lots"]] == [
        (5, True, 6250, 0), (3, False, 6000, 6000)]
    consistent()


def test_a_cluster_eviction_of_a_grown_job_is_refunded_in_full_lot_by_lot(running, consistent):
    lab, _, job = running
    hold = LedgerEntry.objects.get(idempotency_key=hold_key(job.pk, job.attempt))
    t0 = datetime.fromisoformat(hold.data["admitted_at"])
    resize(job, to=8, price=2500, at=t0 + timedelta(hours=1), resize_id=1)
    done = settlement.settle_attempt(job=job, attempt=job.attempt, outcome="preempted",
                                     end=t0 + timedelta(minutes=90), preempted_by_portal=False)
    assert (done.charged, done.refunded) == (10750, 10750)
    consistent()


def test_entries_written_before_lots_carried_their_terms_read_the_first_lot_as_the_admitted_one(running):
    lab, _, job = running
    hold = LedgerEntry.objects.get(idempotency_key=hold_key(job.pk, job.attempt))
    t0 = datetime.fromisoformat(hold.data["admitted_at"])
    wallet_resize(job=job, attempt=job.attempt, resize_id=1, amount=0, rate=2500, gpus=8,
                  data={"at": (t0 + timedelta(hours=1)).isoformat(), "lots": [[3, 1000], [5, 2500]]})
    assert settlement.resize_lots(hold)[-1][1] == [[3, 1000, 0], [5, 2500, 1]]


def test_the_timeline_note_of_a_grown_job_preempted_says_what_each_lot_got_back(running):
    lab, _, job = running
    hold = LedgerEntry.objects.get(idempotency_key=hold_key(job.pk, job.attempt))
    t0 = datetime.fromisoformat(hold.data["admitted_at"])
    resize(job, to=8, price=2500, at=t0 + timedelta(hours=1), resize_id=1)
    job.last_preempted_at = t0 + timedelta(minutes=90)
    note = budgets.on_attempt_ended(job=job, attempt=job.attempt, outcome="preempted", preempted_by_portal=True)
    assert "refunded 4.500 cr" in note.message
    assert [(lot["borrowed"], lot["refunded"]) for lot in note.data["lots"]] == [(False, 4500), (True, 0)]


# The simulator settles a resizable job lot by lot with the same money helpers: the same sequence of resizes
# costs the same there as in the ledger.

def simulated(*, admitted, borrowed, steps, end, outcome="preempted", max_runtime_s=7200):
    """What the simulator charges and refunds a resizable job of 1-GPU pods admitted at ``admitted`` GPUs at 0 s
    (``borrowed`` or inside its quota) at the fixture lab's elastic price, resized by ``steps`` ((at s, GPUs,
    clearing price)) and ended at ``end`` s with ``outcome``: its own hold, resize and settle code driven as a
    run drives it."""
    from simulator.jobs import prepare
    from simulator.simulator import Simulator
    from simulator.trace import TraceRow
    from tests.sim.helpers import small_scenario

    sc = small_scenario(departments={"a": {"quotas": {"a100": {"nominal": 4}}, "budget": 10**9,
                                           "members": {"alice": "pi"}}}, prices={"a100": {"elastic": 1000}})
    sc, jobs, _ = prepare(sc, rows=[TraceRow("r", 0, 20000, 8, "a", tier="elastic")], load=None)
    spec = replace(jobs[0], pods=8, gpus_per_pod=1, min_pods=2, max_runtime_s=max_runtime_s)
    sim = Simulator(nodes=sc.nodes(), quotas=sc.quotas(), policy_obj=sc.policy(), jobs=[spec], decide=None,
                    options=sc.options, budgets=sc.budgets(), prices=sc.prices)
    rec = sim.records[spec.id]
    rec.state, rec.start, rec.attempt_start, rec.size, rec.borrowed = "running", 0.0, 0.0, admitted, borrowed
    sim._hold(rec, None)
    held = [rec.hold]
    for at, gpus, price in steps:
        rec.resize_price = price
        rec.size = gpus
        sim._hold_grow(rec, at, gpus)
        held.append(rec.hold)
    sim._settle(rec, end, preempted=outcome == "preempted", outcome=outcome)
    spent = sim.spent["a"]
    return spent["charged"], spent["refunded"], held


@pytest.mark.parametrize(("steps", "end_min", "outcome"), [
    ([(60, 8, 2500)], 90, "preempted"),  # the grown lot kept, the admitted one refunded
    ([(60, 8, 2500), (90, 4, None), (105, 2, None)], 300, "preempted"),  # shrunk below the admission, capped
    ([(60, 8, 2500), (90, 3, None)], 120, "preempted"),  # the grow shrunk away before the preemption
    ([(30, 5, None), (60, 8, 4000)], 100, "platform_failure"),  # two grows, every lot refunded
    ([(60, 8, 2500), (90, 6, None)], 110, "succeeded"),  # nothing refunded
])
def test_the_simulator_settles_a_resized_job_as_the_ledger_does(running, steps, end_min, outcome):
    lab, _, job = running
    hold = LedgerEntry.objects.get(idempotency_key=hold_key(job.pk, job.attempt))
    t0 = datetime.fromisoformat(hold.data["admitted_at"])
    held = [hold.held_change]
    for i, (at, gpus, price) in enumerate(steps, start=1):
        note = resize(job, to=gpus, price=price, at=t0 + timedelta(minutes=at), resize_id=i)
        held.append(held[-1] + note.data["held"])
        job.current_pods = gpus
    done = settlement.settle_attempt(job=job, attempt=job.attempt, outcome=outcome,
                                     end=t0 + timedelta(minutes=end_min), preempted_by_portal=True)
    charged, refunded, sim_held = simulated(admitted=3, borrowed=bool(hold.data["borrowed"]),
                                            steps=[(at * 60.0, g, p) for at, g, p in steps], end=end_min * 60.0,
                                            outcome=outcome)
    assert (charged, refunded) == (done.charged, done.refunded)
    assert sim_held == held
    if outcome == "preempted" and steps[-1][1] > 3:  # a borrowed lot still held: not everything comes back
        assert 0 < done.refunded < done.charged


# The ledger shows the lots: the API's entries and the wallet page, to the department's members only.

@pytest.fixture
def browser():
    from django.test import Client

    def as_user(user):
        c = Client()
        c.force_login(user)
        return c

    return as_user


def test_the_ledger_shows_a_resized_attempt_lot_by_lot_to_its_department_only(running, client_for, browser):
    lab, blocker, job = running
    hold = LedgerEntry.objects.get(idempotency_key=hold_key(job.pk, job.attempt))
    t0 = datetime.fromisoformat(hold.data["admitted_at"])
    t1 = t0 + timedelta(hours=1)
    resize(job, to=8, price=2500, at=t1, resize_id=1)
    preempt(job, at=t0 + timedelta(minutes=90))
    rows = client_for(lab.alice).get(f"/api/v1/ledger?job={job.pk}").json()["results"]
    by_kind = {r["kind"]: r["lots"] for r in rows}
    settled = [{"gpus": 3, "rate": 1000, "borrowed": False, "since": t0.isoformat(), "gpu_seconds": 3 * 5400,
                "charged": 4500, "refunded": 4500},
               {"gpus": 5, "rate": 2500, "borrowed": True, "since": t1.isoformat(), "gpu_seconds": 5 * 1800,
                "charged": 6250, "refunded": 0}]
    assert by_kind["settle"] == settled and by_kind["refund"] == settled
    assert by_kind["resize"] == [
        {"gpus": 3, "rate": 1000, "borrowed": False, "since": None, "gpu_seconds": None, "charged": None,
         "refunded": None},
        {"gpus": 5, "rate": 2500, "borrowed": True, "since": None, "gpu_seconds": None, "charged": None,
         "refunded": None}]
    assert by_kind["hold"] == [{"gpus": 3, "rate": 1000, "borrowed": False, "since": t0.isoformat(),
                                "gpu_seconds": None, "charged": None, "refunded": None}]
    assert by_kind["release"] is None  # no lots on the other entries
    # a job that cannot resize has none either
    other = client_for(lab.bob).get(f"/api/v1/ledger?job={blocker.pk}").json()["results"]
    assert other and all(r["lots"] is None for r in other)
    # another department sees neither the entries nor the page
    assert client_for(lab.bob).get(f"/api/v1/ledger?job={job.pk}").json()["results"] == []
    assert all(r["job"] != job.pk for r in client_for(lab.bob).get("/api/v1/ledger").json()["results"])
    assert browser(lab.bob).get("/budgets/vision/").status_code == 404
    page = browser(lab.alice).get("/budgets/vision/").content.decode()
    assert (f"3 GPUs at 1.000 cr/GPU-h, inside the quota since {t0.isoformat()[11:19]}: 4.500 GPU-h, "
            "charged 4.500 cr, refunded 4.500 cr") in page
    assert (f"5 GPUs at 2.500 cr/GPU-h, borrowed since {t1.isoformat()[11:19]}: 2.500 GPU-h, "
            "charged 6.250 cr, refunded 0.000 cr") in page
