"""Teams inside departments in the engine (``engine.teams``): a team's quota, its siblings' idle quota, the
cohort, the guarantees at both levels, the reasons that name the level, and the fair-share tree."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import given
from hypothesis import strategies as st

from engine import reasons, schedule
from engine.cycle import Cycle
from engine.ordering import Scorer
from engine.types import PendingJob, RunningJob, TeamQuota
from tests.engine.core_builders import NOW, Snap, job, run
from tests.engine.test_properties import SETTINGS, snapshots


def lab(nlp_lend: int | None = None, cv_lend: int | None = None, nlp_borrow: int | None = None, nodes: int = 1):
    """Department A (8 GPUs, lending nothing to the cohort) split 4/4 between nlp and cv, on ``nodes`` x 8 GPUs."""
    return (
        Snap().nodes(nodes, gpus=8).policy(realtime_headroom_gpus=0)
        .quota("A", 8, lend=0)
        .team("A", "nlp", 4, lend=nlp_lend, borrow=nlp_borrow)
        .team("A", "cv", 4, lend=cv_lend)
    )  # fmt: skip


def test_a_team_borrows_its_siblings_idle_lendable_quota_inside_the_department():
    r = lab().pending(job(1, gpus=6, team="nlp")).decide()
    assert r.code(1) == "admitted"
    assert r.admitted[1].borrowed is False  # within the department's nominal: nothing taken from the cohort


def test_a_siblings_guaranteed_part_is_held_for_it_and_the_reason_names_the_level():
    assert lab(cv_lend=2).pending(job(1, gpus=6, team="nlp")).decide().code(1) == "admitted"  # cv lends 2 of 4
    r = lab(cv_lend=2).running(run(50, on="n0", gpus=6, team="nlp")).pending(job(2, gpus=1, team="nlp")).decide()
    why = r.reason[2]
    assert why.code == reasons.TEAM_QUOTA
    assert why.detail["department_idle"] == 2 and why.detail["guaranteed_to"] == ["cv"]
    assert "team nlp quota in use" in why.message and "department has 2 idle, guaranteed to cv" in why.message


def test_the_team_that_holds_the_guarantee_gets_it_while_a_sibling_waits():
    snap = lab(cv_lend=0).running(run(50, on="n0", gpus=4, team="nlp"))
    alone = snap.pending(job(1, gpus=2, team="nlp")).decide()
    assert alone.code(1) == reasons.TEAM_QUOTA
    assert "department has 4 idle, guaranteed to cv" in alone.reason[1].message
    both = snap.pending(job(2, gpus=4, team="cv", submitted_at=NOW + 1)).decide()
    assert both.code(2) == "admitted"
    assert both.code(1) == reasons.QUOTA_EXHAUSTED  # cv's 4 are in use now: the department itself is full


def test_a_team_at_its_borrowing_limit_waits_and_a_job_larger_than_it_never_starts():
    r = lab(nlp_borrow=1).pending(job(1, gpus=6, team="nlp"), job(2, gpus=5, team="nlp")).decide()
    assert r.code(1) == reasons.TEAM_BORROW_LIMIT and r.reason[1].detail["never"] is True
    assert "more than team nlp may ever hold (5)" in r.reason[1].message
    assert r.code(2) == "admitted"
    again = lab(nlp_borrow=1).running(run(50, on="n0", gpus=4, team="nlp")).pending(job(3, gpus=2, team="nlp"))
    why = again.decide().reason[3]
    assert why.code == reasons.TEAM_BORROW_LIMIT and "never" not in why.detail
    assert "team nlp holds 4 of nominal 4 + borrowing limit 1, 2 requested" in why.message


def test_a_team_borrows_from_the_cohort_once_the_department_is_full_but_never_another_departments_guarantee():
    def snap(b_lend):
        return (
            Snap().nodes(3, gpus=8).policy(realtime_headroom_gpus=0)
            .quota("A", 8).quota("B", 8, lend=b_lend)
            .team("A", "nlp", 4).team("A", "cv", 4, lend=0)
            .pending(job(1, gpus=8, team="nlp"))
        )  # fmt: skip

    lent = snap(None).decide()
    assert lent.code(1) == "admitted" and lent.admitted[1].borrowed is True  # 4 of nlp's, 4 of B's idle
    kept = snap(0).decide()
    assert kept.code(1) == reasons.TEAM_QUOTA  # B lends nothing, cv's 4 stay cv's
    assert kept.reason[1].detail["department_code"] == reasons.QUOTA_EXHAUSTED


def test_a_job_within_its_teams_guarantee_is_not_borrowed_while_its_department_borrows():
    snap = (
        Snap().nodes(2, gpus=8).policy(realtime_headroom_gpus=0)
        .quota("A", 8).quota("B", 8)
        .team("A", "nlp", 4).team("A", "cv", 4, lend=0)
        .running(run(50, on="n0", gpus=6, team="nlp", borrowed=True))  # 4 of nlp's and 2 of the cohort's
        .pending(job(1, gpus=4, team="cv"))
    )  # fmt: skip
    r = snap.decide()
    assert r.code(1) == "admitted" and r.admitted[1].borrowed is False  # cv's own guarantee: never reclaimed


def test_the_cohort_cannot_borrow_a_teams_idle_guarantee():
    base = (
        Snap().nodes(2, gpus=8).policy(realtime_headroom_gpus=0)
        .quota("A", 8).quota("B", 0)
        .pending(job(1, dept="B", gpus=8))
    )  # fmt: skip
    assert base.decide().code(1) == "admitted"  # without teams A lends its 8 idle GPUs
    assert base.team("A", "cv", 4, lend=0).decide().code(1) == reasons.QUOTA_EXHAUSTED  # cv's 4 are not lent


def test_members_of_no_team_draw_on_the_unassigned_share():
    snap = Snap().nodes(1, gpus=8).policy(realtime_headroom_gpus=0).quota("A", 8).team("A", "nlp", 4, lend=0)
    assert snap.pending(job(1, gpus=4)).decide().code(1) == "admitted"
    why = Snap().nodes(1, gpus=8).policy(realtime_headroom_gpus=0).quota("A", 8).team("A", "nlp", 4, lend=0)
    r = why.pending(job(2, gpus=5)).decide()
    assert r.code(2) == reasons.TEAM_QUOTA and "the unassigned share in use" in r.reason[2].message


def test_fair_share_is_a_tree_a_teams_history_counts_inside_its_department():
    def first(**usage):
        snap = (
            Snap().nodes(1, gpus=8).quota("A", 8).quota("B", 8)
            .team("A", "nlp", 4).team("A", "cv", 4)
            .usage(A=1000.0, B=1000.0)
        )  # fmt: skip
        for team, seconds in usage.items():
            snap.team_usage("A", team, seconds)
        jobs = [job(1, team="nlp"), job(2, team="cv"), job(3, dept="B")]
        scorer = Scorer(snap.pending(*jobs).build())
        return sorted(jobs, key=scorer.cycle_key)

    order = [j.id for j in first(nlp=900.0, cv=100.0)]
    assert order.index(2) < order.index(1)  # cv used little of A's history: ahead of nlp
    reverse = [j.id for j in first(nlp=100.0, cv=900.0)]
    assert reverse.index(1) < reverse.index(2)


@given(snapshots())
@SETTINGS
def test_a_department_without_teams_decides_exactly_as_before(snap):
    """Another department's teams change nothing for the departments without: the same decisions, reasons and
    figures as the snapshot without any team."""
    with_teams = replace(snap, team_quotas=(TeamQuota("Z", "t", "a100", 4, None, 0),), team_usage={("Z", "t"): 5.0})
    before, after = schedule(snap), schedule(with_teams)
    assert after.admissions == before.admissions
    assert after.preemptions == before.preemptions
    assert after.pending == before.pending


@st.composite
def team_splits(draw):
    """Department A split among three teams (nominal, lending limit, borrowing limit), B beside it, and jobs of
    A's teams, its unassigned members and B, of 1-8 GPUs in one pod."""
    teams = []
    for name in ("t0", "t1", "t2"):
        nominal = draw(st.integers(0, 8))
        lend = draw(st.one_of(st.none(), st.integers(0, nominal)))
        borrow = draw(st.one_of(st.none(), st.integers(0, 8)))
        teams.append(TeamQuota("A", name, "a100", nominal, borrow, lend))
    a_nominal = sum(t.nominal for t in teams) + draw(st.integers(0, 4))
    b_nominal = draw(st.integers(0, 16))
    jobs = []
    for i in range(draw(st.integers(1, 12))):
        dept, team = draw(st.sampled_from([("A", "t0"), ("A", "t1"), ("A", "t2"), ("A", ""), ("B", "")]))
        jobs.append(PendingJob(id=i + 1, department=dept, team=team, flavor="a100", pods=1,
                               gpus_per_pod=draw(st.sampled_from([1, 2, 4, 8])), submitted_at=NOW - i,
                               tier=draw(st.sampled_from(["elastic", "backfill"]))))
    return teams, a_nominal, b_nominal, jobs, draw(st.sampled_from(["t0", "t1", "t2"]))


