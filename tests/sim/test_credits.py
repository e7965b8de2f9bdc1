"""Budgets in the simulator: holds and available credits in the snapshot, settlement at the clearing price,
refunds on preemption and refills, mirroring quotas/services.py."""

import pytest

from billing.money import cost_of
from simulator import policies
from simulator.jobs import prepare
from simulator.scenario import ScenarioError
from simulator.simulator import simulate
from simulator.trace import TraceRow

from .helpers import small_scenario
from .test_measurement import PreemptOnce


def _depts(budget_a, budget_b=None):
    return {
        "a": {"quotas": {"a100": {"nominal": 4}}, "budget": budget_a, "members": {"alice": "pi"}},
        "b": {"quotas": {"a100": {"nominal": 4}}, "budget": budget_b, "members": {"bob": "senior"}},
    }


class Spy:
    def __init__(self, inner):
        self.inner, self.name, self.time_dependent, self.snaps = inner, inner.name, True, []

    def __call__(self, snap):
        self.snaps.append(snap)
        return self.inner(snap)


def test_cost_of_rounds_up_like_the_ledger():
    assert cost_of(1000, 3600) == 1000
    assert cost_of(1000, 1) == 1  # a fraction of a milli-credit is a whole one
    assert cost_of(0, 3600) == 0 and cost_of(1000, 0) == 0


def test_jobs_that_cost_nothing_run_without_credits():
    sc = small_scenario(departments=_depts(0, 0))
    rs = [TraceRow("borrower", 0, 1000, 8, "a", tier="elastic"), TraceRow("rt", 10, 100, 1, "b", tier="realtime")]
    sc, jobs, _ = prepare(sc, rows=rs, load=None)
    spy = Spy(policies.make("portal"))
    res = simulate(scenario=sc, jobs=jobs, policy=spy)
    assert dict(spy.snaps[0].credits) == {"a": 0, "b": 0}
    assert [j.hold for j in spy.snaps[0].pending] == [0]  # no bid, no base price: free
    big = next(r for r in res.jobs if r.spec.key == "borrower")
    assert big.first_start == 0 and big.borrowed  # borrowed 4 GPUs of b's quota, for free
    assert all(r.finish is not None and not r.budget_blocked for r in res.jobs)
    assert all(v["spent"] == 0 for v in res.spend.values())


def test_unmetered_departments_have_no_credits_in_the_snapshot():
    sc, jobs, _ = prepare(small_scenario(), rows=[TraceRow("j", 0, 100, 1, "a", bid=500)], load=None)
    spy = Spy(policies.make("portal"))
    res = simulate(scenario=sc, jobs=jobs, policy=spy)
    assert spy.snaps[0].credits is None and spy.snaps[0].pending[0].hold == 0
    assert res.spend == {}


def test_a_bid_holds_its_worst_case_waits_for_the_refill_and_uncontested_pays_the_base_price():
    sc = small_scenario(departments=_depts(5000), prices={"a100": {"elastic": 300}})  # b is not metered
    rs = [TraceRow("bidder", 0, 1000, 8, "a", tier="elastic", bid=1000)]
    sc, jobs, _ = prepare(sc, rows=rs, load=None)
    assert jobs[0].max_runtime_s == 3600
    spy = Spy(policies.make("portal"))
    res = simulate(scenario=sc, jobs=jobs, policy=spy)
    assert spy.snaps[0].pending[0].hold == 8000  # 1000 mcr/GPU-h x 8 GPUs x 1 h max runtime
    (r,) = res.jobs
    assert r.budget_blocked and r.first_start == pytest.approx(7 * 86400)  # the weekly refill: 10,000 available
    assert r.borrowed
    # nobody else wanted the GPUs: the base price (300 mcr/GPU-h), not the bid, for 8 GPUs x 1000 s used
    assert res.spend["a"] == {"budget": 5000, "refilled": 5000, "charged": 667, "refunded": 0, "spent": 667,
                              "balance_end": 10000 - 667}


