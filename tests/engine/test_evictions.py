"""Table tests of the cycle's eviction planning (``eviction.Evictions``): when a priority, reclaim or drain
eviction is made, and the reason a job gets when none is. Each row is one snapshot: a single 8-GPU node,
departments A and B with nominal 4 each, and a running job of B that holds the GPUs A's job needs."""

from __future__ import annotations

from dataclasses import replace

import pytest
from core_builders import NOW, Snap, job, run

from engine import reasons
from engine.cycle import Cycle
from engine.eviction import Chosen

MIN = 60.0
HOUR = 3600.0


def cycle(*running, recent=0, budgets=(), **policy):
    snap = Snap().nodes(1).quota("A", 4).quota("B", 4).running(*running).recent_preemptions(recent)
    for name, allowed in budgets:
        snap.budget(name, allowed)
    return Cycle(snap.policy(**policy).build())


def pool_of(c: Cycle):
    return c.pools[("default", "a100")]


def borrower(id=10, gpus=8, ran=HOUR, **kw):
    """B's job holding the whole node, 4 GPUs of it lent by A."""
    kw.setdefault("borrowed", True)
    return run(id, dept="B", gpus=gpus, ran=ran, **kw)


REALTIME = dict(tier="realtime")
WAITED = dict(submitted_at=NOW - HOUR)  # past reclaim_delay_s (30 min)


@pytest.mark.parametrize(
    ("running", "pending", "setup", "expect"),
    [
        # realtime work evicts another department's borrower at once
        ((borrower(),), job(1, gpus=2, **REALTIME), {}, ("priority", (10,))),
        # a reclaim that has not waited reclaim_delay_s waits: the borrower may end meanwhile
        ((borrower(gpus=4), borrower(11, gpus=4)), job(1, gpus=4), {}, (None, {})),
        # once patient, it frees what it needs (here exactly one 4-GPU borrower, the cheaper one to lose)
        (
            (borrower(gpus=4, ran=2 * HOUR), borrower(11, gpus=4)),
            job(1, gpus=4, **WAITED),
            {},
            ("reclaim", (11,)),
        ),
        # never more than twice the GPUs it needs: 8 freed for 1 is too wasteful, it waits
        ((borrower(),), job(1, gpus=1, **WAITED), {}, (None, {})),
        # backfill never reclaims from elastic work
        ((borrower(gpus=4), borrower(11, gpus=4)), job(1, gpus=4, tier="backfill", **WAITED), {}, (None, {})),
        # victims within their cooldown: the reason says when they become preemptible
        (
            (borrower(ran=5 * MIN),),
            job(1, gpus=8, **REALTIME),
            {},
            (reasons.PREEMPTION_COOLDOWN, {"victims_needed": 1, "min_runtime_s": 600.0, "preemptible_at": NOW + 5 * MIN}),
        ),
        # the preemption window is used up
        ((borrower(),), job(1, gpus=2, **REALTIME), {"recent": 10}, (reasons.PREEMPTION_RATE_LIMIT, None)),
        # reclaims leave realtime work half of the window: with 5 of 10 used a reclaim may evict nobody ...
        (
            (borrower(gpus=4), borrower(11, gpus=4)),
            job(1, gpus=4, **WAITED),
            {"recent": 5},
            (reasons.PREEMPTION_RATE_LIMIT, None),
        ),
        # ... while a realtime job still may
        ((borrower(),), job(1, gpus=2, **REALTIME), {"recent": 5}, ("priority", (10,))),
        # a PodDisruptionBudget with no room left protects the victim, and is named
        (
            (borrower(disruption_budgets=("team-b",)),),
            job(1, gpus=2, **REALTIME),
            {"budgets": [("team-b", 0)]},
            (reasons.DISRUPTION_BUDGET, {"budgets": ["team-b"]}),
        ),
    ],
)
def test_preempt(running, pending, setup, expect):
    c = cycle(*running, recent=setup.get("recent", 0), budgets=setup.get("budgets", ()))
    borrows = c.quota.borrows(pending.department, pending.flavor, pending.total_gpus, "default")
    outcome = c.evictions.preempt(pending, [pool_of(c)], borrows)
    if isinstance(outcome, Chosen):
        p = outcome.preemption
        assert (p.reason, p.victim_ids, outcome.cluster) == (*expect, "default")
        assert c.evictions.taken == set(expect[1])
        return
    code, detail = outcome
    assert code == expect[0]
    if expect[1] is not None:
        assert detail == expect[1]
    assert not c.evictions.preemptions and not c.evictions.taken


def test_commit_spends_the_budgets_and_the_window():
    c = cycle(borrower(disruption_budgets=("team-b",)), recent=2, budgets=[("team-b", 3)])
    chosen = c.evictions.preempt(job(1, gpus=2, tier="realtime"), [pool_of(c)], False)
    assert isinstance(chosen, Chosen) and chosen.preemption.victim_ids == (10,)
    assert c.evictions.budget_left == {"team-b": 2}  # one pod
    assert c.evictions.rate_left == 10 - 2 - 1
    # the victim is taken: nobody else may choose it in this cycle
    again = c.evictions.preempt(job(2, gpus=2, tier="realtime"), [pool_of(c)], False)
    assert not isinstance(again, Chosen)