@given(team_splits())
@SETTINGS
def test_a_teams_guarantee_within_its_department_holds(split):
    """Whatever the other teams, the unassigned members and the other department start, a team can start
    afterwards up to its guaranteed part (nominal - lending limit) on the department's GPUs."""
    teams, a_nominal, b_nominal, jobs, chosen = split
    gpus = a_nominal + b_nominal
    snap = (
        Snap().policy(realtime_headroom_gpus=0).node("n0", gpus=gpus)
        .quota("A", a_nominal, lend=None).quota("B", b_nominal)
    )  # fmt: skip
    for t in teams:
        snap.team(t.department, t.team, t.nominal, borrow=t.borrowing_limit, lend=t.lending_limit)
    others = [j for j in jobs if j.team != chosen]
    first = schedule(snap.pending(*others).build())
    running = [
        RunningJob(id=a.job_id, department=j.department, flavor="a100", tier=j.tier, placement=a.placement,
                   gpus_per_pod=j.gpus_per_pod, started_at=NOW, team=j.team, borrowed=a.borrowed)
        for j in others for a in first.admissions if a.job_id == j.id
    ]  # fmt: skip
    quota = next(t for t in teams if t.team == chosen)
    guaranteed = quota.nominal - (quota.nominal if quota.lending_limit is None else quota.lending_limit)
    mine = [PendingJob(id=100 + i, department="A", team=chosen, flavor="a100", submitted_at=NOW) for i in range(guaranteed)]
    second = Snap().policy(realtime_headroom_gpus=0).node("n0", gpus=gpus).quota("A", a_nominal).quota("B", b_nominal)
    for t in teams:
        second.team(t.department, t.team, t.nominal, borrow=t.borrowing_limit, lend=t.lending_limit)
    result = schedule(second.running(*running).pending(*mine).build())
    assert {a.job_id for a in result.admissions} == {j.id for j in mine}, [
        (r.job_id, r.code, r.message) for r in result.pending
    ]


