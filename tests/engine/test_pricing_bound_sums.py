"""The price bound read from running sums (``pricing.surely_wins`` with ``pricing.OrderSums``) answers exactly as
the bound that walked every job between a winner's two places, here kept as the reference, and so leaves every
decision and price as it was."""

from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from benchmarks.engine import make_snapshot
from engine import pricing
from engine.cycle import Cycle
from engine.fractions import MILLI
from engine.ordering import REALTIME, tier_rank
from engine.teams import account
from tests.engine.test_pricing_bound import busy
from tests.engine.test_properties import snapshots
from tests.engine.test_truthful_pricing import contested


def walked_bound(before, job, between, spent):
    """The bound as it was: every sum a walk over ``between``, the shapes asked job by job. Its shapes carry
    their flavor and share as the running sums' do (a shape spent on one flavor is not spent on another, and
    two fractions of one shape need not take the same milli-GPUs)."""
    quota = before.quota
    if quota.scoped or (job.array_id is not None and job.array_throttle) or job.topology_required:
        return False
    dept, flavor, user, g, n = job.department, job.flavor, job.user, job.gpus_per_pod, job.pods
    if before.team_quotas and before.teams.applies(job) and job.team:
        found = before.teams.limits.get((dept, job.team, flavor))
        if found is not None and found[1] is not None:
            mates = sum(x.total_gpus for x in between if x.department == dept and x.team == job.team
                        and x.flavor == flavor)
            if before.teams.usage.get((dept, job.team, flavor), 0) + mates + job.total_gpus > found[0] + found[1]:
                return False
    if before.credits is not None and job.hold > 0:
        holds = sum(x.hold for x in between if x.department == dept and x.hold > 0)
        if job.hold > before.credits.get(dept, 0) - holds:
            return False
        share = before.credits.get(account(dept, job.team)) if job.team and before.team_shares else None
        if share is not None:
            mates = sum(x.hold for x in between if x.department == dept and x.team == job.team and x.hold > 0)
            if job.hold > share - mates:
                return False
    limit = before.users.limit(dept, user) if before.user_limits else None
    if limit is not None:
        mates = sum(x.total_gpus for x in between if x.department == dept and x.user == user)
        if before.users.held.get((dept, user), 0) + mates + job.total_gpus > limit:
            return False
    taken = mine = lost = 0
    live = {}
    for x in between:
        if x.flavor != flavor:
            continue
        shape = (x.department, x.pods, x.gpus_per_pod, x.max_runtime_s, x.cluster, x.cluster_selector, x.data_sources,
                 before.across_quota(x), x.flavor, x.share)
        found = live.get(shape)
        if found is None:
            if shape in spent:
                found = (False, False)
            else:
                found = pricing._may_start_or_reserve(before, x)
                if not (found[0] or found[1]):
                    spent.add(shape)
            live[shape] = found
        admits, reserves = found
        if admits:
            taken += x.gpu_milli
            mine += x.gpu_milli if x.department == dept else 0
        if admits or reserves:
            lost += x.pods * -(-x.gpus_per_pod // g)
    nominal, borrowing, _ = quota.limits.get((dept, flavor), (0, 0, 0))
    km = job.gpu_milli
    if quota.never(dept, flavor, km) is not None:
        return False
    if borrowing is not None and quota.usage.get((dept, flavor), 0) + mine + km > nominal + borrowing:
        return False
    if quota.pool_used.get(flavor, 0) + taken + km > quota.pool_cap.get(flavor, 0):
        return False
    refused = {q.cluster for q in before.snap.namespace_quotas
               if q.department == dept and q.flavor == flavor and job.total_gpus >= q.total_gpus
               and before.now < q.until}
    headroom = before.policy.realtime_headroom_gpus
    for pool in before.topology.job_pools(job)[0]:
        if pool.cluster in refused:
            continue
        index = pool.long if pool.reservations else pool.now
        if index.capacity(g) - lost < n:
            continue
        if (
            headroom <= 0
            or tier_rank(job.tier) == REALTIME
            or before.evictions.may_evict_soon((pool.cluster, pool.flavor))
            or pool.now.free_total() * MILLI - taken - km >= headroom * MILLI
        ):
            return True
    return False


@pytest.fixture
def compared(monkeypatch):
    """Every answer of the bound, each held to the walked bound's from the same state (on a copy of the spent
    shapes, so the reference leaves the cycle as the bound alone would): the answers."""
    bound = pricing.surely_wins
    answers: list[bool] = []

    def surely_wins(before, job, start, stop):
        walked = walked_bound(before, job, before.order[start:stop], set(before.spent_shapes))
        sure = bound(before, job, start, stop)
        assert sure == walked, (job.id, start, stop)
        answers.append(sure)
        return sure

    monkeypatch.setattr(pricing, "surely_wins", surely_wins)
    return answers


def walked_cycle(monkeypatch, snap):
    """The cycle's result with the walked bound in place of the running sums' (its own spent shapes)."""
    with monkeypatch.context() as patched:
        patched.setattr(pricing, "surely_wins", lambda before, job, start, stop: walked_bound(
            before, job, before.order[start:stop], before.spent_shapes))
        return Cycle(snap).run()


SETTINGS = {"deadline": None, "suppress_health_check": [HealthCheck.too_slow, HealthCheck.filter_too_much,
                                                         HealthCheck.function_scoped_fixture]}


@pytest.fixture(params=[None, 0, 10**9], ids=["walk-or-bisect", "bisect", "walk"])
def either_way(request, monkeypatch):
    """The shapes of a stretch found as the cycle finds them, or always by bisection, or always by a walk."""
    if request.param is not None:
        monkeypatch.setattr(pricing, "WALK_PER_SHAPE", request.param)


@pytest.mark.parametrize("seed", range(4))
def test_the_sums_answer_as_the_walk_on_benchmark_snapshots(compared, either_way, monkeypatch, seed):
    snap = make_snapshot(600, 40 + 60 * seed, seed=seed)
    assert Cycle(snap).run() == walked_cycle(monkeypatch, snap)
    assert True in compared and False in compared  # (both answers were compared)


@settings(max_examples=80, **SETTINGS)
@given(contested(), st.booleans())
def test_the_sums_answer_as_the_walk_on_contested_cycles(compared, monkeypatch, snap, memo):
    assert Cycle(snap, memo=memo).run() == walked_cycle(monkeypatch, snap)


@settings(max_examples=40, **SETTINGS)
@given(snapshots(federated=True), st.data())
def test_the_sums_answer_as_the_walk_across_clusters(compared, monkeypatch, snap, data):
    snap = replace(snap, pending=tuple(replace(j, bid=data.draw(st.integers(0, 5_000))) for j in snap.pending))
    assert Cycle(snap).run() == walked_cycle(monkeypatch, snap)


@settings(max_examples=20, **SETTINGS)
@given(busy())
def test_the_sums_answer_as_the_walk_on_busy_clusters(compared, either_way, monkeypatch, snap):
    assert Cycle(snap).run() == walked_cycle(monkeypatch, snap)