def test_no_refill_leaves_the_job_waiting():
    sc = small_scenario(departments=_depts(5000), simulation={**_sim(small_scenario()), "budget_refill": "none"})
    sc, jobs, _ = prepare(sc, rows=[TraceRow("bidder", 0, 1000, 8, "a", bid=1000)], load=None)
    (r,) = simulate(scenario=sc, jobs=jobs, policy=policies.make("portal")).jobs
    assert r.first_start is None and r.budget_blocked


def _sim(sc):
    o = sc.options
    return {"tick_s": o.tick_s, "preemption_grace_s": o.preemption_grace_s,
            "checkpoint_interval_s": o.checkpoint_interval_s, "strict": o.strict}


def test_budget_refill_is_validated():
    with pytest.raises(ScenarioError, match="budget_refill"):
        small_scenario(simulation={"budget_refill": "daily"})
    with pytest.raises(ScenarioError, match="tier"):
        small_scenario(prices={"a100": {"gold": 5}})


@pytest.mark.parametrize(("borrowed", "refunded"), [(False, True), (True, False)])
def test_preemption_refunds_inside_nominal_and_charges_borrowed_capacity(borrowed, refunded):
    one = {"node_groups": [{"name": "n", "count": 1, "gpus_per_node": 8, "flavor": "a100"}]}
    sc = small_scenario(cluster=one, departments=_depts(10**6), prices={"a100": {"elastic": 3600}})
    rs = [TraceRow("a", 0, 2000, 8, "a", tier="elastic"), TraceRow("b", 700, 100, 8, "b", tier="elastic")]
    sc, jobs, _ = prepare(sc, rows=rs, load=None)
    res = simulate(scenario=sc, jobs=jobs, policy=PreemptOnce(borrowed=borrowed, price=3600 if borrowed else None))
    first = 700 * 8  # charged up to the eviction decision at 1 mcr per GPU-second
    second = 1400 * 8  # the restart runs the 1,400 s left after the 600 s checkpoint
    spend = res.spend["a"]
    assert spend["charged"] == first + second
    assert spend["refunded"] == (first if refunded else 0)
    assert spend["spent"] == spend["charged"] - spend["refunded"]
    assert spend["balance_end"] == 10**6 - spend["spent"]
    assert "b" not in res.spend


def test_a_non_preemptible_job_pays_its_surcharge_on_the_base_price_as_the_portal_charges_it():
    sc = small_scenario(departments=_depts(50_000), prices={"a100": {"elastic": 300}})
    rs = [TraceRow("plain", 0, 3600, 1, "a", tier="elastic", max_runtime_s=3600),
          TraceRow("kept", 0, 3600, 1, "a", tier="elastic", max_runtime_s=3600, preemptible=False,
                   price_surcharge_pct=50)]
    sc, jobs, _ = prepare(sc, rows=rs, load=None)
    spy = Spy(policies.make("portal"))
    res = simulate(scenario=sc, jobs=jobs, policy=spy)
    holds = {j.id: j.hold for j in spy.snaps[0].pending}
    by_key = {j.key: j.id for j in jobs}
    assert holds[by_key["plain"]] == 300 and holds[by_key["kept"]] == 450  # 1 GPU x 1 h max runtime
    assert res.spend["a"]["charged"] == 300 + 450


def test_the_trace_carries_the_surcharge_and_refuses_a_negative_one(tmp_path):
    from simulator.trace import TraceError, read_csv, write_csv

    out = tmp_path / "t.csv"
    write_csv([TraceRow("k", 0, 10, 1, "a", preemptible=False, price_surcharge_pct=25)], out)
    assert read_csv(out)[0].price_surcharge_pct == 25
    out.write_text(out.read_text().replace(",25", ",-5"))
    with pytest.raises(TraceError, match="surcharge"):
        read_csv(out)