@st.composite
def snapshots_with_teams(draw):
    """The property tests' random snapshots with departments A and B split into teams (random nominal, lending
    and borrowing limits) and every job given one of their teams or none."""
    snap = draw(snapshots())
    quotas = []
    for dept in ("A", "B"):
        for team in ("x", "y"):
            nominal = draw(st.integers(0, 6))
            quotas.append(TeamQuota(dept, team, "a100", nominal, draw(st.one_of(st.none(), st.integers(0, 4))),
                                    draw(st.one_of(st.none(), st.integers(0, nominal)))))
    teams = st.sampled_from(["", "x", "y"])
    credits = snap.credits
    if credits is not None:  # some teams with a share of their department's budget
        credits = {**credits, **{f"{d}/{t}": draw(st.integers(0, 1500)) for d in ("A", "B") for t in ("x", "y")
                                 if draw(st.booleans())}}
    return replace(
        snap, team_quotas=tuple(quotas), credits=credits,
        pending=tuple(replace(j, team=draw(teams)) if j.department in ("A", "B") else j for j in snap.pending),
        running=tuple(replace(j, team=draw(teams)) if j.department in ("A", "B") else j for j in snap.running),
        team_usage={("A", "x"): draw(st.floats(0, 1e5)), ("B", "y"): draw(st.floats(0, 1e5))},
    )  # fmt: skip


@given(snapshots_with_teams())
@SETTINGS
def test_with_teams_the_remembered_verdicts_and_the_forked_prices_decide_as_judging_every_job_in_full(snap):
    """The shortcuts (a verdict remembered for a job of another team judged alike, prices from a fork, the
    bound that spares a replay) change nothing a full judgement of every job decides."""
    full = Cycle(snap, memo=False, fork_prices=False).run()
    assert Cycle(snap).run() == full
    assert Cycle(snap, memo=False).run() == full
    assert all(r.code in reasons.CODES for r in full.pending)


