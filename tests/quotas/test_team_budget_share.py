"""A team's share of its department's budget, enforced where the department's budget is: at admission, its
jobs' holds (the worst case, bids included, so approved jobs and bids too) may take at most the share of the
department's balance at once; a job that would go past it waits with a reason that names the team, the quote
says it is not affordable, and a member of no team (or of another team) is not held back by it."""

from __future__ import annotations

import pytest
from django.utils import timezone

from portal.models import Membership
from quotas.services.teams import member_set_team, team_create, team_update
from scheduling.models import JobState
from scheduling.services.cycle import run_cycle
from scheduling.services.snapshot import build_snapshot

pytestmark = pytest.mark.django_db


@pytest.fixture
def cv(money):
    """vision (100 credits) has a team cv with a quarter of its budget, amy in it; no quota split."""
    team = team_create(department=money.vision, slug="cv", budget_share_pct=25, actor=None)
    member_set_team(membership=Membership.objects.get(user=money.amy), team=team, actor=None)
    return team


def test_a_teams_jobs_hold_at_most_its_share_and_the_reason_names_it(money, cv, submit, go):
    mine = [go(submit, money.amy, name=f"j{i}", gpus=1, max_runtime_s=15 * 3600) for i in range(2)]  # 15 + 15 > 25
    other = go(submit, money.alice, name="c", gpus=1, max_runtime_s=15 * 3600)  # no team: vision's 85 left
    go(run_cycle)
    for job in (*mine, other):
        job.refresh_from_db()
    assert other.state in (JobState.ADMITTED, JobState.RUNNING)
    admitted = [j for j in mine if j.state in (JobState.ADMITTED, JobState.RUNNING)]
    (waiting,) = [j for j in mine if j.state == JobState.QUEUED]
    assert len(admitted) == 1 and waiting.reason_code == "budget_insufficient"
    assert waiting.reason_message == ("team cv's share of the budget: needs 15.000 cr, has 10.000 cr, "
                                      "missing 5.000 cr")


def test_the_share_counts_holds_of_earlier_cycles(money, cv, submit, go):
    go(submit, money.amy, name="a", gpus=1, max_runtime_s=20 * 3600)
    go(run_cycle)
    snapshot, _ = build_snapshot(now=timezone.now())
    assert snapshot.credits["vision/cv"] == 5_000 and snapshot.credits["vision"] == 80_000
    late = go(submit, money.amy, name="b", gpus=1, max_runtime_s=10 * 3600)
    go(run_cycle)
    late.refresh_from_db()
    assert late.reason_code == "budget_insufficient" and "team cv" in late.reason_message


def test_a_larger_share_lets_the_job_in(money, cv, submit, go):
    team_update(team=cv, actor=None, budget_share_pct=50)
    jobs = [go(submit, money.amy, name=f"j{i}", gpus=1, max_runtime_s=20 * 3600) for i in range(2)]
    go(run_cycle)
    for job in jobs:
        job.refresh_from_db()
    assert all(j.state in (JobState.ADMITTED, JobState.RUNNING) for j in jobs)


def test_a_team_without_a_share_draws_on_the_department_alone(money, cv, submit, go):
    team_update(team=cv, actor=None, budget_share_pct=None)
    snapshot, _ = build_snapshot(now=timezone.now())
    assert "vision/cv" not in snapshot.credits


def test_the_quote_says_a_job_past_the_teams_share_is_not_affordable(money, cv, client_for):
    body = {"name": "q", "image": "busybox", "command": ["true"], "flavor": "a100-80gb", "gpus": 1,
            "max_runtime_s": 30 * 3600}
    q = client_for(money.amy).post("/api/v1/jobs/quote", body, format="json").json()
    assert (q["available"], q["affordable"]) == (25_000, False)
    q = client_for(money.alice).post("/api/v1/jobs/quote", body, format="json").json()
    assert (q["available"], q["affordable"]) == (100_000, True)
