"""``KubernetesBackend.pdb_coverage``: every PodDisruptionBudget in the cluster (the portal's and anyone
else's) mapped onto the portal's evictable pods, with the semantics of the Eviction API, against the fake."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from engine.types import DisruptionBudget
from scheduling.backends.kube.pdbs import pdb_allows, selector_matches

NS = "team-a"


def pdb(raw_api, name, spec, ns=NS):
    body = {"apiVersion": "policy/v1", "kind": "PodDisruptionBudget", "metadata": {"name": name}, "spec": spec}
    k8s.PolicyV1Api(raw_api).create_namespaced_pod_disruption_budget(ns, body)


@pytest.fixture
def two_jobs(kube_backend, kube_fake, make_podset):
    """Job 42 (vision, elastic, 2 pods) and job 43 (vision, backfill, 1 pod), running in team-a."""
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    for podset in (make_podset(job_id=42, pods=2, gpus_per_pod=1),
                   make_podset(job_id=43, pods=1, gpus_per_pod=1, tier="backfill", priority_class="ai-backfill")):
        kube_backend.ensure_pods(podset)
        kube_backend.admit(podset, ("n1",) * podset.pods)
        for name in podset.pod_names:
            kube_fake.run(NS, name)


def covered(coverage):
    return {job: names for (job, _), names in coverage.jobs.items()}


def test_a_teams_pdb_covers_the_pods_it_selects_with_its_status(kube_backend, raw_api, two_jobs):
    pdb(raw_api, "vision", {"minAvailable": 2, "selector": {"matchLabels": {"gpu-portal.io/department": "vision"}}})
    coverage = kube_backend.pdb_coverage()
    assert coverage.pdbs == (DisruptionBudget("team-a/vision", 1),)  # status.disruptionsAllowed: 3 healthy - 2
    assert coverage.jobs == {(42, 1): ("team-a/vision",), (43, 1): ("team-a/vision",)}


@pytest.mark.parametrize(
    ("expressions", "jobs"),
    [
        ([{"key": "gpu-portal.io/tier", "operator": "In", "values": ["backfill", "other"]}], {43}),
        ([{"key": "gpu-portal.io/tier", "operator": "NotIn", "values": ["backfill"]}], {42}),
        ([{"key": "gpu-portal.io/tier", "operator": "Exists"}], {42, 43}),
        ([{"key": "gpu-portal.io/tier", "operator": "DoesNotExist"}], set()),
        ([{"key": "team", "operator": "NotIn", "values": ["x"]}], {42, 43}),  # NotIn matches an absent key
        ([{"key": "gpu-portal.io/job-id", "operator": "In", "values": ["42"]},
          {"key": "gpu-portal.io/pod-index", "operator": "In", "values": ["1"]}], {42}),  # one pod of the gang
    ],
)
def test_match_expressions(kube_backend, raw_api, two_jobs, expressions, jobs):
    pdb(raw_api, "expr", {"minAvailable": 0, "selector": {"matchExpressions": expressions}})
    assert set(covered(kube_backend.pdb_coverage())) == jobs


def test_empty_selector_covers_the_namespace_null_selector_nothing_other_namespaces_never(
        kube_backend, raw_api, two_jobs):
    pdb(raw_api, "none", {"maxUnavailable": 0})  # null selector: no pod
    pdb(raw_api, "elsewhere", {"maxUnavailable": 0, "selector": {}}, ns="team-b")  # selects team-b's pods only
    assert kube_backend.pdb_coverage().jobs == {}
    pdb(raw_api, "everyone", {"minAvailable": 2, "selector": {}})
    coverage = kube_backend.pdb_coverage()
    assert covered(coverage) == {42: ("team-a/everyone",), 43: ("team-a/everyone",)}
    assert coverage.pdbs == (DisruptionBudget("team-a/everyone", 1),)


def test_disruptions_allowed_comes_from_the_status(kube_backend, raw_api, two_jobs):
    def one(job, index):
        return {"matchLabels": {"gpu-portal.io/job-id": job, "gpu-portal.io/pod-index": index}}

    pdb(raw_api, "strict", {"minAvailable": "100%", "selector": one("42", "0")})
    pdb(raw_api, "loose", {"minAvailable": 0, "selector": one("43", "0")})
    # maxUnavailable needs a controller's scale: over the portal's bare pods the controller allows nothing
    pdb(raw_api, "scaled", {"maxUnavailable": 1, "selector": one("42", "1")})
    coverage = kube_backend.pdb_coverage()
    assert {b.name: b.disruptions_allowed for b in coverage.pdbs} == {
        "team-a/strict": 0, "team-a/loose": 1, "team-a/scaled": 0}
    assert covered(coverage) == {42: ("team-a/scaled", "team-a/strict"), 43: ("team-a/loose",)}


@pytest.mark.parametrize(
    ("meta", "status", "allowed"),
    [
        ({"generation": 1}, {"observedGeneration": 1, "disruptionsAllowed": 2}, 2),
        ({"generation": 2}, {"observedGeneration": 1, "disruptionsAllowed": 2}, 0),  # spec not processed: 429
        ({"generation": 1}, {}, 0),  # no status yet
        ({"generation": 1}, {"observedGeneration": 1, "disruptionsAllowed": -1}, 0),  # negative: 403
    ],
)
def test_a_pdb_whose_status_lags_allows_nothing(meta, status, allowed):
    assert pdb_allows({"metadata": meta, "status": status}) == allowed


def test_a_pod_under_two_pdbs_cannot_be_evicted(kube_backend, kube_fake, raw_api, make_podset):
    kube_fake.add_node("n1", gpus=8, labels={"gpu-type": "a100"})
    podset = make_podset(pods=2, gpus_per_pod=1, pdb_min_available=1)  # the job's own PDB, allowing 1
    kube_backend.ensure_pods(podset)
    kube_backend.admit(podset, ("n1", "n1"))
    for name in podset.pod_names:
        kube_fake.run(NS, name)
    assert kube_backend.pdb_coverage().jobs == {(42, 1): ("team-a/job-42-a1",)}
    pdb(raw_api, "namespace", {"minAvailable": 0, "selector": {}})
    coverage = kube_backend.pdb_coverage()
    # the Eviction API answers 500 for a pod selected by more than one PDB, whatever their room
    assert coverage.pdbs == (DisruptionBudget("team-a/job-42-a1 & team-a/namespace", 0),)
    assert coverage.jobs == {(42, 1): ("team-a/job-42-a1 & team-a/namespace",)}
    assert kube_backend.evict(job_id=42, attempt=1, namespace=NS).status != "accepted"


def test_pending_and_terminating_pods_are_not_guarded(kube_backend, kube_fake, raw_api, make_podset, two_jobs):
    kube_backend.ensure_pods(make_podset(job_id=44, pods=1, gpus_per_pod=1))  # gated: Pending
    pdb(raw_api, "all", {"minAvailable": 1, "selector": {}})
    assert set(covered(kube_backend.pdb_coverage())) == {42, 43}
    assert kube_backend.evict(job_id=43, attempt=1, namespace=NS).status == "accepted"  # now terminating
    assert set(covered(kube_backend.pdb_coverage())) == {42}


def test_no_budget_anywhere_is_one_list_and_no_pod_is_read(kube_backend, kube_fake, two_jobs):
    before = len(kube_fake.requests)
    assert kube_backend.pdb_coverage().jobs == {}
    assert [(r.method, r.path) for r in kube_fake.requests[before:]] == [
        ("GET", "/apis/policy/v1/poddisruptionbudgets")]  # the portal's running pods are not listed


def test_the_pods_are_listed_only_in_the_namespaces_with_budgets(kube_backend, kube_fake, raw_api, two_jobs):
    kube_fake.add_namespace("infra", restricted=False)
    pdb(raw_api, "all", {"minAvailable": 1, "selector": {}})
    pdb(raw_api, "dns", {"minAvailable": 1, "selector": {}}, ns="infra")
    before = len(kube_fake.requests)
    assert set(covered(kube_backend.pdb_coverage())) == {42, 43}
    calls = kube_fake.requests[before:]
    assert [(r.method, r.path) for r in calls] == [
        ("GET", "/apis/policy/v1/poddisruptionbudgets"), ("GET", "/api/v1/namespaces/infra/pods"),
        ("GET", f"/api/v1/namespaces/{NS}/pods")]
    assert {r.query["fieldSelector"] for r in calls[1:]} == {"status.phase=Running"}
    for name in ("job-42-a1-0", "job-42-a1-1", "job-43-a1"):
        kube_fake.terminate(NS, name)
    assert kube_backend.pdb_coverage().jobs == {}


def test_budgets_in_many_namespaces_are_matched_from_one_list_of_pods(kube_backend, kube_fake, raw_api, two_jobs):
    from scheduling.backends.kube.pdbs import PDB_NAMESPACES_LISTED_APART

    for i in range(PDB_NAMESPACES_LISTED_APART):
        kube_fake.add_namespace(f"other-{i}", restricted=False)
        pdb(raw_api, "x", {"minAvailable": 1, "selector": {}}, ns=f"other-{i}")
    pdb(raw_api, "all", {"minAvailable": 1, "selector": {}})
    before = len(kube_fake.requests)
    assert set(covered(kube_backend.pdb_coverage())) == {42, 43}
    assert [(r.method, r.path) for r in kube_fake.requests[before:]] == [
        ("GET", "/apis/policy/v1/poddisruptionbudgets"), ("GET", "/api/v1/pods")]


@pytest.mark.parametrize(
    ("selector", "labels", "matches"),
    [
        (None, {"a": "1"}, False),
        ({}, {}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "1", "b": "2"}, True),
        ({"matchLabels": {"a": "1"}}, {"a": "2"}, False),
        ({"matchLabels": {"a": "1"}, "matchExpressions": [{"key": "b", "operator": "Exists"}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "In", "values": []}]}, {"a": "1"}, False),
        ({"matchExpressions": [{"key": "a", "operator": "Gt", "values": ["0"]}]}, {"a": "1"}, False),  # invalid
    ],
)
def test_selector_matches(selector, labels, matches):
    assert selector_matches(selector, labels) is matches