def test_a_team_with_a_share_of_the_budget_waits_when_its_share_is_spent():
    snap = (lab(nodes=2).credits(**{"A": 10_000, "A/nlp": 3_000})
            .pending(job(1, gpus=1, team="nlp", hold=2_000), job(2, gpus=1, team="nlp", hold=2_000),
                     job(3, gpus=1, team="cv", hold=4_000), job(4, gpus=1, hold=1_000)))
    res = snap.decide()
    assert [res.code(i) for i in (1, 3, 4)] == ["admitted"] * 3  # cv and no team: the department's credits
    assert res.code(2) == reasons.BUDGET_INSUFFICIENT
    why = res.reason[2]
    assert why.detail == {"hold": 2_000, "available": 1_000, "missing": 1_000, "team": "nlp"}
    assert "team nlp's share of the budget" in why.message
    assert why.estimated_start is None  # a refill is not predictable


def test_a_teams_share_never_lends_it_more_than_its_department_has():
    res = lab().credits(**{"A": 1_000, "A/nlp": 5_000}).pending(job(1, gpus=1, team="nlp", hold=2_000)).decide()
    assert res.code(1) == reasons.BUDGET_INSUFFICIENT and "team" not in res.reason[1].detail


@given(snapshots_with_teams())
@SETTINGS
def test_no_team_spends_more_than_its_share(snap):
    res = schedule(snap)
    if snap.credits is None:
        return
    jobs = {j.id: j for j in snap.pending}
    spent: dict[str, int] = {}
    for a in res.admissions:
        j = jobs[a.job_id]
        if j.team:
            key = f"{j.department}/{j.team}"
            spent[key] = spent.get(key, 0) + max(0, j.hold)
    for key, amount in spent.items():
        if key in snap.credits:
            assert amount <= snap.credits[key], key


def test_the_estimate_waits_for_the_teams_own_jobs_to_end_under_its_borrowing_limit():
    """Plenty of GPUs are free: only nlp's borrowing limit (nominal 4 + 1) keeps its 3-GPU job out, until enough
    of its running jobs end; a sibling's job ending changes nothing."""
    r = (lab(nlp_borrow=1, nodes=3)
         .running(run(50, on="n0", gpus=2, team="nlp", ran=600, max_runtime_s=3600),
                  run(51, on="n1", gpus=2, team="nlp", ran=600, max_runtime_s=7200),
                  run(52, on="n2", gpus=1, team="cv", ran=600, max_runtime_s=1800))
         .pending(job(1, gpus=2, team="nlp"), job(2, gpus=5, team="nlp", submitted_at=NOW + 1)).decide())
    assert r.code(1) == r.code(2) == reasons.TEAM_BORROW_LIMIT
    assert r.reason[1].estimated_start == NOW - 600 + 3600  # 4 - 2 + 2 = 4 <= 5 once job 50 ends
    # the 5-GPU job: once both have ended, and after job 1 (in order), which then holds 2 until it ends
    assert r.reason[2].estimated_start is not None and r.reason[2].estimated_start >= NOW - 600 + 7200


def test_a_job_larger_than_its_teams_cap_has_no_estimate():
    r = lab(nlp_borrow=1).pending(job(1, gpus=6, team="nlp")).decide()
    assert r.code(1) == reasons.TEAM_BORROW_LIMIT and r.reason[1].estimated_start is None


@given(snapshots_with_teams())
@SETTINGS
def test_estimates_change_no_decision_and_never_start_a_team_past_its_borrowing_limit(snap):
    """With and without estimates the cycle decides alike; a job of a team with a borrowing limit is never
    estimated to start before its team's running jobs of the flavor (at their likely ends, here their max
    runtime) have ended enough to let it in."""
    full = schedule(snap)
    quiet = schedule(replace(snap, estimates=False))
    assert full.admissions == quiet.admissions and full.preemptions == quiet.preemptions
    assert [(r.job_id, r.code) for r in full.pending] == [(r.job_id, r.code) for r in quiet.pending]
    caps = {(q.department, q.team, q.flavor): q.nominal + q.borrowing_limit for q in snap.team_quotas
            if q.borrowing_limit is not None}
    jobs = {j.id: j for j in snap.pending}
    admitted = {a.job_id for a in full.admissions}
    for r in full.pending:
        j = jobs[r.job_id]
        cap = caps.get((j.department, j.team, j.flavor))
        if cap is None or r.estimated_start is None:
            continue
        t = r.estimated_start
        still = sum(x.total_gpus for x in snap.running
                    if x.department == j.department and x.team == j.team and x.flavor == j.flavor
                    and x.expected_end > t)
        now = sum(jobs[a].total_gpus for a in admitted if jobs[a].department == j.department
                  and jobs[a].team == j.team and jobs[a].flavor == j.flavor and snap.now + jobs[a].max_runtime_s > t)
        assert still + now + j.total_gpus <= cap, (r.job_id, t, still, now, cap)
