"""Scenarios with several clusters: parsing, bad input, replays that respect selectors and closed clusters, the
What-if replay on several clusters, and the shipped federated Philly scenarios."""

from __future__ import annotations

from pathlib import Path

import pytest

from simulator import policies
from simulator.jobs import prepare
from simulator.scenario import ScenarioError, load_scenario, parse_scenario
from simulator.simulator import simulate
from simulator.whatif import compare

from .helpers import rows

ROOT = Path(__file__).resolve().parents[2]


def federated(**over):
    data = {
        "name": "two",
        "clusters": [
            {"name": "campus", "labels": {"data": "campus"}, "node_groups": [
                {"name": "c", "count": 2, "gpus_per_node": 4, "flavor": "a100"}]},
            {"name": "cloud", "labels": {"data": "cloud"}, "cost_rank": 1, "node_groups": [
                {"name": "k", "count": 2, "gpus_per_node": 4, "flavor": "a100"}]},
        ],
        "departments": {
            "a": {"quotas": {"a100": 8}},
            "b": {"quotas": {"a100": 8}},
        },
        "simulation": {"tick_s": 300, "preemption_grace_s": 30, "checkpoint_interval_s": 600, "strict": True},
    }  # fmt: skip
    data.update(over)
    return parse_scenario(data)


def test_clusters_are_parsed_with_their_nodes_and_per_cluster_quotas():
    sc = federated(departments={"a": {"quotas": {"a100": 8, "a100@cloud": {"nominal": 2, "borrowing_limit": 0}}}})
    assert [c.name for c in sc.clusters] == ["campus", "cloud"]
    assert sc.clusters[1].cost_rank == 1 and sc.clusters[1].labels == (("data", "cloud"),)
    assert {n.cluster for n in sc.nodes()} == {"campus", "cloud"}
    assert sc.capacity() == 16
    quotas = {(q.department, q.flavor, q.cluster): q.nominal for q in sc.quotas()}
    assert quotas == {("a", "a100", None): 8, ("a", "a100", "cloud"): 2}


def test_the_single_cluster_form_is_unchanged():
    sc = parse_scenario({"name": "one", "cluster": {"node_groups": [{"count": 1, "gpus_per_node": 8}]}})
    assert sc.clusters == () and {n.cluster for n in sc.nodes()} == {"default"}


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"cluster": {"node_groups": [{"count": 1, "gpus_per_node": 8}]}}, "not both"),
        ({"clusters": []}, "non-empty list"),
        ({"clusters": [{"labels": {}}]}, "needs a name"),
        ({"clusters": [{"name": "x", "state": "paused", "node_groups": [{"count": 1, "gpus_per_node": 8}]}]},
         "state must be one of"),
        ({"clusters": [{"name": "x", "node_groups": [{"name": "n", "count": 1, "gpus_per_node": 8}]},
                       {"name": "x", "node_groups": [{"name": "m", "count": 1, "gpus_per_node": 8}]}]},
         "names must be unique"),
        ({"clusters": [{"name": "x", "node_groups": [{"name": "n", "count": 1, "gpus_per_node": 8}]},
                       {"name": "y", "node_groups": [{"name": "n", "count": 1, "gpus_per_node": 8}]}]},
         "node group names must be unique"),
        ({"clusters": [{"name": "x"}]}, "node_groups is empty"),
        ({"departments": {"a": {"quotas": {"a100@mars": 4}}}}, "no cluster 'mars'"),
        ({"assign": {"cluster_selector": {"a": "campus"}}}, "must map label keys"),
    ],
)  # fmt: skip
def test_bad_cluster_input_is_refused(change, message):
    with pytest.raises(ScenarioError, match=message):
        federated(**change)


def _replay(sc, policy="portal", n=60):
    sc, jobs, _ = prepare(sc, rows=rows(n), load=None)
    return jobs, simulate(scenario=sc, jobs=jobs, policy=policies.make(policy), name=policy)


def test_a_selector_binds_each_department_to_its_cluster():
    sc = federated(assign={"cluster_selector": {"a": {"data": "campus"}, "b": {"data": "cloud"}}})
    jobs, res = _replay(sc)
    assert all(j.cluster_selector for j in jobs)
    assert res.invalid == {"admission": 0, "preemption": 0, "idle": 0}
    assert all(r.first_start is not None for r in res.jobs)  # strict: an admission elsewhere would raise


