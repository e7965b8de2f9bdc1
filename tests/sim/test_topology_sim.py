"""The simulator's topology: a scenario declares levels and the slowdown of a gang spread over a level, the
replay slows such gangs down and reports the share placed compactly, and the placement switch that ignores the
levels is the comparison."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.types import DEFAULT_CLUSTER
from simulator import metrics, policies
from simulator.scenario import JobSpec, ScenarioError, parse_scenario
from simulator.simulator import simulate

RACK, BLOCK = "topology.kubernetes.io/rack", "topology.kubernetes.io/block"


def racked(rack_nodes: int, racks: int = 2, **topology):
    groups = [{"name": f"r{k}", "count": rack_nodes, "gpus_per_node": 8, "flavor": "a100",
               "labels": {RACK: f"r{k}", BLOCK: "b0"}} for k in range(racks)]
    return parse_scenario({
        "name": "racks",
        "cluster": {"node_groups": groups},
        "departments": {"a": {"quotas": {"a100": {"nominal": 8 * rack_nodes * racks}}, "members": {"alice": "pi"}}},
        "topology": {"levels": [BLOCK, RACK, "kubernetes.io/hostname"], "slowdown": {"rack": 1.3}, **topology},
        "simulation": {"tick_s": 300, "strict": True},
    })


def gang(i: int, pods: int, submit: float = 0.0, duration: float = 1000.0) -> JobSpec:
    return JobSpec(id=i, key=f"j{i}", submit=submit, duration_s=duration, pods=pods, gpus_per_pod=8, department="a",
                   flavor="a100", user="alice", max_runtime_s=7200.0)


def run(sc, jobs, placement="aware"):
    sc = replace(sc, options=replace(sc.options, topology_placement=placement))
    return simulate(scenario=sc, jobs=jobs, policy=policies.make("portal"), name="portal")


def test_a_gang_spread_over_racks_runs_slower_by_the_scenario_factor():
    res = run(racked(1), [gang(1, 2)])  # one node per rack: a 2-node gang must span both
    rec = res.jobs[0]
    assert rec.finish - rec.first_start == pytest.approx(1300.0)
    assert (rec.gang_starts, rec.spread_starts) == (1, 1)


def test_a_gang_within_one_rack_runs_at_full_speed():
    res = run(racked(2), [gang(1, 2)])
    rec = res.jobs[0]
    assert rec.finish - rec.first_start == pytest.approx(1000.0)
    assert rec.spread_starts == 0
    figures = metrics.topology_figures(res.jobs)
    assert figures["gangs"] == 1 and figures["gangs_compact_share"] == 1.0


def test_placement_that_ignores_the_levels_spreads_where_the_engine_would_not():
    # r0: 2 nodes, r1: 2 nodes; a single 8-GPU job first takes a node of r0 by name. A 2-node gang then fits
    # only r1 whole: aware placement puts it there; ignoring the levels, best fit by name spreads it.
    jobs = [JobSpec(id=1, key="s", submit=0.0, duration_s=5000.0, pods=1, gpus_per_pod=8, department="a",
                    flavor="a100", user="alice", max_runtime_s=7200.0), gang(2, 2, submit=10.0)]
    aware = {r.spec.id: r for r in run(racked(2), jobs).jobs}
    ignore = {r.spec.id: r for r in run(racked(2), jobs, "ignore").jobs}
    assert aware[2].spread_starts == 0
    assert ignore[2].spread_starts == 1
    assert ignore[2].finish - ignore[2].first_start == pytest.approx(1300.0)


def test_a_scenario_without_topology_reports_no_gang_figures():
    sc = racked(1)
    flat = replace(sc, topology=None, clusters=())
    res = simulate(scenario=flat, jobs=[gang(1, 2)], policy=policies.make("portal"), name="portal")
    assert metrics.topology_figures(res.jobs) == {}
    assert res.jobs[0].finish - res.jobs[0].first_start == pytest.approx(1000.0)


def test_the_levels_reach_the_default_cluster():
    assert racked(1).clusters[0].name == DEFAULT_CLUSTER
    assert racked(1).clusters[0].topology_levels == (BLOCK, RACK, "kubernetes.io/hostname")


@pytest.mark.parametrize("topology, message", [
    ({"slowdown": {"row": 1.2}}, "'row' is not one of the levels"),
    ({"slowdown": {"rack": 0.5}}, "a factor of 1 or more"),
    ({"levels": []}, "non-empty list"),
    ({"levels": [RACK, RACK]}, "distinct"),
    ({"spread": 1}, "levels and slowdown"),
])
def test_bad_topology_is_a_scenario_error(topology, message):
    with pytest.raises(ScenarioError, match=message):
        racked(1, **topology)


def test_an_unknown_placement_switch_is_a_scenario_error():
    with pytest.raises(ScenarioError, match="topology_placement"):
        parse_scenario({"name": "x", "cluster": {"node_groups": [{"name": "n", "count": 1, "gpus_per_node": 8,
                                                                   "flavor": "a100"}]},
                        "departments": {"a": {"quotas": {"a100": {"nominal": 8}}}},
                        "simulation": {"topology_placement": "sometimes"}})