@pytest.mark.parametrize(
    ("victim", "head_tier", "starving", "made"),
    [
        # cheap work (5 minutes since its last checkpoint) is drained rather than idling 4 GPUs for hours
        (run(10, dept="A", gpus=4, ran=HOUR + 5 * MIN, checkpoint_interval_s=HOUR), "elastic", False, True),
        # more than drain_max_loss_s at risk: it waits for the victim's next checkpoint
        (run(10, dept="A", gpus=4, ran=HOUR + 20 * MIN, checkpoint_interval_s=HOUR), "elastic", False, False),
        # within its cooldown: never
        (run(10, dept="A", gpus=4, ran=4 * MIN, checkpoint_interval_s=MIN), "elastic", False, False),
        # another department's work within its nominal quota is drained only for a head that starves
        (run(10, dept="B", gpus=4, ran=HOUR + MIN, checkpoint_interval_s=HOUR), "elastic", False, False),
        (run(10, dept="B", gpus=4, ran=HOUR + MIN, checkpoint_interval_s=HOUR), "elastic", True, True),
        # nor elastic work for a backfill head, starving or not
        (run(10, dept="A", gpus=4, ran=HOUR + MIN, checkpoint_interval_s=HOUR), "backfill", True, False),
        # nor a job that has waited and run longer than the head has waited: queued again, it would go
        # first and take its GPUs back
        (run(10, dept="A", gpus=4, ran=HOUR + 5 * MIN, checkpoint_interval_s=HOUR, submitted_at=NOW - 9 * HOUR),
         "elastic", False, False),  # fmt: skip
    ],
)
def test_drain(victim, head_tier, starving, made):
    # The victim would hold its 4 GPUs for hours yet; the other 4 are free and would idle until it ends.
    c = cycle(replace(victim, max_runtime_s=10 * HOUR))
    head = job(1, gpus=8, tier=head_tier, submitted_at=NOW - 8 * HOUR)
    drained = c.evictions.drain(head, pool_of(c), NOW + 5 * HOUR, starving)
    if not made:
        assert drained is None and not c.evictions.taken
        return
    assert drained is not None and (drained.reason, drained.victim_ids) == ("drain", (10,))
    assert c.evictions.taken == {10}


def test_drain_needs_idle_gpus():
    """With no GPU free there is nothing idling to save: the head waits for its reservation."""
    c = cycle(run(10, dept="A", gpus=8, ran=HOUR + MIN, checkpoint_interval_s=HOUR, max_runtime_s=10 * HOUR))
    assert c.evictions.drain(job(1, gpus=8), pool_of(c), NOW + 5 * HOUR, True) is None


def test_candidates_and_inflight():
    """Realtime and non-preemptible jobs are never candidates; victims leaving for a job are its in-flight
    evictions; candidates are ordered borrowers first, then the least work at risk."""
    c = cycle(
        run(10, dept="A", gpus=2),
        run(11, dept="B", gpus=2, borrowed=True, ran=2 * HOUR),
        run(12, dept="B", gpus=1, tier="realtime"),
        run(13, dept="B", gpus=1, preemptible=False, evicting_for=7),
        run(14, dept="A", gpus=2, ran=20 * MIN),
    )
    assert [cand.job.id for cand in c.evictions.cands[("default", "a100")]] == [11, 14, 10]
    assert dict(c.evictions.inflight) == {7: [13]}


def test_a_drain_takes_the_fractions_of_a_gpu_together_each_within_the_loss_bound():
    # A's 3-GPU job and two of A's quarters sharing the node's fourth busy GPU, all 5 minutes past a
    # checkpoint: the head of 8 GPUs drains all three rather than idle the 4 free GPUs for hours
    from engine.fractions import HAMI, Share

    def quarter(id, ran):
        return run(id, dept="A", gpus=1, share=Share(HAMI, 40 * 1024, memory_mib=10 * 1024), devices=(0,),
                   ran=ran, checkpoint_interval_s=HOUR, max_runtime_s=10 * HOUR)

    whole = run(10, dept="A", gpus=3, ran=HOUR + 5 * MIN, checkpoint_interval_s=HOUR, max_runtime_s=10 * HOUR)
    c = cycle(whole, quarter(11, HOUR + 5 * MIN), quarter(12, HOUR + 5 * MIN))
    drained = c.evictions.drain(job(1, gpus=8, submitted_at=NOW - 8 * HOUR), pool_of(c), NOW + 5 * HOUR, False)
    assert drained is not None and drained.victim_ids == (10, 11, 12)
    assert c.evictions.rate_left == 10 - 3
    # one quarter 20 minutes past its checkpoint (over drain_max_loss_s): its GPU stays, and so no drain
    c = cycle(whole, quarter(11, HOUR + 5 * MIN), quarter(12, HOUR + 20 * MIN))
    assert c.evictions.drain(job(1, gpus=8, submitted_at=NOW - 8 * HOUR), pool_of(c), NOW + 5 * HOUR, False) is None
    assert not c.evictions.taken