def test_preference_spreads_work_but_keeps_it_home_when_there_is_room():
    sc = federated(assign={"cluster_preference": {"a": {"data": "campus"}, "*": {"data": "cloud"}}})
    jobs, res = _replay(sc)
    assert {j.cluster_preference for j in jobs} == {(("data", "campus"),), (("data", "cloud"),)}
    assert all(r.first_start is not None for r in res.jobs)


class Recording:
    """The portal's engine, recording the cluster of every admission."""

    def __init__(self):
        self.inner = policies.make("portal")
        self.clusters: list[str] = []

    def __call__(self, snap):
        res = self.inner(snap)
        self.clusters += [a.cluster for a in res.admissions]
        return res


def test_nothing_starts_on_a_draining_cluster():
    raw = {
        "clusters": [
            {"name": "campus", "state": "draining", "node_groups": [
                {"name": "c", "count": 2, "gpus_per_node": 4, "flavor": "a100"}]},
            {"name": "cloud", "node_groups": [{"name": "k", "count": 2, "gpus_per_node": 4, "flavor": "a100"}]},
        ]
    }  # fmt: skip
    sc, jobs, _ = prepare(federated(**raw), rows=rows(40), load=None)
    rec = Recording()
    res = simulate(scenario=sc, jobs=jobs, policy=rec, name="portal")
    assert res.invalid == {"admission": 0, "preemption": 0, "idle": 0}
    assert all(r.first_start is not None for r in res.jobs)
    assert rec.clusters and set(rec.clusters) == {"cloud"}


def test_preferred_cluster_first_other_cluster_when_busy():
    sc, jobs, _ = prepare(federated(assign={"cluster_preference": {"*": {"data": "cloud"}}}), rows=rows(80), load=None)
    rec = Recording()
    simulate(scenario=sc, jobs=jobs, policy=rec, name="portal")
    # most work starts on the preferred (and dearer) cluster, the overflow on the other
    assert rec.clusters.count("cloud") > rec.clusters.count("campus") > 0


def test_the_simulator_refuses_an_admission_on_a_closed_cluster():
    # a baseline knows nothing of cluster states: its admissions on the draining cluster are invalid
    raw = {
        "clusters": [
            {"name": "campus", "state": "cordoned", "node_groups": [
                {"name": "c", "count": 2, "gpus_per_node": 4, "flavor": "a100"}]},
            {"name": "cloud", "node_groups": [{"name": "k", "count": 2, "gpus_per_node": 4, "flavor": "a100"}]},
        ],
        "simulation": {"strict": False},
    }  # fmt: skip
    _, res = _replay(federated(**raw), policy="fcfs", n=30)
    assert res.invalid["admission"] > 0


def test_whatif_replays_on_several_clusters_with_per_cluster_quotas():
    from engine import ClusterInfo

    groups = [{"name": "c", "count": 2, "gpus_per_node": 4, "flavor": "a100", "cluster": "campus"},
              {"name": "k", "count": 2, "gpus_per_node": 4, "flavor": "a100", "cluster": "cloud"}]  # fmt: skip
    clusters = (ClusterInfo("campus", (("data", "campus"),)), ClusterInfo("cloud", (("data", "cloud"),)))
    res = compare(
        rows(40), node_groups=groups, clusters=clusters,
        quotas={"a": {"a100": 8}, "b": {"a100": 8}},
        proposed_quotas={"a": {"a100": 8, "a100@cloud": {"nominal": 0, "borrowing_limit": 0}}, "b": {"a100": 8}},
        placement={"cluster_preference": {"a": {"data": "cloud"}}},
    )  # fmt: skip
    assert res["current"]["never_started"] == 0 and res["proposed"]["never_started"] == 0
    # a's jobs may no longer use cloud (its preferred cluster): they wait longer
    assert res["diff"]["wait_dept"]["a"]["avg"] > 0


@pytest.mark.parametrize("name", ["philly-federated", "philly-partitioned"])
def test_the_shipped_federated_philly_scenarios_load(name):
    sc = load_scenario(ROOT / "scenarios" / f"{name}.yaml")
    philly = load_scenario(ROOT / "scenarios" / "philly.yaml")
    assert [c.name for c in sc.clusters] == ["campus", "cloud"]
    assert sc.capacity() == philly.capacity() == 256
    key = "cluster_preference" if name == "philly-federated" else "cluster_selector"
    assert sc.assign[key]["*"] == {"data": "cloud"}
