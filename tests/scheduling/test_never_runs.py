"""A job that could never run is refused at submission with a 400, not accepted to wait for ever: its whole
gang against the largest pool of its flavor on a cluster its selector allows, and against its department's
ceiling (nominal + borrowing limit)."""

from __future__ import annotations

import pytest

from quotas.models import Flavor, Quota
from scheduling.models import Cluster, Job, Node

pytestmark = pytest.mark.django_db


def error_fields(r) -> dict:
    assert r.status_code == 400, r.content
    return {k: [e["code"] for e in errs] for k, errs in r.json()["error"]["fields"].items()}


def test_a_gang_larger_than_the_pool_is_refused_before_approval(lab, client_for, payload):
    # 5 pods x 4 GPUs on an 8-GPU pool: accepted before, it went to approval and then waited for ever.
    r = client_for(lab.alice).post("/api/v1/jobs", payload(pods=5, gpus=4), format="json")
    assert error_fields(r) == {"pods": ["exceeds_largest_pool"]}
    assert "largest of 'a100-80gb' has 8 GPUs" in r.json()["error"]["fields"]["pods"][0]["message"]
    assert Job.objects.count() == 0
    # the gang that fits the pool is taken
    assert client_for(lab.alice).post("/api/v1/jobs", payload(pods=2, gpus=4), format="json").status_code == 201


def test_the_gang_must_fit_one_cluster(lab, client_for, payload):
    east = Cluster.objects.create(name="east", backend="simulated", labels={"region": "eu"})
    Node.objects.create(cluster=east, name="e0", flavor=lab.a100, gpus=8, labels={"gpu-type": "a100"})
    Quota.objects.filter(department=lab.vision).update(borrowing_limit=None)
    c = client_for(lab.alice)
    # 16 GPUs exist, but 8 on each cluster: a job runs on one
    assert error_fields(c.post("/api/v1/jobs", payload(pods=3, gpus=4), format="json")) == {
        "pods": ["exceeds_largest_pool"]}
    assert c.post("/api/v1/jobs", payload(pods=2, gpus=4), format="json").status_code == 201
    # on east alone (its selector) 2 pods of 4 fit on its one 8-GPU node
    body = payload(pods=2, gpus=4, cluster_selector={"region": "eu"})
    assert c.post("/api/v1/jobs", body, format="json").status_code == 201


def test_beyond_the_department_ceiling_is_refused(lab, client_for, payload):
    for i in range(2, 6):
        Node.objects.create(cluster=lab.cluster, name=f"n{i}", flavor=lab.a100, gpus=4, labels={"gpu-type": "a100"})
    c = client_for(lab.alice)
    # vision: nominal 4 + borrowing limit 4 = 8; the pool has 24
    r = c.post("/api/v1/jobs", payload(pods=3, gpus=4), format="json")
    assert error_fields(r) == {"pods": ["exceeds_quota_ceiling"]}
    assert "could ever hold: 8" in r.json()["error"]["fields"]["pods"][0]["message"]
    # in a batch the error names the item
    r = c.post("/api/v1/jobs/batch", {"jobs": [payload(gpus=1), payload(pods=3, gpus=4)]}, format="json")
    assert error_fields(r) == {"jobs.1.pods": ["exceeds_quota_ceiling"]}
    assert Job.objects.count() == 0
    # an unlimited borrowing limit has no ceiling but the pool
    Quota.objects.filter(department=lab.vision).update(borrowing_limit=None)
    assert c.post("/api/v1/jobs", payload(pods=3, gpus=4), format="json").status_code == 201


def test_a_selector_no_cluster_of_the_flavor_matches_is_refused_on_the_selector(lab, client_for, payload):
    # h100 exists on "west"; the selector allows only "east", which has a100s alone.
    h100 = Flavor.objects.create(name="h100", resource_name="nvidia.com/gpu", node_labels={"gpu-type": "h100"})
    west = Cluster.objects.create(name="west", backend="simulated", labels={"region": "us"})
    east = Cluster.objects.create(name="east", backend="simulated", labels={"region": "eu"})
    Node.objects.create(cluster=west, name="w0", flavor=h100, gpus=8, labels={"gpu-type": "h100"})
    Node.objects.create(cluster=east, name="e0", flavor=lab.a100, gpus=8, labels={"gpu-type": "a100"})
    Quota.objects.create(department=lab.vision, flavor=h100, nominal=8, borrowing_limit=0)
    r = client_for(lab.alice).post("/api/v1/jobs", payload(flavor="h100", cluster_selector={"region": "eu"}),
                                   format="json")
    assert error_fields(r) == {"cluster_selector": ["no_matching_cluster"]}
    assert "offers 'h100' (clusters that do: west)" in r.json()["error"]["fields"]["cluster_selector"][0]["message"]
    body = payload(flavor="h100", cluster_selector={"region": "us"})
    assert client_for(lab.alice).post("/api/v1/jobs", body, format="json").status_code == 201
