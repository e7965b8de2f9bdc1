"""The demo's background submitter (lab/demo_workload.py): a capped queue, the submission service's rules, its
flags in ``manage.py demo``. Driven by the simulated clock and one ``step()`` at a time: nothing here waits."""

from __future__ import annotations

import random
from dataclasses import replace

import pytest
from django.core.management import CommandError, call_command

from lab import demo
from lab.demo_workload import MIX, TOP_UP, DemoWorkload, Spec, submit, waiting_jobs
from lab.management.commands.demo import background_processes
from portal.models import Department
from quotas.models import LedgerEntry, LedgerKind, Wallet
from quotas.services.user_limits import user_limit_set
from quotas.services.wallets import wallet_set_balance
from scheduling.models import Cluster, Job, JobState
from scheduling.services.cycle import run_cycle
from scheduling.services.inventory import sync_cluster
from scheduling.services.jobs import job_cancel

pytestmark = pytest.mark.django_db


@pytest.fixture
def demo_lab(settings, tmp_path):
    settings.DATA_DIR = str(tmp_path)
    demo.seed(jobs=False)


def _workload(sim_clock, **kw) -> DemoWorkload:
    return DemoWorkload(rng=random.Random(kw.pop("seed", 7)), clock=sim_clock, **kw)


def test_every_kind_of_job_in_the_mix_is_accepted_by_the_demo_lab_as_its_owner(demo_lab, sim_clock):
    """Each spec is a job the shipped lab takes straight into the queue (no approval), owned by the seeded
    user, with the submission recorded as theirs: the same path as POST /api/v1/jobs."""
    wl = _workload(sim_clock)
    for spec in MIX:
        job = submit(spec, wl.body(spec))
        assert (job.state, job.owner.username, job.flavor.name, job.tier) == (
            JobState.QUEUED, spec.user, spec.flavor, spec.tier), spec
        assert job.department == job.owner.membership.department
        assert job.events.get().actor == job.owner
    assert {s.user for s in MIX} == {"alice", "bob", "carol", "dave", "erin"}
    assert {s.tier for s in MIX} == {"elastic", "backfill", "realtime"} and any(max(s.bids) for s in MIX)


def test_the_queue_never_grows_past_its_cap_and_refills_when_jobs_leave_it(demo_lab, sim_clock):
    wl = _workload(sim_clock, rate_per_min=6, max_queued=3)
    outcomes = []
    for _ in range(40):
        outcomes.append(wl.step())
        assert waiting_jobs() <= 3
        sim_clock.advance(15)  # gaps are 5-15 s at 6 a minute: every step is due
    assert outcomes.count("submitted") == 3 and outcomes.count("full") == 37
    job_cancel(user=Job.objects.first().owner, job=Job.objects.first())
    assert wl.step() == "submitted" and waiting_jobs() == 3
    sim_clock.advance(15)
    assert wl.step() == "full"


def test_a_job_awaiting_approval_counts_against_the_cap(demo_lab, sim_clock):
    """A job left waiting for an admin is still in the queue a newcomer sees."""
    big = Spec(1, "alice", "vit-huge", (4,))
    job = submit(big, {"name": "vit-huge", "image": "x", "command": ["t"], "flavor": "a100-80gb", "gpus": 4,
                       "pods": 2})
    assert job.state == JobState.PENDING_APPROVAL
    wl = _workload(sim_clock, max_queued=1)
    assert wl.step() == "full" and Job.objects.count() == 1


def test_it_submits_at_about_its_rate_and_never_in_bursts(demo_lab, sim_clock):
    """At 2 a minute the gaps are 15-45 s: over ten simulated minutes of one-second steps, 14-41 jobs; a step
    before the next is due submits nothing, and a long pause is followed by one job, not a catch-up burst."""
    wl = _workload(sim_clock, rate_per_min=2, max_queued=1000)
    outcomes = []
    for _ in range(600):
        outcomes.append(wl.step())
        sim_clock.advance(1)
    assert 14 <= outcomes.count("submitted") <= 41
    assert outcomes.count("wait") == 600 - outcomes.count("submitted") - outcomes.count("refused")
    sim_clock.advance(3600)
    before = Job.objects.count()
    assert [wl.step(), wl.step()] == ["submitted", "wait"] and Job.objects.count() == before + 1


def test_a_members_queued_jobs_limit_refuses_the_workload_as_it_refuses_a_person(demo_lab, sim_clock):
    bob = Department.objects.get(slug="vision").members.get(user__username="bob").user
    user_limit_set(department=Department.objects.get(slug="vision"), user=bob, max_gpus=4, max_queued=1,
                   actor=None)
    wl = _workload(sim_clock, mix=(replace(MIX[0], weight=1),), max_queued=10)
    assert wl.step() == "submitted"
    sim_clock.advance(60)
    assert wl.step() == "refused" and wl.counts["refused"] == 1
    assert Job.objects.filter(owner=bob, state=JobState.QUEUED).count() == 1


def test_a_job_above_the_departments_quota_ceiling_is_refused_and_nothing_is_written(demo_lab, sim_clock):
    """robotics can never hold more than 3 A100s (nominal 1 + borrowing 2): the service's 400, not a row."""
    wl = _workload(sim_clock, mix=(Spec(1, "erin", "too-big", (4,)),))
    assert wl.step() == "refused" and not Job.objects.exists()


def test_an_archived_department_or_a_removed_user_is_skipped_not_fatal(demo_lab, sim_clock):
    Department.objects.filter(slug="robotics").update(archived_at="2026-01-01T00:00Z")
    wl = _workload(sim_clock, mix=(Spec(1, "erin", "policy-sweep", (1,)), Spec(1, "nobody", "x", (1,))))
    for _ in range(6):
        assert wl.step() == "refused"
        sim_clock.advance(60)
    assert not Job.objects.exists()


def test_a_department_running_low_on_credits_is_topped_up_by_the_platform_admin(demo_lab, sim_clock):
    robotics = Department.objects.get(slug="robotics")
    wl = _workload(sim_clock, mix=(Spec(1, "erin", "policy-sweep", (1,), tier="backfill"),))
    assert wl.step() == "submitted" and wl.counts["topped_up"] == 0  # the seeded 15 credits: nothing to grant
    wallet_set_balance(department=robotics, balance=1000, actor=None)
    sim_clock.advance(60)
    assert wl.step() == "submitted"
    entry = LedgerEntry.objects.filter(kind=LedgerKind.ADJUSTMENT).latest("pk")
    assert (entry.amount, entry.actor.username, entry.wallet.department) == (TOP_UP, "admin", robotics)
    assert Wallet.objects.get(department=robotics).balance == 1000 + TOP_UP
    sim_clock.advance(60)
    assert wl.step() == "submitted" and wl.counts["topped_up"] == 1  # enough now: once


def test_with_the_cycle_running_jobs_start_and_end_while_the_queue_stays_short(demo_lab, sim_clock, go):
    """Ten simulated minutes of the demo: the workload, the admission cycle and the simulated kubelet in turn."""
    wl = _workload(sim_clock, rate_per_min=4, max_queued=4)
    for _ in range(60):
        go(wl.step)
        go(run_cycle)
        for cluster in Cluster.objects.all():
            go(sync_cluster, cluster=cluster)
        assert waiting_jobs() <= 4
        sim_clock.advance(10)
    states = set(Job.objects.values_list("state", flat=True))
    assert JobState.SUCCEEDED in states and states & {JobState.RUNNING, JobState.ADMITTED}
    assert wl.counts["submitted"] >= 20


def test_the_demo_supervises_the_workload_with_its_flags_and_can_leave_it_out(settings, tmp_path):
    settings.DATA_DIR = tmp_path
    [child] = [c for c in background_processes(workload=(2.5, 9)) if c.name == "workload"]
    assert child.argv[-3:] == ["demo_workload", "--rate=2.5", "--max-queued=9"]
    assert child.env["DJANGO_SETTINGS_MODULE"]
    assert "workload" not in {c.name for c in background_processes(workload=None)}


@pytest.mark.parametrize("flag", ["--workload-rate=0", "--workload-max-queued=0"])
def test_the_demo_refuses_a_workload_that_could_not_run(flag):
    with pytest.raises(CommandError, match="workload"):
        call_command("demo", flag, "--seed-only")


def test_the_workload_command_refuses_bad_flags():
    with pytest.raises(CommandError, match="--rate"):
        call_command("demo_workload", "--rate=-1")
